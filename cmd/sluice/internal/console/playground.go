package console

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
	"github.com/sluice-go/sluice/cmd/sluice/internal/sim"
	"github.com/sluice-go/sluice/cmd/sluice/internal/trace"
)

// The playground's shapes of traffic.
const (
	ShapeDefault = "default" // sim's scenario: 4 quiet ticks, a burst of 8, then 2 per tick
	ShapeSteady  = "steady"  // Rate arrivals every tick
	ShapeBurst   = "burst"   // Size arrivals in the first tick, then Rate per tick
	ShapeRamp    = "ramp"    // from about Rate/Ticks in the first tick up to Rate in the last
	ShapeTrace   = "trace"   // a pasted trace in replay's format
)

// defaultTick is a tick's width when a run names none.
const defaultTick = 100 * time.Millisecond

// SimRequest is a playground run: a limit (typed, or a loaded rule's) and a
// shape of traffic. It mirrors `sluice sim`'s flags, and a run gives the
// totals `sluice sim` prints for the same input: the default shape is sim's
// default scenario; the others are the trace they spread (n arrivals of a
// tick at evenly spaced times from 2025-11-24 16:00 UTC, as sim spreads
// its own), which `sluice sim --trace FILE --ticks N` reads the same.
type SimRequest struct {
	// Rule, when set, names a loaded rule whose rate, period and burst are
	// the limit (Burst, when given, overrides the rule's).
	Rule string `json:"rule,omitempty"`
	// Limit is RATE/PERIOD (ParseLimit's form); default 10/1s.
	Limit string `json:"limit,omitempty"`
	// Burst is the buckets' capacity; nil means the rule's, or the
	// limit's (sluice.ParseLimit's: the rate, unless Limit says "burst N").
	Burst *int64 `json:"burst,omitempty"`
	// Window is the windows' length, a Go duration; "" for sim's default.
	Window string `json:"window,omitempty"`
	// Tick is one column's time, a Go duration; default 100ms.
	Tick string `json:"tick,omitempty"`
	// Ticks is the number of columns, at most the service's run-ticks
	// (200); 0 means 30, or what a trace spans (up to 30).
	Ticks int `json:"ticks,omitempty"`
	// Shape is default, steady, burst, ramp or trace.
	Shape string `json:"shape,omitempty"`
	// Rate is the arrivals per tick of steady, the last tick of ramp, and
	// the ticks after burst's first.
	Rate int `json:"rate,omitempty"`
	// Size is burst's first tick.
	Size int `json:"size,omitempty"`
	// Trace is replay's JSON lines, for the trace shape.
	Trace string `json:"trace,omitempty"`
	// Algorithms are the rows to return and draw; none means all seven.
	Algorithms []string `json:"algorithms,omitempty"`
}

// SimTotals sums one algorithm's row, in units.
type SimTotals struct {
	Admitted   int64 `json:"admitted"` // every admitted unit, delayed or not
	Delayed    int64 `json:"delayed"`  // admitted after a wait (leaky-bucket)
	Denied     int64 `json:"denied"`
	Errors     int64 `json:"errors"`       // costs over capacity: never passable
	Later      int64 `json:"later"`        // delayed units leaving after the last tick
	MaxDelayUS int64 `json:"max_delay_us"` // µs
}

// SimRow is what one algorithm did, per tick, in units.
type SimRow struct {
	Algorithm string    `json:"algorithm"`
	About     string    `json:"about"`
	Admitted  []int64   `json:"admitted"`
	Delayed   []int64   `json:"delayed"`
	Denied    []int64   `json:"denied"`
	Errors    []int64   `json:"errors"`
	Totals    SimTotals `json:"totals"`
}

// SimResult is the answer of POST /console/api/sim.
type SimResult struct {
	// Limit is the limit run, RATE/PERIOD, and Burst its burst.
	Limit string `json:"limit"`
	Burst int64  `json:"burst"`
	// Source describes the arrivals.
	Source string `json:"source"`
	// TickUS is one tick's width and StartUS tick 0's start, µs.
	TickUS  int64 `json:"tick_us"`
	StartUS int64 `json:"start_us"`
	Ticks   int   `json:"ticks"`
	// WindowUS is the windows' length and WindowRate the units each admits.
	WindowUS   int64 `json:"window_us"`
	WindowRate int64 `json:"window_rate"`
	// Requests is the number of arrivals simulated, Omitted those after the
	// last tick.
	Requests int `json:"requests"`
	Omitted  int `json:"omitted"`
	// Units reports whether counts are units (some cost is not 1).
	Units bool `json:"units"`
	// Arrivals counts the units arriving in each tick.
	Arrivals []int64  `json:"arrivals"`
	Rows     []SimRow `json:"rows"`
	// SVG is the figure `sluice sim --svg` draws, of the rows returned.
	SVG string `json:"svg"`
}

// simulate runs req, with the rules of view for req.Rule, within lt's
// caps: run-ticks bounds its answer (up to about 5 KB a tick with every
// row, the figure most of it), run-arrivals its work (each arrival is
// decided by all seven algorithms).
func simulate(req SimRequest, view ConfigView, lt *limits.Table) (*SimResult, error) {
	limText, burst, err := req.limit(view)
	if err != nil {
		return nil, err
	}
	lim, err := parseLimit(limText, burst)
	if err != nil {
		return nil, err
	}
	lim = lim.WithAlgorithm(sluice.TokenBucket)
	if err := lim.Validate(); err != nil {
		return nil, fmt.Errorf("limit %s burst %d: %w", limText, lim.Burst, err)
	}
	cfg := sim.Config{Limit: lim, Tick: defaultTick, Ticks: req.Ticks}
	if req.Tick != "" {
		if cfg.Tick, err = time.ParseDuration(req.Tick); err != nil {
			return nil, fmt.Errorf("tick %q: %w", req.Tick, err)
		}
	}
	if cfg.Tick < time.Microsecond || cfg.Tick%time.Microsecond != 0 {
		return nil, fmt.Errorf("tick %v: want a whole number of microseconds, at least 1µs", cfg.Tick)
	}
	if req.Window != "" {
		if cfg.Window, err = time.ParseDuration(req.Window); err != nil {
			return nil, fmt.Errorf("window %q: %w", req.Window, err)
		}
		if cfg.Window < 0 {
			return nil, fmt.Errorf("window %v is negative", cfg.Window)
		}
	}
	if err := checkTicks(cfg.Ticks, lt); err != nil {
		return nil, err
	}
	keep, err := algorithms(req.Algorithms)
	if err != nil {
		return nil, err
	}
	arrivals, err := req.arrivals(&cfg, lt)
	if err != nil {
		return nil, err
	}
	res, err := sim.Run(cfg, arrivals)
	if err != nil {
		return nil, err
	}
	rows := res.Rows[:0:0]
	for _, r := range res.Rows {
		if keep == nil || keep[r.Kind().String()] {
			rows = append(rows, r)
		}
	}
	res.Rows = rows
	var svg bytes.Buffer
	if err := sim.WriteSVG(&svg, res); err != nil {
		return nil, err
	}
	out := &SimResult{
		Limit: limText, Burst: lim.Burst, Source: res.Config.Source,
		TickUS: res.Config.Tick.Microseconds(), StartUS: res.Start, Ticks: res.Config.Ticks,
		WindowUS: res.Config.Window.Microseconds(), WindowRate: res.WindowRate,
		Requests: res.Requests, Omitted: res.Omitted, Units: res.Units,
		Arrivals: res.Arrivals, Rows: []SimRow{}, SVG: svg.String(),
	}
	for _, r := range res.Rows {
		t := r.Totals
		out.Rows = append(out.Rows, SimRow{
			Algorithm: r.Kind().String(), About: r.About,
			Admitted: r.Admitted, Delayed: r.Delayed, Denied: r.Denied, Errors: r.Errors,
			Totals: SimTotals{Admitted: t.Admitted, Delayed: t.Delayed, Denied: t.Denied, Errors: t.Errors, Later: t.Later, MaxDelayUS: t.MaxDelay},
		})
	}
	return out, nil
}

// limit returns the limit's text and burst: the rule's, or the typed ones.
// A nil burst leaves the limit's own, as ParseLimit reads it.
func (req SimRequest) limit(view ConfigView) (string, *int64, error) {
	limText, burst := strings.TrimSpace(req.Limit), req.Burst
	if req.Rule != "" {
		var rule *Rule
		for i := range view.Rules {
			if view.Rules[i].Name == req.Rule {
				rule = &view.Rules[i]
				break
			}
		}
		if rule == nil {
			return "", nil, fmt.Errorf("no loaded rule is named %q", req.Rule)
		}
		if limText = rule.Limit(); limText == "" {
			return "", nil, fmt.Errorf("rule %q is unlimited: nothing to simulate", req.Rule)
		}
		if burst == nil {
			burst = &rule.Burst
		}
	}
	if limText == "" {
		limText = "10/1s"
	}
	return limText, burst, nil
}

// algorithms returns the set of algorithm names to keep, nil for all.
func algorithms(names []string) (map[string]bool, error) {
	if len(names) == 0 {
		return nil, nil
	}
	keep := map[string]bool{}
	for _, n := range names {
		a, err := sluice.ParseAlgorithm(strings.TrimSpace(n))
		if err != nil {
			return nil, err
		}
		keep[a.String()] = true
	}
	return keep, nil
}

// checkTicks refuses a run's ticks below 0 or over lt's run-ticks.
func checkTicks(ticks int, lt *limits.Table) error {
	if ticks < 0 {
		return fmt.Errorf("ticks %d: want 0 (the default) or more", ticks)
	}
	return lt.Check(limits.RunTicks, `"ticks"`, int64(ticks))
}

// arrivals returns the shape's arrivals, at most lt's run-arrivals, and
// sets cfg's Ticks, Start and Source as `sluice sim` would for the same
// input.
func (req SimRequest) arrivals(cfg *sim.Config, lt *limits.Table) ([]sim.Arrival, error) {
	shape := req.Shape
	if shape == "" {
		shape = ShapeDefault
	}
	if shape == ShapeTrace {
		arrivals, err := readTrace(req.Trace, lt)
		if err != nil {
			return nil, err
		}
		cfg.Source = fmt.Sprintf("pasted trace, %d requests", len(arrivals))
		return arrivals, nil
	}
	if cfg.Ticks == 0 {
		cfg.Ticks = sim.MaxAutoTicks
	}
	n := cfg.Ticks
	counts := make([]int, n)
	switch shape {
	case ShapeDefault:
		cfg.Source = sim.DefaultSource
		cfg.Start = sim.DefaultStart
		counts = sim.DefaultArrivals(n)
	case ShapeSteady:
		if req.Rate < 1 {
			return nil, fmt.Errorf("steady: rate %d per tick, want at least 1", req.Rate)
		}
		for i := range counts {
			counts[i] = req.Rate
		}
		cfg.Source = fmt.Sprintf("steady, %d per tick", req.Rate)
	case ShapeBurst:
		if req.Size < 1 || req.Rate < 0 {
			return nil, fmt.Errorf("burst: size %d (want at least 1), then %d per tick (want 0 or more)", req.Size, req.Rate)
		}
		for i := range counts {
			counts[i] = req.Rate
		}
		counts[0] = req.Size
		cfg.Source = fmt.Sprintf("a burst of %d, then %d per tick", req.Size, req.Rate)
	case ShapeRamp:
		if req.Rate < 1 {
			return nil, fmt.Errorf("ramp: rate %d per tick at the top, want at least 1", req.Rate)
		}
		for i := range counts {
			counts[i] = int((int64(req.Rate)*int64(i+1) + int64(n) - 1) / int64(n))
		}
		cfg.Source = fmt.Sprintf("a ramp up to %d per tick", req.Rate)
	default:
		return nil, fmt.Errorf("shape %q: want default, steady, burst, ramp or trace", req.Shape)
	}
	total := int64(0)
	for _, c := range counts {
		if int64(c) > lt.RunArrivals-total {
			return nil, lt.Over(limits.RunArrivals, fmt.Sprintf("the arrivals of %d ticks of %s", n, cfg.Source))
		}
		total += int64(c)
	}
	return sim.Spread(counts, sim.DefaultStart, cfg.Tick, "sim"), nil
}

// readTrace reads a pasted trace in replay's format, as `sluice sim --trace`
// does, at most lt's run-arrivals of it.
func readTrace(text string, lt *limits.Table) ([]sim.Arrival, error) {
	tr := trace.NewReader(strings.NewReader(text))
	var out []sim.Arrival
	for {
		req, err := tr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("trace: %w", err)
		}
		if len(req.Parts) > 0 {
			return nil, fmt.Errorf("trace: line %d is a composite (parts): the playground runs one limit", req.Line)
		}
		if int64(len(out)) == lt.RunArrivals {
			return nil, lt.Over(limits.RunArrivals, "the trace's requests")
		}
		out = append(out, sim.Arrival{T: req.T, Key: req.Key, Cost: req.Cost, Charge: req.Charge})
	}
	if len(out) == 0 {
		return nil, errors.New("trace: no requests (paste JSON lines such as {\"t_us\": 1764000000000000, \"key\": \"user:1\"})")
	}
	return out, nil
}

// formatLimit writes rate/period in ParseLimit's form, the period as short
// as Go writes it ("1m", not "1m0s").
func formatLimit(rate int64, period time.Duration) string {
	p := period.String()
	if strings.HasSuffix(p, "m0s") {
		p = p[:len(p)-2]
	}
	if strings.HasSuffix(p, "h0m") {
		p = p[:len(p)-2]
	}
	return fmt.Sprintf("%d/%s", rate, p)
}
