// Package console is the web console that `sluice serve` serves at "/": the
// rules it loaded, what they are doing now (and what the service holds:
// slices of budgets, concurrency slots), a playground that runs a limit
// through every algorithm (package sim, as `sluice sim` does) and a walk
// that steps one key through one algorithm request by request (sim.NewWalk,
// as `sluice sim --steps` does), neither touching the live store.
//
// A Console is an observe.Observer: the service passes it every decision's
// events (Observe) and every refused key (Refused), and mounts Handler. The
// page is rendered on the server (html/template), so the rules table reads
// without JavaScript; a small script, embedded like the stylesheet, draws the
// live chart from the JSON endpoints and runs the playground. Nothing is
// fetched from elsewhere.
//
// The endpoints, for scripts as much as for the page:
//
//	GET  /                       the page
//	GET  /console/api/config     the configuration view (JSON)
//	GET  /console/api/live       per-rule counts per second (JSON); ?since=UNIX
//	                             returns the seconds from since on only;
//	                             ?range=6h the last hours a point a minute;
//	                             and what is held now: the stores' slices
//	                             (Options.Slices) and the concurrency slots
//	                             (Options.Slots), holding.go
//	GET  /console/api/rlqs       the RLQS budgets most in demand and their
//	                             shares (Options.RLQS), rlqs.go
//	POST /console/api/sim        a playground run (JSON or form in, JSON out)
//	POST /console/playground     the same run, rendered as the page (no script)
//	POST /console/api/steps      a walk: one key through one algorithm, step
//	                             by step (JSON or form in, JSON out)
//	POST /console/steps          the same walk, rendered as the page
//	GET  /console/steps          the page (the step-through's own URL; also
//	                             GET /console/playground)
//	GET  /console/assets/...     the stylesheet and the script
//	POST /console/login          the sign-in, with Options.Token (login.go)
//
// Anyone who reaches the listener may run the playground and walks, so a
// run is bounded by the service's caps (Options.Limits: its body, ticks,
// arrivals, a walk's requests, the answer's bytes) and runs go one at a
// time; a POST a page of another origin makes a browser send is refused
// (package sameorigin), and a run's body must be JSON or the page's form
// (else 415). Mounted on `sluice serve`'s listener, the console is behind
// the service's check of the Host too (sameorigin.Hosts): a page on a
// rebinding domain reaches none of it.
package console

import (
	"errors"
	"net/http"
	"sort"
	"time"

	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
	"github.com/sluice-go/sluice/cmd/sluice/internal/sameorigin"
	"github.com/sluice-go/sluice/internal/fastclock"
	"github.com/sluice-go/sluice/observe"
)

// Rule is one loaded rule, as the rules table shows it.
type Rule struct {
	// Domain is the rule's domain (the RLS domain), Path its descriptor
	// path ("remote_address" or "header_match=api > user_id").
	Domain, Path string
	// Name is the rule's name: the Policy of its observe.Events.
	Name string
	// Algorithm is the algorithm's name ("token-bucket", ...).
	Algorithm string
	// Rate units per Period, Burst: the limit.
	Rate   int64
	Period time.Duration
	Burst  int64
	// Shadow rules only report; Unlimited rules never refuse.
	Shadow, Unlimited bool
	// Debt is how many units past empty a charge may leave a key owing
	// (sluice.Limit.Debt); Charge, whether the rule charges its hits
	// whatever the answer (rlsconfig.Rule.Charge).
	Debt   int64
	Charge bool
	// Unit is the period's unit as the configuration names it ("second",
	// "minute"), if it does.
	Unit string
}

// Limit returns the rule's limit in ParseLimit's RATE/PERIOD form, "" for
// an unlimited rule.
func (r Rule) Limit() string {
	if r.Unlimited || r.Rate <= 0 || r.Period <= 0 {
		return ""
	}
	return formatLimit(r.Rate, r.Period)
}

// ConfigView is what the console shows of the service's configuration.
type ConfigView struct {
	// Sources names where the configuration came from (files, directories).
	Sources []string
	// Origin says where the rules came from: a file, an xDS server.
	Origin string
	// Loaded is when the configuration in use was loaded.
	Loaded time.Time
	// LastError is the last load's error, "" when it succeeded; LastErrorAt
	// is when it failed. The rules shown are then the ones still in use.
	LastError   string
	LastErrorAt time.Time
	Rules       []Rule
}

// Options configure a Console.
type Options struct {
	// Config returns the configuration in use; it is called for each page
	// and each /console/api/config request. Nil shows no rules.
	Config func() ConfigView
	// Window is how far back the live view goes, in whole seconds; default
	// 5 minutes, at most an hour.
	Window time.Duration
	// TopK is how many of the most refused keys the live view lists;
	// default 10, at most 1000.
	TopK int
	// Clock returns the time; default a cheap wall clock (package
	// fastclock: Observe reads it on every event). Tests set it.
	Clock func() time.Time
	// Token is the service's HTTP bearer token, when it asks for one: a
	// browser, which cannot send it when it opens a page, signs in with
	// it at /console/login instead and gets a session (login.go).
	Token string
	// Slices returns the slices of budgets the service's stores hold
	// (redisstore.WithSlices), each with its n keys holding the most; nil
	// when no store slices budgets, and the page then says how to turn
	// them on. It is called for each page and each live report, and with
	// n 0 by SampleSlices. Nil: no store slices budgets.
	Slices func(n int) []StoreSlices
	// Slots returns the concurrency leases held now, the n keys holding
	// the most. It is called for each page and each live report. Nil: the
	// page shows no slots.
	Slots func(n int) Slots
	// RLQS returns the RLQS budgets shared now, the n whose clients
	// demand the most, each with its n largest shares; nil when the
	// service does not run RLQS. It is called for each page and each
	// /console/api/rlqs request. Nil: the page shows no RLQS budgets.
	RLQS func(n int) *RLQS
	// Limits are the service's caps (package limits): a run's requests,
	// ticks, arrivals, body and answer. A field left 0 is its default.
	Limits limits.Table
}

// Console collects the live counts and serves the page. Its methods are
// safe for concurrent use.
type Console struct {
	config  func() ConfigView
	unix    func() int64 // the current second, Unix seconds
	window  int64        // seconds
	live    *live
	refused *topK
	page    *pageAssets
	runs    *gate // the playground's
	lim     limits.Table
	// token is Options.Token, session the cookie value that stands for it
	// ("" without a token).
	token, session string
	slices         func(n int) []StoreSlices // Options.Slices
	slots          func(n int) Slots         // Options.Slots
	rlqs           func(n int) *RLQS         // Options.RLQS
	topN           int                       // Options.TopK
	// sliceLive holds each slicing store's decisions and slices per
	// second (SampleSlices), sampler the counters last sampled.
	sliceLive *live
	sampler   sliceSampler
}

// The bounds of Options.
const (
	defaultWindow = 5 * time.Minute
	maxWindow     = time.Hour
	defaultTopK   = 10
	maxTopK       = 1000
)

// New returns a Console, or an error when an option is out of range.
func New(o Options) (*Console, error) {
	if o.Window == 0 {
		o.Window = defaultWindow
	}
	if o.Window < time.Second || o.Window > maxWindow || o.Window%time.Second != 0 {
		return nil, errors.New("console: Window must be a whole number of seconds from 1s to 1h")
	}
	if o.TopK == 0 {
		o.TopK = defaultTopK
	}
	if o.TopK < 1 || o.TopK > maxTopK {
		return nil, errors.New("console: TopK must be from 1 to 1000")
	}
	if o.Config == nil {
		o.Config = func() ConfigView { return ConfigView{} }
	}
	o.Limits.FillDefaults()
	unix := func() int64 { return fastclock.Micros() / 1e6 }
	if clock := o.Clock; clock != nil {
		unix = func() int64 { return clock().Unix() }
	}
	page, err := loadPage()
	if err != nil {
		return nil, err
	}
	w := int64(o.Window / time.Second)
	session := ""
	if o.Token != "" {
		session = sessionValue(o.Token)
	}
	return &Console{
		config:  o.Config,
		unix:    unix,
		window:  w,
		live:    newLive(int(w)),
		refused: newTopK(o.TopK, w/2),
		page:    page,
		runs:    newGate(),
		lim:     o.Limits,
		token:   o.Token,
		session: session,
		slices:  o.Slices,
		slots:   o.Slots,
		rlqs:    o.RLQS,
		topN:    o.TopK,
		// Stores are named by Options.Slices (main, per_second): a few.
		sliceLive: newLive(int(w)),
		sampler:   sliceSampler{last: map[string][3]int64{}},
	}, nil
}

var _ observe.Observer = (*Console)(nil)

// Observe counts one event in its policy's current second. It takes no lock
// (except once a second per policy) and allocates nothing for a policy it
// has seen.
func (c *Console) Observe(e observe.Event) {
	c.live.get(e.Policy).add(c.unix(), e.Outcome, e.Latency)
}

// Charged counts units charged under rule whatever the answer (a charge
// rule's hits, /v1/charge), in its current second.
func (c *Console) Charged(rule string, units int64) {
	c.live.get(rule).charge(c.unix(), units)
}

// Refused counts one refusal of key under rule in a bounded summary of the
// keys refused most often recently (the last one to two halves of the
// window): its memory is bounded however many keys there are.
func (c *Console) Refused(rule, key string) {
	c.refused.add(c.unix(), rule, key)
}

// RuleLive is one rule's part of a Live report.
type RuleLive struct {
	Rule string `json:"rule"`
	// Points are the seconds that hold counts, oldest first.
	Points []Point `json:"points"`
	// Totals sums Points (its T is the first second asked for, its
	// latencies the average and maximum over them).
	Totals Point `json:"totals"`
}

// Live is the report of GET /console/api/live.
type Live struct {
	// Now is the current second, Unix seconds; it is partly counted.
	Now int64 `json:"now"`
	// Since is the first second reported.
	Since int64 `json:"since"`
	// WindowS is how many seconds the console keeps a point a second for.
	WindowS int64 `json:"window_s"`
	// StepS is the seconds a point stands for: 1, or 60 for a range
	// longer than the window (LiveRange).
	StepS int64 `json:"step_s"`
	// Rules holds the configuration's named rules in its order (of its
	// first maxPageRules rules), then the other policies seen, by name.
	Rules []RuleLive `json:"rules"`
	// Top lists the keys refused most often recently, the most first.
	Top []Refusal `json:"top"`
	// holding is what is held now: the slices of budgets and the concurrency
	// slots (holding.go).
	holding
}

// Live returns the counts per second from the Unix second since (at most
// the window back) to now.
func (c *Console) Live(since int64) Live {
	now := c.unix()
	since = min(max(since, now-c.window+1), now)
	return c.report(now, since, 1, func(s *series) []Point { return s.points(since, now) })
}

// LiveRange returns the counts over the last d (at most MaxRange), from the
// Unix second since on when it is later: a point a second when d is within
// the window, else a point a minute, from the minute holding the first
// second asked for on. A page asks for the whole range once, then for the
// minutes since its last poll.
func (c *Console) LiveRange(d time.Duration, since int64) Live {
	now := c.unix()
	secs := min(max(int64(d/time.Second), 1), int64(MaxRange/time.Second))
	since = max(since, now-secs+1)
	if secs <= c.window {
		return c.Live(since)
	}
	since = min(since, now) / coarseStep * coarseStep
	return c.report(now, since, coarseStep, func(s *series) []Point { return s.minutePoints(since, now) })
}

// report builds a Live from since to now, each rule's points read by pts.
func (c *Console) report(now, since, step int64, pts func(*series) []Point) Live {
	out := Live{Now: now, Since: since, WindowS: c.window, StepS: step, Rules: []RuleLive{}, Top: c.refused.top(now), holding: c.holding(pts)}
	byName := *c.live.m.Load()
	seen := make(map[string]bool, len(byName))
	add := func(name string) {
		if seen[name] {
			return
		}
		seen[name] = true
		rl := RuleLive{Rule: name, Points: []Point{}, Totals: Point{T: since}}
		if s := byName[name]; s != nil {
			rl.Points = append(rl.Points, pts(s)...)
		}
		rl.Totals = sumPoints(since, rl.Points)
		out.Rules = append(out.Rules, rl)
	}
	rules := c.config().Rules
	for _, r := range rules[:min(len(rules), maxPageRules)] {
		if r.Name != "" {
			add(r.Name)
		}
	}
	var rest []string
	for name := range byName {
		if !seen[name] {
			rest = append(rest, name)
		}
	}
	sort.Strings(rest)
	for _, name := range rest {
		add(name)
	}
	return out
}

// sumPoints sums points into one whose T is since; its latency mean is the
// mean over every event the points' latencies cover.
func sumPoints(since int64, points []Point) Point {
	t := Point{T: since}
	var latSum int64
	for _, p := range points {
		t.Allowed += p.Allowed
		t.Denied += p.Denied
		t.ShadowDenied += p.ShadowDenied
		t.Error += p.Error
		t.Degraded += p.Degraded
		t.Charged += p.Charged
		t.LatencyMaxUS = max(t.LatencyMaxUS, p.LatencyMaxUS)
		t.LatencyN += p.LatencyN
		latSum += p.LatencyAvgUS * p.LatencyN
	}
	if t.LatencyN > 0 {
		t.LatencyAvgUS = latSum / t.LatencyN
	}
	return t
}

// Handler returns the console's handler: the page at "/", its assets and
// JSON endpoints under "/console/". Mount it at the root of the service's
// mux; it answers 404 to every other path.
func (c *Console) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", c.servePage)
	mux.HandleFunc("GET /console/{$}", c.servePage)
	mux.Handle("GET /console/assets/", http.StripPrefix("/console/assets/", http.HandlerFunc(c.serveAsset)))
	mux.HandleFunc("GET /console/api/config", c.serveConfig)
	mux.HandleFunc("GET /console/api/live", c.serveLive)
	mux.HandleFunc("GET /console/api/rlqs", c.serveRLQS)
	mux.HandleFunc("POST /console/api/sim", c.serveSim)
	mux.HandleFunc("POST /console/playground", c.servePlayground)
	mux.HandleFunc("POST /console/api/steps", c.serveStepsAPI)
	mux.HandleFunc("POST /console/steps", c.serveSteps)
	// The forms' own URLs show the page too, so that they can be opened,
	// bookmarked and reloaded.
	mux.HandleFunc("GET /console/steps", c.servePage)
	mux.HandleFunc("GET /console/playground", c.servePage)
	if c.token != "" {
		mux.HandleFunc("POST "+loginPath, c.serveLogin)
	}
	return sameorigin.Handler(mux)
}
