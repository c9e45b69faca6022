package algo_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/model"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// debtOp is one row of a table of takes, charges and refunds on one key:
// at base+at, and the decision expected (FreshAt aside; Window relative to
// base).
type debtOp struct {
	op        byte // 't'ake, 'c'harge, 'r'efund (to any window)
	at, units int64
	want      algo.Decision
}

func runDebt(t *testing.T, p algo.Params, ops []debtOp) {
	t.Helper()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	var s algo.State
	for i, o := range ops {
		var d algo.Decision
		var err error
		switch o.op {
		case 't':
			algo.StepTo(&p, &s, base+o.at, o.units, algo.Never, &d)
		case 'c':
			algo.Charge(&p, &s, base+o.at, o.units, &d)
		case 'r':
			d, err = algo.Refund(&p, &s, base+o.at, o.units, 0)
		}
		if d.Window != 0 {
			d.Window -= base
		}
		if err != nil || !same(d, o.want) {
			t.Errorf("%v op %d (%c %d at %d): got %+v, %v\n want %+v", p.Kind, i, o.op, o.units, o.at, d, err, o.want)
		}
	}
}

// A token bucket (and gcra) in debt: a charge spends past empty, up to the
// allowance, and forgives the rest; takes wait for the level to refill.
func TestChargeBucketByHand(t *testing.T) {
	for _, k := range []algo.Kind{algo.TokenBucket, algo.GCRA} {
		runDebt(t, algo.Params{Kind: k, Rate: 1, Period: sec, Burst: 5, Debt: 10}, []debtOp{
			{'c', 0, 8, algo.Decision{Allowed: true, Remaining: -3, ResetAfter: 8 * sec}},
			{'t', 0, 1, algo.Decision{Remaining: -3, RetryAfter: 4 * sec, ResetAfter: 8 * sec}},
			{'t', 4 * sec, 1, algo.Decision{Allowed: true, ResetAfter: 5 * sec}},
			// 10 units fit (0 left, 10 past empty); 10 are forgiven.
			{'c', 4 * sec, 20, algo.Decision{Remaining: -10, ResetAfter: 15 * sec}},
			{'r', 4 * sec, 4, algo.Decision{Allowed: true, Remaining: -6, ResetAfter: 11 * sec}},
			{'t', 10 * sec, 1, algo.Decision{RetryAfter: sec, ResetAfter: 5 * sec}},
			// Half a unit refilled: −1.5 rounds to a debt of 2.
			{'c', 10*sec + sec/2, 2, algo.Decision{Allowed: true, Remaining: -2, ResetAfter: 6*sec + sec/2}},
		})
		// No allowance: the charge empties the key and no further.
		runDebt(t, algo.Params{Kind: k, Rate: 1, Period: sec, Burst: 5}, []debtOp{
			{'c', 0, 3, algo.Decision{Allowed: true, Remaining: 2, ResetAfter: 3 * sec}},
			{'c', 0, 5, algo.Decision{Remaining: 0, ResetAfter: 5 * sec}},
			{'t', 0, 1, algo.Decision{RetryAfter: sec, ResetAfter: 5 * sec}},
			{'c', 0, 0, algo.Decision{Allowed: true, ResetAfter: 5 * sec}}, // a query
		})
	}
}

// A fixed window counts a charge up to its rate and owes the rest, which
// the windows after it count: a take waits for the first with room.
func TestChargeFixedWindowByHand(t *testing.T) {
	m := 60 * sec
	runDebt(t, algo.Params{Kind: algo.FixedWindow, Rate: 10, Period: m, Debt: 25}, []debtOp{
		{'t', 0, 4, algo.Decision{Allowed: true, Remaining: 6, ResetAfter: m, Window: m}},
		// 6 fill the window, 14 are owed: the next window counts 10, the one after 4.
		{'c', sec, 20, algo.Decision{Allowed: true, Remaining: -14, ResetAfter: 3*m - sec, Window: m}},
		{'t', 2 * sec, 1, algo.Decision{Remaining: -14, RetryAfter: 2*m - 2*sec, ResetAfter: 3*m - 2*sec, Window: m}},
		{'t', m + sec, 1, algo.Decision{Remaining: -4, RetryAfter: m - sec, ResetAfter: 2*m - sec, Window: 2 * m}},
		{'t', 2 * m, 6, algo.Decision{Allowed: true, ResetAfter: m, Window: 3 * m}},
		{'c', 2 * m, 100, algo.Decision{Remaining: -25, ResetAfter: 4 * m, Window: 3 * m}},
		{'r', 2 * m, 30, algo.Decision{Allowed: true, Remaining: 5, ResetAfter: m, Window: 3 * m}},
	})
}

// An aligned window carries its debt the same way.
func TestChargeAlignedWindowByHand(t *testing.T) {
	m := 60 * sec // base is on the minute
	runDebt(t, algo.Params{Kind: algo.AlignedWindow, Rate: 10, Period: m, Debt: 5}, []debtOp{
		{'c', 0, 12, algo.Decision{Allowed: true, Remaining: -2, ResetAfter: 2 * m, Window: m}},
		{'t', 30 * sec, 9, algo.Decision{Remaining: -2, RetryAfter: 90 * sec, ResetAfter: 90 * sec, Window: m}},
		{'t', 30 * sec, 1, algo.Decision{Remaining: -2, RetryAfter: 30 * sec, ResetAfter: 90 * sec, Window: m}},
		{'t', m, 8, algo.Decision{Allowed: true, ResetAfter: m, Window: 2 * m}},
	})
}

// The debt allowance is bounded like the burst, and only the algorithms
// that can carry a debt take one.
func TestValidateDebt(t *testing.T) {
	for _, c := range []struct {
		p  algo.Params
		ok bool
	}{
		{algo.Params{Kind: algo.TokenBucket, Rate: 1000, Period: 60 * sec, Burst: 1000, Debt: 5000}, true},
		{algo.Params{Kind: algo.GCRA, Rate: 1, Period: sec, Burst: 1, Debt: -1}, false},
		{algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: 1 << 29, Burst: 1, Debt: 1<<21 - 3}, true},
		{algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: 1 << 29, Burst: 1, Debt: 1<<21 - 1}, false},
		{algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: 1, Burst: 1, Debt: 1<<62 + 1<<61}, false},
		{algo.Params{Kind: algo.FixedWindow, Rate: 100000, Period: 86400 * sec, Debt: 1 << 30}, true},
		{algo.Params{Kind: algo.AlignedWindow, Rate: 1, Period: 1 << 30, Debt: 1 << 20}, true},
		{algo.Params{Kind: algo.AlignedWindow, Rate: 1, Period: 1 << 30, Debt: 1<<20 + 1}, false},
		{algo.Params{Kind: algo.FixedWindow, Rate: 1 << 50, Period: sec, Debt: 1<<50 + 1}, false},
		{algo.Params{Kind: algo.LeakyBucket, Rate: 1, Period: sec, Burst: 1, Debt: 1}, false},
		{algo.Params{Kind: algo.SlidingWindow, Rate: 1, Period: sec, Debt: 1}, false},
		{algo.Params{Kind: algo.SlidingLog, Rate: 1, Period: sec, Debt: 1}, false},
		{algo.Params{Kind: algo.SlidingLog, Rate: 1, Period: sec}, true},
	} {
		if err := c.p.Validate(); (err == nil) != c.ok {
			t.Errorf("%+v: Validate() = %v, want ok=%v", c.p, err, c.ok)
		}
	}
}

// debtParams draws a limit of a chargeable kind with a debt allowance of 0,
// a few units, about a period's rate, or several bursts.
func debtParams(rng *rand.Rand, k algo.Kind) algo.Params {
	for {
		p := randomParams(rng, k)
		switch rng.IntN(4) {
		case 0:
		case 1:
			p.Debt = 1 + rng.Int64N(4)
		case 2:
			p.Debt = p.Rate
		default:
			p.Debt = rng.Int64N(5*p.Capacity() + 1)
		}
		if p.Validate() == nil {
			return p
		}
	}
}

// chargeUnits draws a charge's units: none, a few, the capacity, the
// capacity and the allowance, far past both.
func chargeUnits(rng *rand.Rand, p algo.Params) int64 {
	switch rng.IntN(8) {
	case 0:
		return 0
	case 1, 2:
		return 1 + rng.Int64N(3)
	case 3:
		return p.Capacity()
	case 4:
		return p.Capacity() + p.Debt
	case 5:
		return 1 << 40
	}
	return rng.Int64N(2*(p.Capacity()+p.Debt) + 1)
}

// TestChargeMatchesModel runs random traces of takes, charges and refunds
// (to any window or to the last take's) over two keys, each under one of a
// few limits of the algorithms that carry a debt, with their own debt
// allowances, now and then a take under another algorithm (whose state
// the others then read), through the steps and through the model: every
// decision must be equal. Each key's state is dropped, as a store expires
// it, at random ops at or after the FreshAt of the last op that changed it;
// and with token-bucket and gcra swapped throughout, every decision must be
// the same.
func TestChargeMatchesModel(t *testing.T) {
	traces := 300
	switch {
	case raceEnabled:
		traces = 20
	case !testenv.Long():
		traces = 80
	}
	charges, forgiven, refusedInDebt := 0, 0, 0
	for _, seed := range seeds(t) {
		rng := rand.New(rand.NewPCG(seed, 33))
		for n := range traces {
			tr := drawDebtTrace(rng, 200)
			want := tr.model()
			got := tr.steps(nil, false)
			dropped := tr.steps(rand.New(rand.NewPCG(seed, uint64(n))), false)
			swapped := tr.steps(nil, true)
			for i := range tr {
				if !same(got[i], want[i]) {
					t.Fatalf("seed %d trace %d op %d: %s: step %s, model %s\n%s", seed, n, i, tr[i], fmtDecision(got[i]), fmtDecision(want[i]), tr.report(i, want))
				}
				if !same(dropped[i], want[i]) {
					t.Fatalf("seed %d trace %d op %d: %s: dropping states at FreshAt: %s, model %s\n%s", seed, n, i, tr[i], fmtDecision(dropped[i]), fmtDecision(want[i]), tr.report(i, want))
				}
				if swapped[i] != got[i] {
					t.Fatalf("seed %d trace %d op %d: %s: token-bucket and gcra swapped: %+v, %+v\n%s", seed, n, i, tr[i], swapped[i], got[i], tr.report(i, want))
				}
				switch {
				case tr[i].op == 'c' && !want[i].Allowed:
					forgiven++
				case tr[i].op == 't' && !want[i].Allowed && want[i].Remaining < 0:
					refusedInDebt++
				}
				if tr[i].op == 'c' {
					charges++
				}
			}
		}
	}
	t.Logf("%d charges (%d of them forgiving units), among takes (%d refused in debt) and refunds, equal to the model", charges, forgiven, refusedInDebt)
	if forgiven == 0 || refusedInDebt == 0 {
		t.Error("the traces never forgave a unit or never refused a take in debt")
	}
}

// debtEvent is one op of a debt trace: a take, a charge or a refund (to
// any window, or, with lastWindow, to the window of the key's last take).
type debtEvent struct {
	op         byte
	key        string
	p          algo.Params
	now, units int64
	lastWindow bool
}

func (e debtEvent) String() string {
	return fmt.Sprintf("%c %s %v %d/%dµs burst %d debt %d: %d units at t0+%d (last window %v)",
		e.op, e.key, e.p.Kind, e.p.Rate, e.p.Period, e.p.Burst, e.p.Debt, e.units, e.now-t0, e.lastWindow)
}

type debtTrace []debtEvent

// drawDebtTrace draws n ops over two keys under a few limits that carry a
// debt (variants of one another now and then) and one that does not, for
// takes.
func drawDebtTrace(rng *rand.Rand, n int) debtTrace {
	chargeable := []algo.Kind{algo.TokenBucket, algo.GCRA, algo.FixedWindow, algo.AlignedWindow}
	var limits []algo.Params
	for range 2 + rng.IntN(3) {
		p := debtParams(rng, chargeable[rng.IntN(len(chargeable))])
		if len(limits) > 0 && rng.IntN(2) == 0 { // another burst or allowance of one drawn before
			q := limits[rng.IntN(len(limits))]
			p = debtParams(rng, q.Kind)
			p.Rate, p.Period = q.Rate, q.Period
			if p.Validate() != nil {
				p = q
			}
		}
		limits = append(limits, p)
	}
	kinds := algo.Kinds()
	other := randomParams(rng, kinds[rng.IntN(len(kinds))])
	cur := map[string]algo.Params{}
	tr := make(debtTrace, 0, n)
	now := t0 + rng.Int64N(2_000_000)
	for range n {
		key := []string{"a", "b"}[rng.IntN(2)]
		p, ok := cur[key]
		if !ok || rng.IntN(8) == 0 {
			p = limits[rng.IntN(len(limits))]
			cur[key] = p
		}
		g := &generator{rng: rng, p: p}
		now += g.gap(now, algo.Decision{}, 0, false)
		e := debtEvent{key: key, p: p, now: now}
		switch r := rng.IntN(20); {
		case r < 1:
			e.op, e.p = 't', other
			e.units = (&generator{rng: rng, p: other}).cost()
		case r < 9:
			e.op, e.units = 't', g.cost()
		case r < 15:
			e.op, e.units = 'c', chargeUnits(rng, p)
		default:
			e.op, e.units, e.lastWindow = 'r', rng.Int64N(p.Capacity()+p.Debt+3), rng.IntN(2) == 0
		}
		tr = append(tr, e)
	}
	return tr
}

// model returns the model's decisions on the trace.
func (tr debtTrace) model() []algo.Decision {
	ks := model.NewKeys()
	windows := map[string]int64{}
	out := make([]algo.Decision, len(tr))
	for i, e := range tr {
		lim := model.Limit{Kind: e.p.Kind, Rate: e.p.Rate, Period: e.p.Period, Burst: e.p.Burst, Debt: e.p.Debt}
		switch e.op {
		case 't':
			out[i] = ks.Take(e.key, lim, e.now, e.units)
			if e.units > 0 {
				windows[e.key] = out[i].Window
			}
		case 'c':
			out[i], _ = ks.Charge(e.key, lim, e.now, e.units)
		case 'r':
			out[i] = ks.Refund(e.key, lim, e.now, e.units, tr.window(e, windows))
		}
	}
	return out
}

// window is the window a refund names: 0, or the key's last take's.
func (tr debtTrace) window(e debtEvent, windows map[string]int64) int64 {
	if e.lastWindow {
		return windows[e.key]
	}
	return 0
}

// steps returns the steps' decisions on the trace, each key's state kept
// in a map as a store keeps it. With drop, it drops a key's state at
// random ops at or after the FreshAt of the last op that changed it; with
// swap, token-bucket and gcra trade places.
func (tr debtTrace) steps(drop *rand.Rand, swap bool) []algo.Decision {
	state := map[string]algo.State{}
	freshAt := map[string]int64{}
	windows := map[string]int64{}
	out := make([]algo.Decision, len(tr))
	for i, e := range tr {
		if fa, ok := freshAt[e.key]; ok && drop != nil && e.now >= fa && drop.IntN(2) == 0 {
			delete(state, e.key)
			delete(freshAt, e.key)
		}
		p := e.p
		if swap && (p.Kind == algo.TokenBucket || p.Kind == algo.GCRA) {
			p.Kind = algo.TokenBucket + algo.GCRA - p.Kind
		}
		s := state[e.key]
		before := s
		d := &out[i]
		changed := e.units > 0
		switch e.op {
		case 't':
			algo.StepTo(&p, &s, e.now, e.units, algo.Never, d)
			if changed {
				windows[e.key] = d.Window
			}
		case 'c':
			algo.Charge(&p, &s, e.now, e.units, d)
		case 'r':
			var err error
			if *d, err = algo.Refund(&p, &s, e.now, e.units, tr.window(e, windows)); err != nil {
				panic(err)
			}
			changed = s.Kind != before.Kind || s.A != before.A || s.B != before.B || s.C != before.C || s.Rate != before.Rate || s.Period != before.Period
		}
		if changed {
			freshAt[e.key] = d.FreshAt
		}
		state[e.key] = s
	}
	return out
}

// report prints the trace's ops up to i (the last 40) with the model's
// decisions.
func (tr debtTrace) report(i int, want []algo.Decision) string {
	var b strings.Builder
	for j := max(0, i-39); j <= i; j++ {
		fmt.Fprintf(&b, "  %4d %s  model: %s\n", j, tr[j], fmtDecision(want[j]))
	}
	return b.String()
}

// TestDebtRetryAfter checks what a refusal in debt promises: the same take,
// with no other traffic, passes RetryAfter later and not a microsecond
// sooner, on random traces of takes, charges and refunds.
func TestDebtRetryAfter(t *testing.T) {
	seed := testenv.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 35))
	checked := 0
	for n := range 300 {
		tr := drawDebtTrace(rng, 200)
		state := map[string]algo.State{}
		for i, e := range tr {
			s := state[e.key]
			var d algo.Decision
			switch e.op {
			case 't':
				algo.StepTo(&e.p, &s, e.now, e.units, algo.Never, &d)
			case 'c':
				algo.Charge(&e.p, &s, e.now, e.units, &d)
			case 'r':
				algo.Refund(&e.p, &s, e.now, e.units, 0)
			}
			state[e.key] = s
			if e.op != 't' || d.Allowed || d.Remaining >= 0 || !algo.Chargeable(e.p.Kind) {
				continue
			}
			for _, at := range []int64{d.RetryAfter - 1, d.RetryAfter} {
				probe := s
				if got := algo.Step(&e.p, &probe, e.now+at, e.units, algo.Never); got.Allowed != (at == d.RetryAfter) {
					t.Fatalf("seed %d trace %d op %d: %s: refused with RetryAfter %d; %d later: %+v", seed, n, i, e, d.RetryAfter, at, got)
				}
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no take was refused in debt")
	}
	t.Logf("%d refusals in debt kept their RetryAfter (seed %d)", checked, seed)
}
