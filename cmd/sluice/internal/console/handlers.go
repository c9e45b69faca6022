package console

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-go/sluice"

	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
	"github.com/sluice-go/sluice/internal/algo"
)

//go:embed assets templates
var files embed.FS

// pageAssets are the parsed template and the asset server.
type pageAssets struct {
	tmpl   *template.Template
	assets http.Handler
}

func loadPage() (*pageAssets, error) {
	tmpl, err := template.New("page.html").Funcs(template.FuncMap{
		"when":   fmtTime,
		"usTime": func(us int64) string { return time.UnixMicro(us).UTC().Format("2006-01-02T15:04:05.999999Z") },
		"period": fmtPeriod,
		"durUS":  durUS,
		"yesno": func(b bool) string {
			if b {
				return "yes"
			}
			return "no"
		},
	}).ParseFS(files, "templates/page.html")
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	sub, err := fs.Sub(files, "assets")
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	return &pageAssets{tmpl: tmpl, assets: http.FileServerFS(sub)}, nil
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

func fmtPeriod(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	s := formatLimit(1, d)
	return s[strings.IndexByte(s, '/')+1:]
}

// maxPageRules bounds the rules the page lists (its rules table, the
// playground's choices) and the live report's rules not seen yet, so that
// the page stays small whatever the configuration; /console/api/config
// gives every one.
const maxPageRules = 500

// pageData is what the page template renders.
type pageData struct {
	Config ConfigView
	// RulesTotal is how many rules the configuration has; Config.Rules
	// holds the first maxPageRules of them.
	RulesTotal int
	Live       Live
	// RLQS is the RLQS budgets' view, nil without Options.RLQS.
	RLQS       *RLQS
	Algorithms []string
	Form       formValues
	Sim        *SimResult
	SimSVG     template.HTML
	SimError   string
	// MaxTicks and MaxSteps are the service's run-ticks and walk-requests.
	MaxTicks int64
	MaxSteps int64
	// TopN is how many keys the held tables list at most (Options.TopK).
	TopN int
	// Steps is the steps form as typed, Walk its walk, StepsError why
	// it failed.
	Steps      stepsForm
	Walk       *StepsResult
	StepsError string
}

// formValues are the playground form's fields, as typed.
type formValues struct {
	Rule, Limit, Burst, Window, Tick, Ticks, Shape, Rate, Size, Trace string
	Algorithms                                                        map[string]bool
}

func defaultForm() formValues {
	all := map[string]bool{}
	for _, k := range algo.Kinds() {
		all[k.String()] = true
	}
	return formValues{Limit: "10/1s", Tick: defaultTick.String(), Shape: ShapeDefault, Rate: "2", Size: "8", Algorithms: all}
}

// What a page answers: a GET, or a run (its result or its error, and its
// form as typed).
type pageFor int

const (
	forGet pageFor = iota
	forSim
	forSteps
)

// render writes the page of d. The page that answers a run is written
// into a buffer that refuses to grow past the service's answer-bytes;
// over it, the page is written again without the run's result, the cap's
// error in its place, with status 400, and if that is still over (the
// form as typed is), with the forms' defaults.
func (c *Console) render(w http.ResponseWriter, status int, d pageData, run pageFor) {
	d.Config = c.config()
	d.RulesTotal = len(d.Config.Rules)
	d.Config.Rules = d.Config.Rules[:min(len(d.Config.Rules), maxPageRules)]
	d.Live = c.Live(0)
	d.RLQS = c.rlqsView()
	d.MaxTicks = c.lim.RunTicks
	d.MaxSteps = c.lim.WalkRequests
	d.TopN = c.topN
	for _, k := range algo.Kinds() {
		d.Algorithms = append(d.Algorithms, k.String())
	}
	if d.Steps == (stepsForm{}) {
		d.Steps = defaultStepsForm()
	}
	limit := int64(math.MaxInt64)
	if run != forGet {
		limit = c.lim.AnswerBytes
	}
	page, err := c.execute(d, limit)
	if errors.Is(err, errAnswerFull) {
		status = http.StatusBadRequest
		over := c.lim.Over(limits.AnswerBytes, "the page with this run").Error()
		if d.Walk != nil || d.Sim != nil {
			if run == forSteps {
				d.StepsError = over + "; fewer requests make a shorter page, and POST /console/api/steps answers the walk as JSON, without the page's markup"
			} else {
				d.SimError = over + "; fewer ticks, or a shorter trace, make a shorter page"
			}
			d.Walk, d.Sim, d.SimSVG = nil, nil, ""
			page, err = c.execute(d, limit)
		}
		if errors.Is(err, errAnswerFull) { // the form as typed is over it
			d.Form, d.Steps = defaultForm(), defaultStepsForm()
			e := &d.SimError
			if run == forSteps {
				e = &d.StepsError
			}
			if *e != "" {
				*e += " (the form as typed is not shown again: " + over + ")"
			} else {
				*e = over
			}
			page, err = c.execute(d, math.MaxInt64)
		}
	}
	if err != nil {
		http.Error(w, "console: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'")
	w.WriteHeader(status)
	w.Write(page)
}

// execute writes the page of d, at most limit bytes of it (else
// errAnswerFull).
func (c *Console) execute(d pageData, limit int64) ([]byte, error) {
	buf := &answerBuffer{max: limit}
	err := c.page.tmpl.Execute(buf, d)
	return buf.b, err
}

// errAnswerFull is an answerBuffer's error past its max.
var errAnswerFull = errors.New("the answer is over its bound")

// answerBuffer holds an answer as it is written, refusing to grow past max
// bytes (errAnswerFull): a template stops at its writer's first error, so
// an answer over the bound costs no more than the bound.
type answerBuffer struct {
	b   []byte
	max int64
}

func (a *answerBuffer) Write(p []byte) (int, error) {
	n := int64(len(a.b) + len(p))
	if n > a.max {
		return 0, errAnswerFull
	}
	if n > int64(cap(a.b)) {
		// Double, up to max: append grows a large slice by a quarter,
		// which allocates about five times the answer in all.
		b := make([]byte, 0, min(max(2*int64(cap(a.b)), n, 16<<10), a.max))
		a.b = append(b, a.b...)
	}
	a.b = append(a.b, p...)
	return len(p), nil
}

func (c *Console) servePage(w http.ResponseWriter, _ *http.Request) {
	c.render(w, http.StatusOK, pageData{Form: defaultForm()}, forGet)
}

func (c *Console) serveAsset(w http.ResponseWriter, r *http.Request) {
	if ext := r.URL.Path[strings.LastIndexByte(r.URL.Path, '.')+1:]; ext != "css" && ext != "js" {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Cache-Control", "no-cache")
	c.page.assets.ServeHTTP(w, r)
}

// ruleJSON is a Rule in GET /console/api/config.
type ruleJSON struct {
	Domain    string `json:"domain"`
	Path      string `json:"path"`
	Name      string `json:"name"`
	Algorithm string `json:"algorithm"`
	Rate      int64  `json:"rate"`
	Period    string `json:"period"`
	PeriodUS  int64  `json:"period_us"`
	Burst     int64  `json:"burst"`
	Shadow    bool   `json:"shadow"`
	Unlimited bool   `json:"unlimited"`
	Unit      string `json:"unit,omitempty"`
	// Limit is RATE/PERIOD, "" for an unlimited rule.
	Limit string `json:"limit"`
}

// configJSON is the answer of GET /console/api/config.
type configJSON struct {
	Sources     []string   `json:"sources"`
	Origin      string     `json:"origin,omitempty"`
	Loaded      *time.Time `json:"loaded"`
	LastError   string     `json:"last_error,omitempty"`
	LastErrorAt *time.Time `json:"last_error_at,omitempty"`
	Rules       []ruleJSON `json:"rules"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func (c *Console) serveConfig(w http.ResponseWriter, _ *http.Request) {
	v := c.config()
	out := configJSON{Sources: append([]string{}, v.Sources...), Origin: v.Origin, Loaded: timePtr(v.Loaded), LastError: v.LastError, LastErrorAt: timePtr(v.LastErrorAt), Rules: []ruleJSON{}}
	for _, r := range v.Rules {
		out.Rules = append(out.Rules, ruleJSON{
			Domain: r.Domain, Path: r.Path, Name: r.Name, Algorithm: r.Algorithm,
			Rate: r.Rate, Period: fmtPeriod(r.Period), PeriodUS: r.Period.Microseconds(), Burst: r.Burst,
			Shadow: r.Shadow, Unlimited: r.Unlimited, Unit: r.Unit, Limit: r.Limit(),
		})
	}
	writeJSON(w, http.StatusOK, out)
}

func (c *Console) serveLive(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var l Live
	var since int64
	if s := q.Get("since"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("since=%q: want Unix seconds", s)})
			return
		}
		since = n
	}
	if rs := q.Get("range"); rs != "" {
		d, err := time.ParseDuration(rs)
		if err != nil || d < time.Second || d > MaxRange {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("range=%q: want a duration from 1s to %v, such as 5m or 6h", rs, MaxRange)})
			return
		}
		l = c.LiveRange(d, since)
	} else {
		l = c.Live(since)
	}
	bp := bufPool.Get().(*[]byte)
	b := append(appendLive((*bp)[:0], &l), '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.Write(b)
	if cap(b) <= 4<<20 { // a buffer grown by an unusually long report is not kept
		*bp = b
		bufPool.Put(bp)
	}
}

// runTimeout bounds the time a run may take to read its request and write
// its answer: a client that sends or reads slowly opens the gate then.
const runTimeout = 10 * time.Second

// The errors of a run that are not about its values.
var (
	errBusy      = errors.New("the playground is busy with another run: try again in a second")
	errMediaType = errors.New("send a run as JSON (Content-Type: application/json) or as the page's form (application/x-www-form-urlencoded)")
)

// statusOf is the HTTP status of a run's error: each is the request's.
func statusOf(err error) int {
	var over *limits.Exceeded
	switch {
	case errors.Is(err, errMediaType):
		return http.StatusUnsupportedMediaType
	case errors.As(err, &over) && over.Row == limits.RunBodyBytes:
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, errBusy):
		return http.StatusServiceUnavailable
	}
	return http.StatusBadRequest
}

// run reads a playground run from r and runs it, through the console's
// gate; while another run holds the gate it answers errBusy (with
// Retry-After set) at once, without reading r. It returns the form's fields
// as typed, to show them again, and done, which opens the gate again: call
// it once the answer is written.
func (c *Console) run(w http.ResponseWriter, r *http.Request) (form formValues, res *SimResult, done func(), err error) {
	done, err = c.enterRun(w)
	if err != nil {
		return defaultForm(), nil, done, err
	}
	req, form, err := readSimRequest(w, r, &c.lim)
	if err != nil {
		return form, nil, done, err
	}
	res, err = simulate(req, c.config(), &c.lim)
	return form, res, done, err
}

// enterRun takes the console's gate for a run (a playground run, a walk) and
// bounds the time the run may take to read and answer; while another run
// holds the gate it answers errBusy (with Retry-After set) at once. It
// returns done, which opens the gate again: call it once the answer is
// written, whatever the error.
func (c *Console) enterRun(w http.ResponseWriter) (done func(), err error) {
	done, ok := c.runs.enter()
	if !ok {
		w.Header().Set("Retry-After", "1")
		return func() {}, errBusy
	}
	// A ResponseWriter that cannot (ErrNotSupported) waits on its client
	// as long as the client takes.
	rc := http.NewResponseController(w)
	deadline := time.Now().Add(runTimeout)
	_ = rc.SetReadDeadline(deadline)
	_ = rc.SetWriteDeadline(deadline)
	return done, nil
}

func (c *Console) serveSim(w http.ResponseWriter, r *http.Request) {
	_, res, done, err := c.run(w, r)
	defer done()
	if err != nil {
		writeJSON(w, statusOf(err), map[string]string{"error": err.Error()})
		return
	}
	c.writeAnswer(w, res)
}

func (c *Console) servePlayground(w http.ResponseWriter, r *http.Request) {
	form, res, done, err := c.run(w, r)
	defer done()
	d := pageData{Form: form, Sim: res}
	if err != nil {
		d.SimError = err.Error()
		c.render(w, statusOf(err), d, forSim)
		return
	}
	d.SimSVG = template.HTML(res.SVG) // written by sim.WriteSVG, which escapes every text it draws
	c.render(w, http.StatusOK, d, forSim)
}

// readSimRequest reads a playground run from a JSON body or a form, at
// most lt's run-body-bytes; it returns the form's fields as typed too, to
// show them again.
func readSimRequest(w http.ResponseWriter, r *http.Request, lt *limits.Table) (SimRequest, formValues, error) {
	var req SimRequest
	form := defaultForm()
	f, err := readBody(w, r, &req, lt)
	if err != nil || f == nil {
		return req, form, err
	}
	form = formValues{
		Rule: f.Get("rule"), Limit: f.Get("limit"), Burst: f.Get("burst"), Window: f.Get("window"),
		Tick: f.Get("tick"), Ticks: f.Get("ticks"), Shape: f.Get("shape"), Rate: f.Get("rate"),
		Size: f.Get("size"), Trace: f.Get("trace"), Algorithms: map[string]bool{},
	}
	for _, a := range f["algorithms"] {
		form.Algorithms[a] = true
	}
	req = SimRequest{Rule: form.Rule, Limit: form.Limit, Window: form.Window, Tick: form.Tick, Shape: form.Shape, Trace: form.Trace, Algorithms: f["algorithms"]}
	req.Burst, err = formNumbers(form.Burst, form.Ticks, form.Rate, form.Size, &req.Ticks, &req.Rate, &req.Size)
	return req, form, err
}

// formNumbers reads the whole numbers a run's form shares, the playground's
// and the stepper's: the burst (nil when left empty) and the shape's ticks,
// rate and size into their fields (left as they are when empty).
func formNumbers(burst, ticks, rate, size string, dTicks, dRate, dSize *int) (*int64, error) {
	for _, e := range []error{formInt("ticks", ticks, dTicks), formInt("rate", rate, dRate), formInt("size", size, dSize)} {
		if e != nil {
			return nil, e
		}
	}
	s := strings.TrimSpace(burst)
	if s == "" {
		return nil, nil
	}
	b, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("burst %q is not a whole number", s)
	}
	return &b, nil
}

// parseLimit is a run's limit: text as sluice.ParseLimit reads it, with
// the burst asked for (none: the limit's own).
func parseLimit(text string, burst *int64) (sluice.Limit, error) {
	lim, err := sluice.ParseLimit(text)
	if err != nil {
		return lim, fmt.Errorf("limit %q: %w", text, err)
	}
	if burst != nil {
		if *burst < 0 {
			return lim, fmt.Errorf("burst %d is negative", *burst)
		}
		lim = lim.WithBurst(*burst)
	}
	return lim, nil
}

// readBody reads a run's body, at most lt's run-body-bytes: JSON into v
// (and a nil form), or the page's form. A body of another type (or of none
// said) is errMediaType: read as a form it would be an empty one, and run
// the defaults in its place.
func readBody(w http.ResponseWriter, r *http.Request, v any, lt *limits.Table) (url.Values, error) {
	r.Body = http.MaxBytesReader(w, r.Body, lt.RunBodyBytes)
	ctype := r.Header.Get("Content-Type")
	ct, _, _ := mime.ParseMediaType(ctype)
	switch ct {
	case "application/json":
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			return nil, bodyError("the request's JSON", err, lt)
		}
		return nil, nil
	case "application/x-www-form-urlencoded":
	case "":
		return nil, fmt.Errorf("%w; the request has no Content-Type", errMediaType)
	default:
		return nil, fmt.Errorf("%w, not %q", errMediaType, ctype)
	}
	if err := r.ParseForm(); err != nil {
		return nil, bodyError("the form", err, lt)
	}
	return r.PostForm, nil
}

// formInt reads a form's whole number s into *dst, leaving it for "".
func formInt(name, s string, dst *int) error {
	if s = strings.TrimSpace(s); s == "" {
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("%s %q is not a whole number", name, s)
	}
	*dst = n
	return nil
}

// bodyError is the error of reading what (a body), lt's run-body-bytes'
// when the body is over it.
func bodyError(what string, err error, lt *limits.Table) error {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return lt.Over(limits.RunBodyBytes, "the request body")
	}
	return fmt.Errorf("%s: %w", what, err)
}

// writeAnswer writes a run's answer v as JSON, or the service's
// answer-bytes error (400) when its encoding is over that cap.
func (c *Console) writeAnswer(w http.ResponseWriter, v any) {
	// An Encoder writes its whole encoding in one Write: answerWriter
	// checks its size before anything is sent, and it is not copied.
	aw := &answerWriter{w: w, max: c.lim.AnswerBytes}
	err := json.NewEncoder(aw).Encode(v)
	switch {
	case errors.Is(err, errAnswerFull):
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": c.lim.Check(limits.AnswerBytes, "the answer", aw.size).Error()})
	case err != nil && !aw.sent:
		http.Error(w, "console: "+err.Error(), http.StatusInternalServerError)
	}
}

// answerWriter writes a JSON answer to w, 200, when it is at most max
// bytes; it is written once (json.Encoder's one Write).
type answerWriter struct {
	w    http.ResponseWriter
	max  int64
	size int64 // the answer's size, once written or refused
	sent bool
}

func (a *answerWriter) Write(p []byte) (int, error) {
	if a.size = int64(len(p)); a.size > a.max {
		return 0, errAnswerFull
	}
	h := a.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	a.w.WriteHeader(http.StatusOK)
	a.sent = true
	return a.w.Write(p)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "console: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
