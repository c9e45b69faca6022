package rlqs

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// harness drives an Allocator on a clock of its own and remembers every
// assignment sent, answered or pushed, to check the leases from outside.
type harness struct {
	t    *testing.T
	a    *Allocator
	now  int64 // µs
	sent map[Holder][]sentAction
}

type sentAction struct {
	at  int64
	act Action
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, a: a, now: 1_000_000 + a.longest, sent: map[Holder][]sentAction{}}
	a.Round(h.now-a.longest, func(Holder, Action) {}) // warmed up at h.now
	return h
}

func (h *harness) advance(d time.Duration) { h.now += d.Microseconds() }

func (h *harness) report(b Budget, id Holder, weight int64, allowed, denied uint64) Action {
	h.t.Helper()
	act, err := h.a.Report(h.now, b, id, weight, allowed, denied, func(other Holder, act Action) {
		if other == id {
			h.t.Fatalf("a report of holder %d pushed to it", id)
		}
		h.sent[other] = append(h.sent[other], sentAction{h.now, act})
	})
	if err != nil {
		h.t.Fatal(err)
	}
	h.sent[id] = append(h.sent[id], sentAction{h.now, act})
	return act
}

func (h *harness) round() map[Holder]Action {
	pushed := map[Holder]Action{}
	h.a.Round(h.now, func(id Holder, act Action) {
		if _, dup := pushed[id]; dup {
			h.t.Fatalf("round pushed holder %d twice", id)
		}
		pushed[id] = act
		h.sent[id] = append(h.sent[id], sentAction{h.now, act})
	})
	return pushed
}

// held is what the harness's log says holder id may enforce at t: the
// largest rate sent to it whose TTL and slack have not run out.
func (h *harness) held(id Holder, t int64) int64 {
	var r int64
	for _, s := range h.sent[id] {
		if !s.act.Abandon && !s.act.Wait && s.at+s.act.TTL.Microseconds()+h.a.slack > t {
			r = max(r, s.act.Tokens)
		}
	}
	return r
}

func (h *harness) outstanding(t int64) int64 {
	var sum int64
	for id := range h.sent {
		sum += h.held(id, t)
	}
	return sum
}

var perSecond = Budget{Key: "edge/k", Family: "k", Rate: 1000, Fill: time.Second}

// A newcomer is granted from the reserve at once: half of 2% of 1000 a
// second, with a second's burst and a TTL of two rounds and the slack.
func TestNewcomerFromReserve(t *testing.T) {
	h := newHarness(t, Config{})
	got := h.report(perSecond, 1, 1, 1, 0)
	want := Action{Tokens: 10, Burst: 10, Fill: time.Second, TTL: 3 * time.Second}
	if got != want {
		t.Errorf("newcomer: %+v, want %+v", got, want)
	}
	if o := h.a.outstanding(h.now, h.a.buckets["edge/k"]); o != 10 {
		t.Errorf("outstanding %d, want 10", o)
	}
}

// Two clients, one asking 300 a second, the other 2000: once their
// demand is known and the newcomers' leases have ended, the first has
// its demand and the headroom (315), the second the rest of 980 (R less
// the reserve).
func TestSharesConverge(t *testing.T) {
	h := newHarness(t, Config{})
	h.report(perSecond, 1, 1, 1, 0)
	h.report(perSecond, 2, 1, 1, 0)
	var got [3]int64
	for range 6 {
		for range 5 {
			h.advance(time.Second)
			for id, act := range h.round() {
				got[id] = act.Tokens
			}
		}
		got[1] = h.report(perSecond, 1, 1, 300*5, 0).Tokens
		got[2] = h.report(perSecond, 2, 1, 500*5, 1500*5).Tokens
	}
	if got[1] != 315 || got[2] != 665 {
		t.Errorf("shares %d and %d, want 315 and 665", got[1], got[2])
	}
}

// A cut is sent at once; the rise it makes room for waits until the cut
// grant's lease has ended (its TTL and the slack), then comes in a round.
func TestCutNowRiseLater(t *testing.T) {
	h := newHarness(t, Config{Reserve: 0.0001})
	b := Budget{Key: "k", Rate: 100, Fill: time.Second}
	h.report(b, 1, 1, 1, 0)
	h.report(b, 2, 1, 1, 0)
	h.advance(5 * time.Second)
	h.report(b, 1, 1, 1000*5, 0) // wants far more than 100
	h.report(b, 2, 1, 5, 0)      // 1 a second
	// Rounds until the grants settle: 2 its demand and the headroom (1.1
	// a second, a token or two once whole), 1 the rest.
	for range 10 {
		h.advance(time.Second)
		h.round()
		if h.now%(5*time.Second).Microseconds() == 0 {
			h.report(b, 1, 1, 1000*5, 0)
			h.report(b, 2, 1, 5, 0)
		}
	}
	one, two := h.held(1, h.now), h.held(2, h.now)
	if one+two > 100 || two > 2 || one < 97 {
		t.Fatalf("settled at %d and %d", one, two)
	}
	// 2 now wants 50 a second, 1 as much as ever: fair is 50/50.
	h.advance(time.Second)
	h.report(b, 1, 1, 1000*5, 0)
	h.report(b, 2, 1, 50*5, 0)
	cutAt := int64(-1)
	riseAt := int64(-1)
	for range 20 {
		h.advance(time.Second)
		pushed := h.round()
		if act, ok := pushed[1]; ok && act.Tokens <= 50 && cutAt < 0 {
			cutAt = h.now
		}
		if act, ok := pushed[2]; ok && act.Tokens >= 49 && riseAt < 0 {
			riseAt = h.now
		}
		if o := h.outstanding(h.now); o > 100 {
			t.Fatalf("at %d: %d outstanding", h.now, o)
		}
		if (h.now/1e6)%5 == 0 {
			h.report(b, 1, 1, 1000*5, 0)
			h.report(b, 2, 1, 50*5, 0)
		}
	}
	if cutAt < 0 || riseAt < 0 {
		t.Fatalf("no cut (%d) or no rise (%d)", cutAt, riseAt)
	}
	// the budget is not steady (its demand outgrows its rate): the cut's
	// lease is the TTL's
	lease := h.a.ttl + h.a.slack
	if wait := riseAt - cutAt; wait < lease-h.a.round || wait > lease+2*h.a.round {
		t.Errorf("the rise came %dµs after the cut, want about a lease (%dµs)", wait, lease)
	}
}

// Within the band a report is answered with the grant in force, its
// parameters identical (the client keeps its bucket, the TTL restarts).
// A newcomer's grant has the TTL; once its demand is known to fit the
// rate, the budget is steady and its grants have the steady TTL.
func TestResendIdentical(t *testing.T) {
	h := newHarness(t, Config{})
	b := Budget{Key: "k", Rate: 1000, Fill: time.Second}
	first := h.report(b, 1, 1, 1, 0)
	if first.TTL != h.a.cfg.TTL {
		t.Errorf("a newcomer's TTL %v, want %v", first.TTL, h.a.cfg.TTL)
	}
	want := first
	want.TTL = h.a.cfg.SteadyTTL
	for range 3 {
		h.advance(5 * time.Second)
		if got := h.report(b, 1, 1, 50, 0); got != want { // 10 a second: its grant
			t.Errorf("resent %+v, want %+v", got, want)
		}
	}
}

// A budget fully leased leaves a newcomer a blanket DENY_ALL until a
// lease ends.
func TestDenyAllWhenLeased(t *testing.T) {
	h := newHarness(t, Config{Reserve: 0.5})
	b := Budget{Key: "k", Rate: 2, Fill: time.Second}
	if got := h.report(b, 1, 1, 1, 0).Tokens; got != 1 {
		t.Fatalf("first: %d", got)
	}
	if got := h.report(b, 2, 1, 1, 0).Tokens; got != 1 {
		t.Fatalf("second: %d", got)
	}
	got := h.report(b, 3, 1, 1, 0)
	if !got.DenyAll() || got.Burst != 0 || got.TTL != 3*time.Second {
		t.Errorf("third: %+v, want DENY_ALL", got)
	}
}

// A client that reports nothing for three intervals is told to abandon
// the bucket; its lease counts until it ends, then the holder goes.
func TestAbandonIdle(t *testing.T) {
	h := newHarness(t, Config{})
	b := Budget{Key: "k", Rate: 1000, Fill: time.Second}
	h.report(b, 1, 1, 1, 0)
	for i := range 3 {
		for range 5 { // rounds refresh the grant between reports
			h.advance(time.Second)
			h.round()
		}
		if got := h.report(b, 1, 1, 0, 0); got.Abandon != (i == 2) {
			t.Fatalf("idle report %d: %+v", i+1, got)
		}
	}
	bk := h.a.buckets["k"]
	if o, want := h.a.outstanding(h.now, bk), h.held(1, h.now); o != want || o == 0 {
		t.Errorf("outstanding after the abandon: %d, want the lease's %d", o, want)
	}
	h.advance(h.a.cfg.TTL + h.a.cfg.Slack)
	h.round()
	if len(bk.holders) != 0 || h.a.holders[1] != nil {
		t.Errorf("the abandoned holder is still there once its lease ended")
	}
	// Reporting again, it is a newcomer.
	if got := h.report(b, 1, 1, 1, 0); got.Tokens != 10 {
		t.Errorf("back: %+v", got)
	}
}

// A closed stream's holder keeps its lease until it ends, and takes no
// share meanwhile; an unreported budget goes after the idle time.
func TestCloseKeepsLease(t *testing.T) {
	h := newHarness(t, Config{})
	b := Budget{Key: "k", Rate: 1000, Fill: time.Second}
	h.report(b, 1, 1, 1, 0)
	h.a.Close(1)
	h.advance(time.Second)
	if pushed := h.round(); len(pushed) != 0 {
		t.Errorf("pushed to a closed holder: %v", pushed)
	}
	if o := h.a.outstanding(h.now, h.a.buckets["k"]); o != 10 {
		t.Errorf("outstanding %d, want 10", o)
	}
	h.advance(h.a.cfg.TTL)
	h.round()
	if h.a.holders[1] != nil {
		t.Error("the closed holder outlived its lease")
	}
	h.advance(15 * time.Second)
	h.round()
	if len(h.a.buckets) != 0 || len(h.a.list) != 0 {
		t.Error("the budget nobody reports is still there")
	}
}

// Weights share a budget both clients want all of 1:3.
func TestWeights(t *testing.T) {
	h := newHarness(t, Config{Reserve: 0.0001})
	b := Budget{Key: "k", Rate: 400, Fill: time.Second}
	h.report(b, 1, 1, 1, 0)
	h.report(b, 2, 3, 1, 0)
	for range 6 {
		for range 5 {
			h.advance(time.Second)
			h.round()
		}
		h.report(b, 1, 1, 0, 5000)
		h.report(b, 2, 3, 0, 5000)
	}
	if one, two := h.held(1, h.now), h.held(2, h.now); one != 100 || two != 300 {
		t.Errorf("shares %d and %d, want 100 and 300", one, two)
	}
}

// A reload that changes a budget's unit from a second to a minute: the
// leases count in minutes (60 times the tokens), and a grant whose tokens
// and burst would look unchanged to Envoy (which compares only the fill
// interval's nanoseconds) gets one more token of burst.
func TestFillChange(t *testing.T) {
	h := newHarness(t, Config{})
	b := Budget{Key: "k", Rate: 1000, Fill: time.Second}
	h.report(b, 1, 1, 1, 0) // 10 a second
	b.Fill, b.Rate = time.Minute, 1000
	h.advance(time.Second / 2) // too soon for a sample of its demand
	got := h.report(b, 1, 1, 1, 0)
	if got.Fill != time.Minute || got.Tokens != 10 {
		t.Fatalf("after the change: %+v, want the grant in force, 10, now a minute", got)
	}
	if o := h.a.outstanding(h.now, h.a.buckets["k"]); o != 600 {
		t.Errorf("outstanding %d, want the 10 a second lease as 600 a minute", o)
	}
	// Same tokens and burst, another fill interval.
	a, _ := New(Config{Reserve: 0.02})
	a.Report(0, Budget{Key: "x", Rate: 100, Fill: time.Second}, 1, 1, 1, 0, nil)
	ho := a.holders[1]
	ho.cur, ho.hasCur = Action{Tokens: 1, Burst: 1, Fill: 2 * time.Second, TTL: 6 * time.Second}, true
	ho.leases = leases{}
	act, _ := a.decide(1, ho, 1, true)
	if act.Tokens != 1 || act.Burst != 2 {
		t.Errorf("same tokens and burst, another fill: %+v, want a burst of 2", act)
	}
}

// The property: whatever joins, leaves, reports, goes silent or comes
// back, the rates the log says are in force never add up to more than
// the budget's.
func TestOutstandingNeverOverRate(t *testing.T) {
	seed := testenv.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 4))
	traces := 40
	if testenv.Long() {
		traces = 400
	}
	for range traces {
		cfg := Config{Reserve: rng.Float64() * 0.2, Headroom: rng.Float64(), Band: rng.Float64() * 0.2, IdleReports: 1 + rng.IntN(4), TTL: time.Duration(3+rng.IntN(6)) * time.Second}
		cfg.SteadyTTL = cfg.TTL + time.Duration(rng.IntN(6))*time.Second
		h := newHarness(t, cfg)
		budgets := []Budget{
			{Key: "a", Rate: 1 + rng.Int64N(2000), Fill: time.Second},
			{Key: "b", Rate: rng.Int64N(50), Fill: time.Duration(1+rng.IntN(60)) * time.Second},
		}
		type client struct {
			id     Holder
			b      Budget
			weight int64
			rate   uint64
			open   bool
		}
		var clients []*client
		next := Holder(1)
		for step := range 600 {
			h.advance(time.Duration(rng.Int64N(1500)) * time.Millisecond)
			switch r := rng.IntN(20); {
			case r < 2 || len(clients) == 0:
				c := &client{id: next, b: budgets[rng.IntN(2)], weight: 1 + rng.Int64N(5), rate: uint64(rng.Int64N(500)), open: true}
				next++
				clients = append(clients, c)
				h.report(c.b, c.id, c.weight, 1, 0)
			case r == 2:
				c := clients[rng.IntN(len(clients))]
				h.a.Close(c.id)
				c.open = false
			case r < 6:
				h.round()
			default:
				c := clients[rng.IntN(len(clients))]
				if !c.open {
					continue
				}
				if rng.IntN(10) == 0 {
					c.rate = uint64(rng.Int64N(2000))
				}
				n := c.rate * uint64(1+rng.IntN(5))
				if rng.IntN(8) == 0 {
					n = 0
				}
				h.report(c.b, c.id, c.weight, n/2, n-n/2)
			}
			for _, b := range budgets {
				var sum int64
				for _, c := range clients {
					if c.b.Key == b.Key {
						sum += h.held(c.id, h.now)
					}
				}
				if sum > b.Rate {
					t.Fatalf("seed %d step %d: budget %s: %d in force, over its rate %d", seed, step, b.Key, sum, b.Rate)
				}
				if bk := h.a.buckets[b.Key]; bk != nil && h.a.outstanding(h.now, bk) < sum {
					t.Fatalf("seed %d step %d: budget %s: the allocator counts %d outstanding, the log %d", seed, step, b.Key, h.a.outstanding(h.now, bk), sum)
				}
			}
		}
	}
}

// A configuration or a budget that cannot work is an error that says
// what is wanted, never a panic.
func TestBadConfigAndBudget(t *testing.T) {
	for _, c := range []Config{
		{TTL: 2500 * time.Millisecond},
		{TTL: 2 * time.Second},
		{ReportInterval: time.Millisecond},
		{Reserve: 1},
		{Band: -0.1},
		{IdleReports: -1},
		{Slack: -time.Second},
	} {
		if _, err := New(c); err == nil || !strings.Contains(err.Error(), "want") {
			t.Errorf("New(%+v): %v, want an error saying what is wanted", c, err)
		}
	}
	a, _ := New(Config{})
	for _, b := range []Budget{
		{Key: "k", Rate: -1, Fill: time.Second},
		{Key: "k", Rate: 1 << 32, Fill: time.Second},
		{Key: "k", Rate: 1, Fill: 1500 * time.Millisecond},
		{Key: "k", Rate: 1, Fill: 0},
		{Key: "k", Rate: 1, Fill: 400 * 24 * time.Hour},
	} {
		if _, err := a.Report(0, b, 1, 1, 1, 0, nil); !errors.Is(err, ErrBudget) {
			t.Errorf("Report(%+v): %v, want ErrBudget", b, err)
		}
	}
	a.Report(0, Budget{Key: "k", Rate: 1, Fill: time.Second}, 1, 1, 1, 0, nil)
	if _, err := a.Report(0, Budget{Key: "other", Rate: 1, Fill: time.Second}, 1, 1, 1, 0, nil); !errors.Is(err, ErrBudget) {
		t.Errorf("a holder reporting another budget: %v, want ErrBudget", err)
	}
}

// For a lease's time after its first instant an Allocator grants
// nothing, pushes nothing, and answers Wait: the leases a restarted
// server's predecessor granted are still in force.
func TestWarmup(t *testing.T) {
	a, _ := New(Config{})
	b := Budget{Key: "k", Rate: 100, Fill: time.Second}
	start := int64(5_000_000)
	pushed := 0
	for at := start; at < start+a.longest; at += 500_000 {
		act, err := a.Report(at, b, 1, 1, 10, 0, nil)
		if err != nil || act != (Action{Wait: true}) {
			t.Fatalf("at +%dµs: %+v, %v; want Wait", at-start, act, err)
		}
		a.Round(at, func(Holder, Action) { pushed++ })
	}
	if pushed != 0 {
		t.Errorf("%d pushes while warming up", pushed)
	}
	if act, _ := a.Report(start+a.longest, b, 1, 1, 10, 0, nil); act.Wait || act.Tokens == 0 {
		t.Errorf("after the warm-up: %+v, want a grant", act)
	}
}

// A report whose sample jumps shares its budget at once, pushing to the
// other holders, but once a round at most: a second jump within the
// round is answered alone and waits for the round.
func TestJumpSharesOnceARound(t *testing.T) {
	h := newHarness(t, Config{})
	b := Budget{Key: "k", Rate: 100, Fill: time.Second}
	for id := Holder(1); id <= 3; id++ {
		h.report(b, id, 1, 1, 0)
	}
	h.advance(5 * time.Second)
	pushed := func() int {
		n := 0
		for _, s := range h.sent {
			n += len(s)
		}
		return n
	}
	// Each wants 100 a second: its first sample, taken at once.
	before := pushed()
	h.report(b, 1, 1, 250, 250)
	if got := pushed() - before; got < 2 {
		t.Fatalf("the first jump sent %d assignments, want its answer and pushes to the others", got)
	}
	before = pushed()
	h.report(b, 2, 1, 250, 250)
	if got := pushed() - before; got != 1 {
		t.Errorf("a second jump in the same round sent %d assignments, want its answer alone", got)
	}
	h.advance(h.a.cfg.Round)
	before = pushed()
	h.report(b, 3, 1, 300, 300)
	if got := pushed() - before; got < 2 {
		t.Errorf("a jump a round later sent %d assignments, want its answer and pushes", got)
	}
}
