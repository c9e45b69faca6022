// Package rlqs shares one global rate among the clients of Envoy's Rate
// Limit Quota Service (RLQS): an Allocator turns the clients' usage
// reports into token-bucket assignments whose rates, together, never
// exceed the budget's rate, at any instant.
//
// Each assignment is a lease: nothing acknowledges it and a client
// enforces its last one until its time to live runs out, so a rate
// granted counts as outstanding until the instant it was sent plus the
// TTL plus a slack for its trip, whatever was sent since. Capacity is
// granted only from what is not outstanding; a decrease frees capacity
// one lease later. Shares follow weighted max-min over the demand each
// client reports (allowed + denied per second, on the server's clock);
// newcomers start from a small reserve; a client that goes keeps its
// lease until it ends; a client idle for a few reports is told to
// abandon the bucket. For a lease's time after it starts an Allocator
// grants nothing: a server that restarted cannot see the leases granted
// before it, which its clients still enforce. Several replicas share a
// budget through slices of its rate leased from a store (Config.Sliced,
// slices.go). SEMANTICS.md ("RLQS")
// states the bound on what all
// clients together admit, and Check (bound.go) checks a trace against it.
//
// The package has no clock, no I/O and no gRPC: time is a parameter (µs),
// and the service (cmd/sluice/internal/serve) turns Actions into the
// protocol's messages. Grants and leases are whole tokens per fill
// interval, in integers; demands and shares are fixed point (1/65536 of a
// token), which only the estimate of what clients want depends on.
package rlqs

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Config are an Allocator's parameters; a zero field is its default.
type Config struct {
	// ReportInterval is how often clients report (Envoy: 5s, fixed).
	ReportInterval time.Duration
	// Round is how often the caller calls Round (default 1s).
	Round time.Duration
	// TTL is each assignment's time to live, whole seconds (Envoy reads
	// only the seconds); default two rounds and the slack, rounded up
	// (3s). Rounds resend a grant before its TTL runs out, so a client
	// that hears nothing for a TTL falls back; and a cut frees capacity
	// a lease (TTL and slack) after it is sent, so the TTL is how fast
	// shares follow demand. It must exceed a round and the slack.
	TTL time.Duration
	// SteadyTTL is the TTL of the grants of a budget whose clients'
	// demand fits its rate with room to spare (at its last round every
	// client's share was all it asks, with the headroom, and what was
	// left would take any one of them doubling it): their shares hold
	// still, so they live longer and reports renew them, not rounds, and
	// a client that asks more is granted it from the room at once without
	// cutting the others; default the report
	// interval, two rounds and the slack, rounded up (8s). A budget whose
	// demand outgrows its rate grants with TTL from its next round; its
	// steady grants' leases end within a SteadyTTL and the slack, which
	// is how long a rise waits for cuts then. Blanket answers of buckets
	// no budget shares, which only reports renew, have it too. At least
	// TTL.
	SteadyTTL time.Duration
	// Slack is added to the TTL when a lease's end is counted: the time
	// an assignment may take to reach its client and start its timer
	// (default Round). An assignment delivered later than that may be
	// enforced past its lease.
	Slack time.Duration
	// Burst is δ: a grant of r tokens per second has a bucket of
	// max(1, ⌈r·δ⌉) tokens (default 1s).
	Burst time.Duration
	// Reserve is the share of each budget's rate the rounds keep free for
	// newcomers (default 0.02).
	Reserve float64
	// Headroom is how much above its demand a client's share may go, so
	// that growth shows in its reports (default 0.05).
	Headroom float64
	// Band is the hysteresis: a share that moves by less than this
	// fraction of the grant in force (and less than a token) is not sent;
	// the grant in force is resent instead, which keeps the client's
	// bucket (default 1/32).
	Band float64
	// IdleReports is how many report intervals of zero usage make a
	// client abandon a bucket, and of silence make it count as gone
	// (default 3).
	IdleReports int
	// Sliced makes each budget's capacity the slice of its rate a store
	// leased this replica (SetSlices, slices.go) instead of the whole
	// rate: several replicas share the rate. A budget has no slice (it
	// grants nothing) until one is set.
	Sliced bool
	// SliceLife is how long a slice lasts from the instant it was asked
	// for (default a lease, TTL + Slack, and three rounds): a replica
	// grants from a slice only what ends before it does.
	SliceLife time.Duration
}

// The defaults of Config's fields.
const (
	DefaultReportInterval = 5 * time.Second
	DefaultRound          = time.Second
	DefaultBurst          = time.Second
	DefaultReserve        = 0.02
	DefaultHeadroom       = 0.05
	DefaultBand           = 1.0 / 32
	DefaultIdleReports    = 3
)

// withDefaults fills c's zero fields and checks it.
func (c Config) withDefaults() (Config, error) {
	if c.ReportInterval == 0 {
		c.ReportInterval = DefaultReportInterval
	}
	if c.Round == 0 {
		c.Round = DefaultRound
	}
	if c.Slack == 0 {
		c.Slack = c.Round
	}
	if c.TTL == 0 {
		c.TTL = (2*c.Round + c.Slack + time.Second - 1).Truncate(time.Second)
	}
	if c.SteadyTTL == 0 {
		c.SteadyTTL = max(c.TTL, (c.ReportInterval + 2*c.Round + c.Slack + time.Second - 1).Truncate(time.Second))
	}
	if c.Burst == 0 {
		c.Burst = DefaultBurst
	}
	if c.Reserve == 0 {
		c.Reserve = DefaultReserve
	}
	if c.Headroom == 0 {
		c.Headroom = DefaultHeadroom
	}
	if c.Band == 0 {
		c.Band = DefaultBand
	}
	if c.IdleReports == 0 {
		c.IdleReports = DefaultIdleReports
	}
	if c.SliceLife == 0 {
		c.SliceLife = c.SteadyTTL + c.Slack + 3*c.Round
	}
	switch {
	case c.ReportInterval < 100*time.Millisecond || c.Round < time.Millisecond || c.Slack < 0 || c.Burst < 0:
		return c, fmt.Errorf("rlqs: report interval %v, round %v, slack %v, burst %v: want a report interval of 100ms or more, a round of 1ms or more, no negative slack or burst", c.ReportInterval, c.Round, c.Slack, c.Burst)
	case c.TTL%time.Second != 0 || c.TTL <= c.Round+c.Slack || c.SteadyTTL%time.Second != 0 || c.SteadyTTL < c.TTL:
		return c, fmt.Errorf("rlqs: TTL %v, steady TTL %v: want whole seconds, a TTL of more than a round and the slack (%v), a steady TTL of at least the TTL", c.TTL, c.SteadyTTL, c.Round+c.Slack)
	case !(c.Reserve >= 0 && c.Reserve < 1 && c.Headroom >= 0 && c.Headroom <= 10 && c.Band >= 0 && c.Band < 1):
		return c, fmt.Errorf("rlqs: reserve %v, headroom %v, band %v: want a reserve and a band in [0, 1), a headroom in [0, 10]", c.Reserve, c.Headroom, c.Band)
	case c.IdleReports < 1:
		return c, fmt.Errorf("rlqs: idle reports %d: want 1 or more", c.IdleReports)
	case c.SliceLife <= c.SteadyTTL+c.Slack:
		return c, fmt.Errorf("rlqs: slice life %v: want more than the longest lease (steady TTL and slack, %v)", c.SliceLife, c.SteadyTTL+c.Slack)
	}
	return c, nil
}

// A Budget is one global rate the clients share: Rate tokens per Fill.
type Budget struct {
	// Key names the budget: reports that name one key share its rate.
	Key string
	// Family groups budgets for metrics (a rule's name): a bounded label.
	Family string
	// Rate is R, the tokens all clients together may be granted per
	// Fill, 0 to 2^32-1.
	Rate int64
	// Fill is the fill interval of the token buckets handed out: whole
	// seconds (Envoy divides by the seconds), 1s to MaxFill.
	Fill time.Duration
}

// MaxFill is the longest fill interval a Budget may have (a 365-day
// year, envoy's longest unit).
const MaxFill = 365 * 24 * time.Hour

// ErrBudget is what a Budget that cannot be shared wraps.
var ErrBudget = errors.New("rlqs: budget")

// Check says why b cannot be shared, nil when it can.
func (b Budget) Check() error {
	switch {
	case b.Rate < 0 || b.Rate > maxTokens:
		return fmt.Errorf("%w %q: rate %d: want 0 to %d tokens per fill interval", ErrBudget, b.Key, b.Rate, int64(maxTokens))
	case b.Fill < time.Second || b.Fill > MaxFill || b.Fill%time.Second != 0:
		return fmt.Errorf("%w %q: fill interval %v: want whole seconds from 1s to %v (Envoy reads only the seconds)", ErrBudget, b.Key, b.Fill, MaxFill)
	}
	return nil
}

// A Holder is one client's hold on one budget: a client (an RLQS stream)
// reporting one bucket. The caller numbers them; a number is never used
// for two holders.
type Holder uint64

// An Action is what the server sends a holder.
type Action struct {
	// Wait: send nothing for the bucket; the client keeps the assignment
	// it has. An Allocator answers so for a lease's time after its first
	// instant: a server that restarted cannot see the leases granted
	// before, which its clients still enforce.
	Wait bool
	// Abandon tells the client to drop the bucket (its lease still counts
	// until it ends); the fields below are then zero.
	Abandon bool
	// Tokens per Fill: the token bucket's tokens_per_fill; 0 is a blanket
	// DENY_ALL.
	Tokens int64
	// Burst is the bucket's max_tokens: max(1, ⌈rate·δ⌉); 0 with Tokens 0.
	Burst int64
	// Fill is the fill interval, TTL the assignment's time to live.
	Fill, TTL time.Duration
}

// DenyAll reports whether a is a blanket DENY_ALL.
func (a Action) DenyAll() bool { return !a.Wait && !a.Abandon && a.Tokens == 0 }

// Allocator shares budgets among holders. It is not safe for concurrent
// use: the caller serialises Report, Close and Round (one mutex).
type Allocator struct {
	cfg Config
	// the config in µs and parts per million
	ttl, steadyTTL, slack, round, idle, burst, sliceLife int64
	// longest is the longest lease: a steady grant's TTL and the slack.
	longest                          int64
	reservePPM, headroomPPM, bandPPM int64

	last    int64 // the latest instant seen: time never goes back
	born    int64 // the first instant seen, +1 (0: none yet)
	buckets map[string]*bucket
	list    []*bucket // in creation order: rounds go through them in it
	hot     []*bucket // a max-heap by demand per second (view.go)
	holders map[Holder]*holder

	// scratch space of a round
	caps, weights, shares, targets []int64
	order                          []int
	live                           []*holder
}

type bucket struct {
	key, family string
	rate, fill  int64 // tokens per fill; fill in µs
	holders     []*holder
	idx         int   // in Allocator.list
	hot         int   // in Allocator.hot
	demand      int64 // Σ of its holders' demands known, scaled tokens per fill
	lastReport  int64 // µs
	// sum is Σ of the holders' outstanding rates, valid until next: the
	// earliest instant a lease in force ends.
	sum, next int64
	fresh     bool // sum and next hold
	// slice is the capacity grants come from: the rate, or (Config.Sliced)
	// the tokens a store leased this replica, until sliceEnd (µs); fair
	// is the share of the rate the store finds fair for it, which the
	// rounds share out. asked is the slice last asked for.
	slice, sliceEnd, fair, asked int64
	// rushed is when a report last shared it out of the rounds (µs): once
	// a round at most, so that reports cost no more than rounds do.
	rushed int64
	// steady is set when its last round found its clients' demand within
	// its rate with room for any one to double it: its grants have
	// Config.SteadyTTL.
	steady bool
}

type holder struct {
	id     Holder
	b      *bucket
	idx    int // in b.holders
	weight int64
	leases leases

	cur    Action // the last assignment sent
	curAt  int64  // when, µs
	hasCur bool

	target    int64 // tokens, from the last round
	hasTarget bool

	demand      int64 // scaled tokens per fill
	demandKnown bool
	started     bool   // a report has set the sample's start
	sampleStart int64  // µs
	pending     uint64 // requests counted since sampleStart
	refused     bool   // some of them were denied

	lastReport int64
	idle       bool  // the reports since idleSince counted nothing
	idleSince  int64 // µs
	gone       bool  // its stream closed
	abandoned  bool  // told to abandon the bucket
}

// New returns an Allocator with cfg's parameters (zero fields default).
func New(cfg Config) (*Allocator, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	us := func(d time.Duration) int64 { return d.Microseconds() }
	ppm := func(f float64) int64 { return int64(math.Round(f * 1e6)) }
	return &Allocator{
		cfg: c, ttl: us(c.TTL), steadyTTL: us(c.SteadyTTL), slack: us(c.Slack), longest: us(c.SteadyTTL + c.Slack), round: us(c.Round),
		idle: us(c.ReportInterval) * int64(c.IdleReports), burst: us(c.Burst), sliceLife: us(c.SliceLife),
		reservePPM: ppm(c.Reserve), headroomPPM: ppm(c.Headroom), bandPPM: ppm(c.Band),
		buckets: map[string]*bucket{}, holders: map[Holder]*holder{},
	}, nil
}

// Config returns the Allocator's parameters, defaults filled.
func (a *Allocator) Config() Config { return a.cfg }

// clock returns now, or the latest instant seen when now is before it.
func (a *Allocator) clock(now int64) int64 {
	if a.born == 0 {
		a.born, a.last = now+1, now
	}
	a.last = max(a.last, now)
	return a.last
}

// Start sets the Allocator's first instant (µs), from which its warm-up
// runs, when it has seen none: a server calls it as it starts. Without
// it, the first Report or Round sets it.
func (a *Allocator) Start(now int64) { a.clock(now) }

// warming reports whether now is within a lease of the Allocator's first
// instant, when it grants nothing (Action.Wait). A sliced Allocator does
// not warm up: the slices of the replica it replaces count in the store
// until the leases granted from them end.
func (a *Allocator) warming(now int64) bool { return !a.cfg.Sliced && now < a.born-1+a.longest }

// Report takes holder h's usage of budget b at now (µs, the server's
// clock when the report arrived): allowed and denied requests since its
// last report (the first report's counts start the estimate and are not
// in it), weight its fairness weight (at least 1). It returns what to
// answer: an assignment (the grant in force, resent to extend its TTL,
// or a new one) or an abandon. A holder is bound to the budget of its
// first report; the caller uses another Holder for another budget.
//
// A report that moves the holder's demand estimate at once (its first
// known demand, or a sample clearly off) shares the budget again without
// waiting for the round, once a round at most: push is then called for
// the budget's other holders whose assignments change, as a round's
// would be (nil: they wait for the round).
func (a *Allocator) Report(now int64, b Budget, h Holder, weight int64, allowed, denied uint64, push func(Holder, Action)) (Action, error) {
	if err := b.Check(); err != nil {
		return Action{}, err
	}
	now = a.clock(now)
	bk := a.bucket(now, b)
	ho := a.holders[h]
	switch {
	case ho == nil:
		ho = &holder{id: h, b: bk, idx: len(bk.holders), lastReport: now}
		bk.holders = append(bk.holders, ho)
		a.holders[h] = ho
	case ho.b != bk:
		return Action{}, fmt.Errorf("%w %q: holder %d reports budget %q first", ErrBudget, b.Key, h, ho.b.key)
	case ho.abandoned || ho.gone:
		// Back after an abandon: a newcomer again, its lease kept.
		ho.abandoned, ho.gone, ho.hasTarget, ho.started, ho.idle = false, false, false, false, false
	}
	bk.lastReport = now
	ho.weight = max(weight, 1)
	count := allowed + denied
	if count < allowed {
		count = math.MaxUint64
	}
	jumped := a.sample(now, ho, count, denied > 0)
	if count == 0 {
		if !ho.idle {
			ho.idle, ho.idleSince = true, ho.lastReport
		}
	} else {
		ho.idle = false
	}
	ho.lastReport = now
	if ho.idle && now-ho.idleSince >= a.idle {
		ho.abandoned = true
		return Action{Abandon: true}, nil
	}
	if a.warming(now) {
		return Action{Wait: true}, nil
	}
	if jumped && push != nil && now-bk.rushed >= a.round {
		bk.rushed = now
		a.share(now, bk, push, ho)
	}
	want := a.newcomerGrant(bk)
	switch {
	case ho.hasTarget:
		want = ho.target
	case ho.inForce(now):
		want = ho.cur.Tokens
	}
	act, _ := a.decide(now, ho, want, true)
	return act, nil
}

// sample adds count requests to ho's demand estimate (denied: some were
// refused): once a second or more has passed since the sample began, the
// sample's rate moves the estimate halfway, so that the noise of a
// client that asks little does not move its share at once. A sample
// clearly off (by more than twice the square root of what was expected,
// and one: Poisson noise seldom goes so far) is taken at once: below the
// estimate, the client asks less; above its grant and the headroom, with
// requests refused, it wants more than it has. It reports whether the
// estimate was set at once (the first sample, or one clearly off).
func (a *Allocator) sample(now int64, ho *holder, count uint64, denied bool) (jumped bool) {
	if !ho.started {
		ho.started, ho.sampleStart, ho.pending = true, now, 0
		return false
	}
	ho.refused = ho.refused || denied
	ho.pending += count
	if ho.pending < count {
		ho.pending = math.MaxUint64
	}
	dt := now - ho.sampleStart
	if dt < int64(time.Second/time.Microsecond) {
		return false
	}
	// requests per fill interval, scaled: pending·fill·scale/dt
	s := mulDiv(ho.pending, uint64(ho.b.fill)*scale, uint64(dt))
	rate := int64(min(s, uint64(maxTokens)*scale))
	old := demandOf(ho)
	switch {
	case !ho.demandKnown,
		rate >= ho.demand && ho.refused && ho.hasCur && clearlyAbove(ho.pending, a.expect(a.headroom(ho.cur.Tokens*scale), dt, ho.b.fill)),
		rate >= ho.demand && ho.refused && !ho.hasCur,
		rate < ho.demand && clearlyAbove(a.expect(ho.demand, dt, ho.b.fill), ho.pending):
		ho.demand, jumped = rate, true
	case rate >= ho.demand:
		ho.demand += (rate - ho.demand) / 2
	default:
		ho.demand -= (ho.demand - rate) / 2
	}
	ho.demandKnown, ho.sampleStart, ho.pending, ho.refused = true, now, 0, false
	a.addDemand(ho.b, ho.demand-old)
	return jumped
}

// Reload applies b's rate and fill to the budget of b's key, when the
// Allocator has one: a reload changed its rule. The leases, the slice
// and the demand estimates convert to the new fill interval as a report
// under the new rule would convert them, and the next round shares the
// new rate.
func (a *Allocator) Reload(now int64, b Budget) error {
	if err := b.Check(); err != nil {
		return err
	}
	if a.buckets[b.Key] != nil {
		a.bucket(a.clock(now), b)
	}
	return nil
}

// Close marks holder h gone (its stream closed): it gets no more
// assignments and no share, and its lease counts until it ends.
func (a *Allocator) Close(h Holder) {
	if ho := a.holders[h]; ho != nil {
		ho.gone = true
	}
}

// bucket returns b's state, made or updated to b's rate and fill.
func (a *Allocator) bucket(now int64, b Budget) *bucket {
	fill := b.Fill.Microseconds()
	bk := a.buckets[b.Key]
	if bk == nil {
		bk = &bucket{key: b.Key, family: b.Family, rate: b.Rate, fill: fill, idx: len(a.list), lastReport: now, rushed: now - a.round}
		a.buckets[b.Key] = bk
		a.list = append(a.list, bk)
		a.hotPush(bk)
		return bk
	}
	bk.family, bk.rate = b.Family, b.Rate
	if bk.fill != fill {
		a.refill(bk, fill)
	}
	return bk
}

// refill converts bk from its fill interval to fill (µs), as a reload
// that changed the rule's unit does: every figure keeps the rate (tokens
// per second) it stands for. The leases round up, so that the rate they
// hold is never under-counted: a grant comes only from the new rate less
// the old leases as new-unit rates, and nothing new is granted while they
// fill it. The slice rounds down (it is capacity: the store counts the
// slice it leased as the rate it stands for, whatever the unit), what
// was asked of it up; the demand estimates carry over to the new unit.
func (a *Allocator) refill(bk *bucket, fill int64) {
	from := bk.fill
	bk.demand = 0
	for _, ho := range bk.holders {
		ho.leases.rescale(from, fill)
		ho.hasTarget = false
		ho.demand = min(convert(ho.demand, from, fill, true), maxTokens*scale)
		bk.demand += demandOf(ho)
	}
	bk.slice = convert(bk.slice, from, fill, false)
	bk.fair = convert(bk.fair, from, fill, false)
	bk.asked = convert(bk.asked, from, fill, true)
	bk.fill, bk.fresh = fill, false
	a.hotFix(bk)
}

// convert is x per from µs as a whole number per to µs, rounded up or
// down, at most 2·maxTokens·scale.
func convert(x, from, to int64, up bool) int64 {
	q := mulDiv(uint64(x), uint64(to), uint64(from))
	if up {
		q = mulDivCeil(uint64(x), uint64(to), uint64(from))
	}
	return int64(min(q, 2*maxTokens*scale))
}

// outstanding is Σ of bk's holders' outstanding rates at now.
func (a *Allocator) outstanding(now int64, bk *bucket) int64 {
	if bk.fresh && (bk.next == 0 || now < bk.next) {
		return bk.sum
	}
	bk.sum, bk.next = 0, 0
	for _, ho := range bk.holders {
		bk.sum += ho.leases.at(now)
		bk.noteNext(ho.leases.next(now))
	}
	bk.fresh = true
	return bk.sum
}

// noteNext lowers bk.next to t, a lease's end (0: none).
func (bk *bucket) noteNext(t int64) {
	if t != 0 && (bk.next == 0 || t < bk.next) {
		bk.next = t
	}
}

// reserve is the tokens of bk's rate that rounds leave to newcomers.
func (a *Allocator) reserve(bk *bucket) int64 {
	return int64(mulDiv(uint64(bk.rate), uint64(a.reservePPM), 1e6))
}

// newcomerGrant is what a holder with no share yet asks: half the
// reserve, at least a token (none when the rate is 0).
func (a *Allocator) newcomerGrant(bk *bucket) int64 {
	if bk.rate == 0 {
		return 0
	}
	return max(1, a.reserve(bk)/2)
}

// decide works out ho's grant at now for a share of want tokens: a cut
// at once, a rise as far as the capacity not outstanding allows, and the
// grant in force again when the change is within the band. It records
// the lease of what it returns, and reports whether that differs from
// the grant in force (or, with resend, whether to send it anyway: a
// report's answer, or a refresh).
func (a *Allocator) decide(now int64, ho *holder, want int64, resend bool) (Action, bool) {
	bk := ho.b
	sum := a.outstanding(now, bk)
	mine := ho.leases.at(now)
	ttl := a.ttlOf(bk)
	room := max(0, a.capacity(now, bk, ttl+a.slack)-(sum-mine))
	valid := ho.inForce(now) && ho.cur.Fill == time.Duration(bk.fill)*time.Microsecond
	g := min(want, room)
	if valid {
		c := ho.cur.Tokens
		band := max(1, int64(mulDiv(uint64(c), uint64(a.bandPPM), 1e6)))
		switch {
		case want < c && (c-want >= band || want == 0):
			g = want
		case g > c && g-c >= band:
		default:
			g = c
		}
		g = min(g, room) // a slice that ended (or a rate lowered) cuts it
		if g == c && !resend {
			return ho.cur, false
		}
	}
	act := a.action(bk, g, ttl)
	if ho.hasCur && act.Fill != ho.cur.Fill && act.Tokens == ho.cur.Tokens && act.Burst == ho.cur.Burst && g > 0 {
		// Envoy compares fill intervals by their nanoseconds alone: a
		// bucket that changed only its seconds would keep the old rate.
		act.Burst++
	}
	if valid && g == ho.cur.Tokens {
		// identical parameters: the client keeps its bucket (its TTL, not
		// among them, may change)
		fresh := act.TTL
		act = ho.cur
		act.TTL = fresh
	}
	ho.leases.add(now, g, now+ttl+a.slack)
	bk.sum += ho.leases.at(now) - mine
	bk.noteNext(ho.leases.next(now))
	changed := !valid || act != ho.cur
	ho.cur, ho.curAt, ho.hasCur = act, now, true
	return act, changed || resend
}

// ttlOf is the TTL of bk's grants now (µs): Config.SteadyTTL while its
// clients' demand fits its rate, else Config.TTL.
func (a *Allocator) ttlOf(bk *bucket) int64 {
	if bk.steady {
		return a.steadyTTL
	}
	return a.ttl
}

// inForce reports whether ho's last assignment is in force at its client
// at now (as far as its TTL goes: an abandon or nothing is not).
func (ho *holder) inForce(now int64) bool {
	return ho.hasCur && !ho.cur.Abandon && now < ho.curAt+ho.cur.TTL.Microseconds()
}

// action is the assignment of g tokens per fill interval of bk, with a
// TTL of ttl µs.
func (a *Allocator) action(bk *bucket, g, ttl int64) Action {
	act := Action{Tokens: g, Fill: time.Duration(bk.fill) * time.Microsecond, TTL: time.Duration(ttl) * time.Microsecond}
	if g > 0 {
		// max(1, ⌈g/fill · δ⌉), fill and δ in µs
		act.Burst = max(1, int64(mulDivCeil(uint64(g), uint64(a.burst), uint64(bk.fill))))
		act.Burst = min(act.Burst, maxTokens)
	}
	return act
}

// Round recomputes every budget's shares at now and calls push for each
// assignment to send beyond the answers to reports: cuts first, then
// rises as the capacity they free allows, and refreshes of the grants
// whose TTL would run out before the holder's next report. It drops the
// holders that are gone, abandoned or silent once their leases have
// ended, and the budgets nobody reports.
func (a *Allocator) Round(now int64, push func(Holder, Action)) {
	now = a.clock(now)
	for i := 0; i < len(a.list); {
		bk := a.list[i]
		a.prune(now, bk)
		if len(bk.holders) == 0 && now-bk.lastReport > a.idle {
			a.dropBucket(bk)
			continue
		}
		if !a.warming(now) {
			a.share(now, bk, push, nil)
		}
		i++
	}
}

// active reports whether ho takes a share: its stream is open, it has
// not been told to abandon, and it has reported lately.
func (a *Allocator) active(now int64, ho *holder) bool {
	return !ho.gone && !ho.abandoned && now-ho.lastReport <= a.idle
}

// prune drops bk's holders that take no share and hold no lease.
func (a *Allocator) prune(now int64, bk *bucket) {
	for i := 0; i < len(bk.holders); {
		ho := bk.holders[i]
		if a.active(now, ho) || ho.leases.at(now) > 0 {
			i++
			continue
		}
		last := len(bk.holders) - 1
		bk.holders[i] = bk.holders[last]
		bk.holders[i].idx = i
		bk.holders[last] = nil
		bk.holders = bk.holders[:last]
		delete(a.holders, ho.id)
		a.addDemand(bk, -demandOf(ho))
		bk.fresh = false
	}
}

func (a *Allocator) dropBucket(bk *bucket) {
	last := len(a.list) - 1
	a.list[bk.idx] = a.list[last]
	a.list[bk.idx].idx = bk.idx
	a.list[last] = nil
	a.list = a.list[:last]
	delete(a.buckets, bk.key)
	a.hotRemove(bk)
}

// share waterfills bk's capacity (its rate less the reserve) over its
// active holders and sends the changes, but for skip's (a reporting
// holder, which its report answers).
func (a *Allocator) share(now int64, bk *bucket, push func(Holder, Action), skip *holder) {
	act := a.live[:0]
	for _, ho := range bk.holders {
		if a.active(now, ho) {
			act = append(act, ho)
		}
	}
	a.live = act
	n := len(act)
	if n == 0 {
		return
	}
	a.caps, a.weights = grow(a.caps, n), grow(a.weights, n)
	a.shares, a.targets = grow(a.shares, n), grow(a.targets, n)
	a.order = slices.Grow(a.order[:0], n)
	var caps, largest uint64
	for i, ho := range act {
		a.caps[i], a.weights[i] = a.capOf(ho), ho.weight
		caps += uint64(a.caps[i])
		largest = max(largest, uint64(a.caps[i]))
	}
	share := a.shareOf(bk)
	capacity := (share - a.reserve(bk)*share/max(bk.rate, 1)) * scale
	// Steady: every client gets all it asks, and what is left would take
	// any one of them doubling its demand without a cut.
	bk.steady = caps+largest <= uint64(capacity)
	waterfill(capacity, a.caps, a.weights, a.shares, a.order)
	apportion(a.shares, a.targets, a.order)
	for i, ho := range act {
		ho.target, ho.hasTarget = a.targets[i], true
	}
	// Cuts first, so that the rises find what they free once their
	// leases end; then the rises, the holders with the least per weight
	// first.
	for _, ho := range act {
		if ho != skip && ho.hasCur && ho.target < ho.cur.Tokens {
			a.send(now, ho, push)
		}
	}
	slices.SortStableFunc(act, func(x, y *holder) int {
		return cmpProducts(uint64(x.cur.Tokens), uint64(y.weight), uint64(y.cur.Tokens), uint64(x.weight))
	})
	for _, ho := range act {
		if ho != skip && (!ho.hasCur || ho.target >= ho.cur.Tokens) {
			a.send(now, ho, push)
		}
	}
}

// send decides ho's grant for its target and pushes it when it changed or
// its TTL is due for a refresh: when it would run out before the next
// round's refresh reached the client (a round, and the slack for its
// trip).
func (a *Allocator) send(now int64, ho *holder, push func(Holder, Action)) {
	refresh := ho.hasCur && now+a.round+a.slack >= ho.curAt+ho.cur.TTL.Microseconds()
	if act, ok := a.decide(now, ho, ho.target, refresh); ok {
		push(ho.id, act)
	}
}

// capOf is what ho may take in a round, scaled: its demand and the
// headroom above it, or while its demand is not known its grant in force
// (a newcomer's); at least a token, so that a client that just started
// is not shut out.
func (a *Allocator) capOf(ho *holder) int64 {
	var c int64
	switch {
	case ho.demandKnown:
		c = a.headroom(ho.demand)
	case ho.hasCur:
		c = ho.cur.Tokens * scale
	}
	return min(max(c, scale), maxTokens*scale)
}

// expect is how many requests a rate of x (scaled, per fill µs) makes in
// dt µs.
func (a *Allocator) expect(x, dt, fill int64) uint64 {
	return mulDiv(uint64(x), uint64(dt), uint64(fill)) / scale
}

// clearlyAbove reports whether a count n is clearly above e, what was
// expected of a Poisson process: by more than 2√e + 1.
func clearlyAbove(n, e uint64) bool { return n > e+2*isqrt(e)+1 }

// isqrt is ⌊√x⌋.
func isqrt(x uint64) uint64 {
	r := uint64(math.Sqrt(float64(x)))
	for r*r > x {
		r--
	}
	for (r+1)*(r+1) <= x {
		r++
	}
	return r
}

// headroom is x (scaled) and the headroom above it.
func (a *Allocator) headroom(x int64) int64 {
	return x + int64(mulDiv(uint64(x), uint64(a.headroomPPM), 1e6))
}

// grow returns s with length n, reusing its array when it can.
func grow(s []int64, n int) []int64 {
	if cap(s) < n {
		return make([]int64, n)
	}
	return s[:n]
}

// BudgetStats are one budget's figures at an instant, in tokens per its
// fill interval.
type BudgetStats struct {
	Key, Family string
	Rate        int64
	Fill        time.Duration
	// Holders are those taking a share; Demand their estimated demand,
	// Granted the grants in force at their clients, Outstanding the
	// leases (at least Granted: cuts not yet ended, holders gone).
	Holders              int
	Demand               float64
	Granted, Outstanding int64
	// Slice is what grants come from: the rate, or with Config.Sliced
	// this replica's slice of it (0 once it ends).
	Slice int64
}

// Each calls f with every budget's figures at now.
func (a *Allocator) Each(now int64, f func(BudgetStats)) {
	now = max(now, a.last)
	for _, bk := range a.list {
		st := BudgetStats{Key: bk.key, Family: bk.family, Rate: bk.rate, Fill: time.Duration(bk.fill) * time.Microsecond,
			Outstanding: a.outstanding(now, bk), Slice: a.capacity(now, bk, a.ttlOf(bk)+a.slack)}
		for _, ho := range bk.holders {
			if !a.active(now, ho) {
				continue
			}
			st.Holders++
			if ho.demandKnown {
				st.Demand += float64(ho.demand) / scale
			}
			st.Granted += a.granted(now, ho)
		}
		f(st)
	}
}
