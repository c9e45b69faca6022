package console

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
	"github.com/sluice-go/sluice/cmd/sluice/internal/sim"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
)

// ShapeTyped is the steps' own shape of traffic: offsets typed as
// sim.ParseRequests reads them ("0ms x3, 200ms, 1s cost=2").
const ShapeTyped = "typed"

// StepsRequest is a walk: one key through one algorithm, request by request
// (sim.NewWalk, as `sluice sim --steps` runs it). The limit is a loaded
// rule's (with its debt allowance) or typed ("10/1s debt 20"), as for a
// playground run; the requests are typed offsets (charge=N for a charge),
// one of the playground's shapes, or a pasted trace (whose first key is
// walked; "charge" lines charge). A walk takes at most the service's walk-requests requests, and
// its answer is at most its answer-bytes (package limits).
type StepsRequest struct {
	// Rule, when set, names a loaded rule whose algorithm, rate, period
	// and burst are the limit (Algorithm and Burst, when given, override
	// the rule's).
	Rule string `json:"rule,omitempty"`
	// Algorithm is the algorithm walked; default the rule's, else
	// token-bucket.
	Algorithm string `json:"algorithm,omitempty"`
	// Limit is RATE/PERIOD; default 10/1s.
	Limit string `json:"limit,omitempty"`
	// Burst: nil means the rule's, or the limit's (the rate).
	Burst *int64 `json:"burst,omitempty"`
	// Shape is typed (the default), default, steady, burst, ramp or trace.
	Shape string `json:"shape,omitempty"`
	// Requests are the typed offsets; default sim.DefaultWalk.
	Requests string `json:"requests,omitempty"`
	// Rate, Size, Tick and Ticks make a shape, as in SimRequest.
	Rate  int    `json:"rate,omitempty"`
	Size  int    `json:"size,omitempty"`
	Tick  string `json:"tick,omitempty"`
	Ticks int    `json:"ticks,omitempty"`
	// Trace is replay's JSON lines, for the trace shape.
	Trace string `json:"trace,omitempty"`
}

// StepsResult is the answer of POST /console/api/steps: the walk, and the
// limit it ran.
type StepsResult struct {
	*sim.Walk
	// Limit is RATE/PERIOD and Burst its burst.
	Limit string `json:"limit"`
	Burst int64  `json:"burst"`
	// Source describes the requests; LeftOut counts a trace's requests of
	// other keys than the one walked.
	Source  string `json:"source"`
	LeftOut int    `json:"left_out"`
}

// walk runs req with the rules of view, within lt's caps: walk-requests,
// and answer-bytes on the walk's text (an answer shows it with its markup,
// which the answer's writer checks again).
func walk(req StepsRequest, view ConfigView, lt *limits.Table) (*StepsResult, error) {
	limText, burst, err := SimRequest{Rule: req.Rule, Limit: req.Limit, Burst: req.Burst}.limit(view)
	if err != nil {
		return nil, err
	}
	var rule *Rule
	for i := range view.Rules {
		if req.Rule != "" && view.Rules[i].Name == req.Rule {
			rule = &view.Rules[i]
			break
		}
	}
	alg := strings.TrimSpace(req.Algorithm)
	if alg == "" && rule != nil {
		alg = rule.Algorithm
	}
	if alg == "" {
		alg = "token-bucket"
	}
	a, err := sluice.ParseAlgorithm(alg)
	if err != nil {
		return nil, err
	}
	lim, err := parseLimit(limText, burst)
	if err != nil {
		return nil, err
	}
	if rule != nil && lim.Debt == 0 && storelink.Refundable(algo.Kind(a)) {
		lim.Debt = rule.Debt // the rule's debt allowance, which its charges may leave
	}
	p, err := storelink.Params(lim.WithAlgorithm(a))
	if err != nil {
		return nil, fmt.Errorf("limit %s burst %d: %w", limText, lim.Burst, err)
	}
	out := &StepsResult{Limit: limText, Burst: lim.Burst}
	reqs, start, err := req.requests(out, lt)
	if err != nil {
		return nil, err
	}
	if out.Walk, err = sim.NewWalk(p, start, reqs, lt.AnswerBytes); err != nil {
		if errors.Is(err, sim.ErrWalkTooLarge) {
			return nil, lt.Over(limits.AnswerBytes, fmt.Sprintf("the walk of %d requests", len(reqs)))
		}
		return nil, err
	}
	return out, nil
}

// requests returns the walk's requests, at most lt's walk-requests, and
// the time they are shown from, and describes them in out.
func (req StepsRequest) requests(out *StepsResult, lt *limits.Table) ([]sim.Arrival, int64, error) {
	shape := req.Shape
	if shape == "" || shape == ShapeTyped {
		text := req.Requests
		if strings.TrimSpace(text) == "" {
			text = sim.DefaultWalk
		}
		reqs, err := sim.ParseRequests(text, sim.DefaultStart, "sim", int(min(lt.WalkRequests, math.MaxInt32)))
		if errors.Is(err, sim.ErrTooManyRequests) {
			return nil, 0, lt.Over(limits.WalkRequests, "the walk's requests")
		}
		if err != nil {
			return nil, 0, fmt.Errorf("requests: %w", err)
		}
		out.Source = "typed: " + text
		return reqs, sim.DefaultStart, nil
	}
	cfg := sim.Config{Tick: defaultTick, Ticks: req.Ticks}
	if req.Tick != "" {
		var err error
		if cfg.Tick, err = time.ParseDuration(req.Tick); err != nil {
			return nil, 0, fmt.Errorf("tick %q: %w", req.Tick, err)
		}
	}
	if cfg.Tick < time.Microsecond || cfg.Tick%time.Microsecond != 0 {
		return nil, 0, fmt.Errorf("tick %v: want a whole number of microseconds, at least 1µs", cfg.Tick)
	}
	if err := checkTicks(cfg.Ticks, lt); err != nil {
		return nil, 0, err
	}
	reqs, err := SimRequest{Shape: shape, Rate: req.Rate, Size: req.Size, Trace: req.Trace}.arrivals(&cfg, lt)
	if err != nil {
		return nil, 0, err
	}
	reqs, out.LeftOut = sim.OneKey(reqs)
	if err := lt.Check(limits.WalkRequests, "the walk's requests ("+cfg.Source+")", int64(len(reqs))); err != nil {
		return nil, 0, err
	}
	out.Source = cfg.Source
	if shape == ShapeTrace {
		return reqs, reqs[0].T, nil
	}
	return reqs, sim.DefaultStart, nil
}

// stepsForm are the steps form's fields, as typed.
type stepsForm struct {
	Rule, Algorithm, Limit, Burst, Shape, Requests, Rate, Size, Tick, Ticks, Trace string
}

func defaultStepsForm() stepsForm {
	return stepsForm{Algorithm: "", Limit: "10/1s", Shape: ShapeTyped, Requests: sim.DefaultWalk, Rate: "2", Size: "8", Tick: defaultTick.String(), Ticks: "10"}
}

// readStepsRequest reads a walk from a JSON body or the page's form, at
// most lt's run-body-bytes; it returns the form's fields as typed, to show
// them again.
func readStepsRequest(w http.ResponseWriter, r *http.Request, lt *limits.Table) (StepsRequest, stepsForm, error) {
	var req StepsRequest
	form := defaultStepsForm()
	f, err := readBody(w, r, &req, lt)
	if err != nil || f == nil {
		return req, form, err
	}
	form = stepsForm{
		Rule: f.Get("rule"), Algorithm: f.Get("algorithm"), Limit: f.Get("limit"), Burst: f.Get("burst"),
		Shape: f.Get("shape"), Requests: f.Get("requests"), Rate: f.Get("rate"), Size: f.Get("size"),
		Tick: f.Get("tick"), Ticks: f.Get("ticks"), Trace: f.Get("trace"),
	}
	req = StepsRequest{Rule: form.Rule, Algorithm: form.Algorithm, Limit: form.Limit, Shape: form.Shape, Requests: form.Requests, Tick: form.Tick, Trace: form.Trace}
	req.Burst, err = formNumbers(form.Burst, form.Ticks, form.Rate, form.Size, &req.Ticks, &req.Rate, &req.Size)
	return req, form, err
}

// runSteps reads a walk from r and runs it, through the gate the
// playground's runs take (see run).
func (c *Console) runSteps(w http.ResponseWriter, r *http.Request) (form stepsForm, res *StepsResult, done func(), err error) {
	done, err = c.enterRun(w)
	if err != nil {
		return defaultStepsForm(), nil, done, err
	}
	req, form, err := readStepsRequest(w, r, &c.lim)
	if err != nil {
		return form, nil, done, err
	}
	res, err = walk(req, c.config(), &c.lim)
	return form, res, done, err
}

func (c *Console) serveStepsAPI(w http.ResponseWriter, r *http.Request) {
	_, res, done, err := c.runSteps(w, r)
	defer done()
	if err != nil {
		writeJSON(w, statusOf(err), map[string]string{"error": err.Error()})
		return
	}
	c.writeAnswer(w, res)
}

func (c *Console) serveSteps(w http.ResponseWriter, r *http.Request) {
	form, res, done, err := c.runSteps(w, r)
	defer done()
	d := pageData{Form: defaultForm(), Steps: form, Walk: res}
	status := http.StatusOK
	if err != nil {
		d.StepsError, status = err.Error(), statusOf(err)
	}
	c.render(w, status, d, forSteps)
}
