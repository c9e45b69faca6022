package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/model"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// walkLimits are the limits the walk's property test draws from: emission
// intervals whole, fractional and below 1µs.
var walkLimits = []struct{ rate, period int64 }{
	{10, 1_000_000}, {3, 1_000_000}, {7, 100_000}, {1, 60_000_000}, {13, 1000}, {7, 5}, {2, 3},
}

// randomWalk draws a limit of kind k and a sequence of requests in time
// order, some of them queries and some over the capacity; under the
// algorithms that can carry a debt, a debt allowance (often) and charges.
func randomWalk(r *rand.Rand, k algo.Kind) (algo.Params, []Arrival) {
	l := walkLimits[r.IntN(len(walkLimits))]
	p := algo.Params{Kind: k, Rate: l.rate, Period: l.period, Burst: 1 + r.Int64N(6)}
	if k == algo.LeakyBucket {
		p.Burst = r.Int64N(6)
	}
	charges := algo.Chargeable(k) && r.IntN(4) > 0
	if charges && r.IntN(4) > 0 {
		p.Debt = r.Int64N(3 * p.Capacity())
	}
	t := DefaultStart + r.Int64N(l.period)
	var reqs []Arrival
	for range 1 + r.IntN(60) {
		switch r.IntN(4) {
		case 0: // the same µs
		case 1:
			t += r.Int64N(max(l.period/l.rate, 1) + 1)
		case 2:
			t += r.Int64N(l.period + 1)
		default:
			t += r.Int64N(3*l.period + 1)
		}
		a := Arrival{T: t, Key: "k", Cost: r.Int64N(p.Capacity() + 2)}
		if charges && r.IntN(3) == 0 {
			a.Charge, a.Cost = true, r.Int64N(p.Capacity()+p.Debt+3)
		}
		reqs = append(reqs, a)
	}
	return p, reqs
}

// TestWalkMatchesModel: on random sequences, takes and charges, every
// step's decision is the exact model's, the state it leaves answers a
// query as the model's does, each step's state before is the previous
// step's after, and a cost over the capacity is an error that changes
// nothing.
func TestWalkMatchesModel(t *testing.T) {
	r := rand.New(rand.NewPCG(testenv.Seed(t), 27))
	for _, k := range algo.Kinds() {
		for trial := range 150 {
			p, reqs := randomWalk(r, k)
			w, err := NewWalk(p, DefaultStart, reqs, 0)
			if err != nil {
				t.Fatalf("%v: %v", p, err)
			}
			m := model.NewKeys().Model(model.Limit{Kind: k, Rate: p.Rate, Period: p.Period, Burst: p.Burst, Debt: p.Debt})
			var s algo.State // the key's state, stepped beside the walk
			for i, st := range w.Steps {
				where := fmt.Sprintf("%v rate=%d period=%d burst=%d debt=%d trial %d step %d (%s cost %d charge %v)", k, p.Rate, p.Period, p.Burst, p.Debt, trial, st.N, st.At, st.Cost, st.Charge)
				if i > 0 && fmt.Sprint(st.Before) != fmt.Sprint(w.Steps[i-1].After) {
					t.Fatalf("%s: before %v is not the previous after %v", where, st.Before, w.Steps[i-1].After)
				}
				if st.Cost > p.Capacity() && !st.Charge {
					if st.Error == "" || fmt.Sprint(st.After) != fmt.Sprint(st.Before) || st.Result != nil {
						t.Fatalf("%s: a cost over capacity %d gave %+v", where, p.Capacity(), st)
					}
					continue
				}
				var want algo.Decision
				if st.Charge {
					want, _ = m.Charge("k", st.T, st.Cost)
					algo.Charge(&p, &s, st.T, st.Cost, new(algo.Decision))
				} else {
					want = m.Take("k", st.T, st.Cost)
					algo.Step(&p, &s, st.T, st.Cost, algo.Never)
				}
				got := st.Decision
				got.FreshAt = 0
				if got != want {
					t.Fatalf("%s: decision %+v, model %+v", where, got, want)
				}
				checkResult(t, where, w, st)
				// The state left answers a query as the model's does.
				q := algo.Step(&p, new(s), st.T, 0, algo.Never)
				q.FreshAt = 0
				if mq := m.Take("k", st.T, 0); q != mq {
					t.Fatalf("%s: the state left answers a query %+v, the model %+v", where, q, mq)
				}
				if len(st.Math) < 2 {
					t.Fatalf("%s: arithmetic %q", where, st.Math)
				}
			}
		}
	}
}

// checkResult checks that a step shows every field of its decision.
func checkResult(t *testing.T, where string, w *Walk, st WalkStep) {
	t.Helper()
	d := st.Decision
	verdict := map[bool]string{true: "allowed", false: "denied"}[d.Allowed]
	if st.Charge {
		verdict = map[bool]string{true: "charged", false: "charged up to the debt allowance, the rest forgiven"}[d.Allowed]
	}
	want := map[string]string{
		"decision": verdict, "remaining": fmt.Sprint(d.Remaining), "retry after": dur(d.RetryAfter),
		"reset after": dur(d.ResetAfter), "delay": dur(d.Delay), "fresh at": w.at(d.FreshAt),
	}
	got := map[string]string{}
	for _, f := range st.Result {
		got[f.Name] = f.Value
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s: result %s = %q, want %q", where, k, got[k], v)
		}
	}
	if len(st.Result) != 7 {
		t.Fatalf("%s: %d result fields, want the decision's 7", where, len(st.Result))
	}
	math := strings.Join(st.Math, "\n")
	switch says := map[bool]string{true: "every unit charged", false: "forgiven"}[d.Allowed]; {
	case st.Charge && st.Cost > 0 && !strings.Contains(math, says):
		t.Fatalf("%s: the arithmetic %q never says %s", where, st.Math, says)
	case !st.Charge && !strings.Contains(math, verdict) && st.Cost > 0:
		t.Fatalf("%s: the arithmetic %q never says %s", where, st.Math, verdict)
	}
	// The arithmetic ends where the decision does.
	if !d.Allowed && !st.Charge && !strings.Contains(math, "retry after "+dur(d.RetryAfter)) {
		t.Fatalf("%s: the arithmetic %q never gives the retry after %s", where, st.Math, dur(d.RetryAfter))
	}
	for _, l := range st.Math {
		if strings.HasPrefix(l, "remaining = ") && !strings.HasSuffix(l, fmt.Sprintf("= %d", d.Remaining)) {
			t.Fatalf("%s: %q, but remaining is %d", where, l, d.Remaining)
		}
		if strings.HasPrefix(l, "reset after = ") && !strings.Contains(l, " "+dur(d.ResetAfter)) {
			t.Fatalf("%s: %q, but reset after is %s", where, l, dur(d.ResetAfter))
		}
	}
}

// TestWalkSteps: a token bucket of 2 refilled 1 per 100ms, step by step.
func TestWalkSteps(t *testing.T) {
	reqs, err := ParseRequests("0ms x3, 150ms, 1s cost=2", DefaultStart, "k", 100)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWalk(algo.Params{Kind: algo.TokenBucket, Rate: 10, Period: 1_000_000, Burst: 2}, DefaultStart, reqs, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		at, after, math string
	}{
		{"t+0s", "[{level 1 (units spent, not yet refilled)} {tokens 1} {last update t+0s}]",
			"a fresh key: level 0, 2 tokens|tokens = burst − level = 2 − 0 = 2|cost 1 ≤ tokens 2: allowed|remaining = ⌊tokens⌋ = ⌊1⌋ = 1|reset after = ⌈level × T⌉ = ⌈1 × 100ms⌉ = 100ms"},
		{"t+0s", "[{level 2 (units spent, not yet refilled)} {tokens 0} {last update t+0s}]",
			"0s since the last update refill 0 units (one per T = 100ms): level 1 → 1|tokens = burst − level = 2 − 1 = 1|cost 1 ≤ tokens 1: allowed|remaining = ⌊tokens⌋ = ⌊0⌋ = 0|reset after = ⌈level × T⌉ = ⌈2 × 100ms⌉ = 200ms"},
		{"t+0s", "[{level 2 (units spent, not yet refilled)} {tokens 0} {last update t+0s}]",
			"0s since the last update refill 0 units (one per T = 100ms): level 2 → 2|tokens = burst − level = 2 − 2 = 0|cost 1 > tokens 0: denied, nothing spent; retry after 100ms|remaining = ⌊tokens⌋ = ⌊0⌋ = 0|reset after = ⌈level × T⌉ = ⌈2 × 100ms⌉ = 200ms"},
		{"t+150ms", "[{level 1.5 (units spent, not yet refilled)} {tokens 0.5} {last update t+150ms}]",
			"150ms since the last update refill 1.5 units (one per T = 100ms): level 2 → 0.5|tokens = burst − level = 2 − 0.5 = 1.5|cost 1 ≤ tokens 1.5: allowed|remaining = ⌊tokens⌋ = ⌊0.5⌋ = 0|reset after = ⌈level × T⌉ = ⌈1.5 × 100ms⌉ = 150ms"},
		{"t+1s", "[{level 2 (units spent, not yet refilled)} {tokens 0} {last update t+1s}]",
			"850ms since the last update refill 8.5 units (one per T = 100ms): level 1.5 → 0|tokens = burst − level = 2 − 0 = 2|cost 2 ≤ tokens 2: allowed|remaining = ⌊tokens⌋ = ⌊0⌋ = 0|reset after = ⌈level × T⌉ = ⌈2 × 100ms⌉ = 200ms"},
	}
	if len(w.Steps) != len(want) {
		t.Fatalf("%d steps, want %d", len(w.Steps), len(want))
	}
	for i, st := range w.Steps {
		if st.At != want[i].at || fmt.Sprint(st.After) != want[i].after || strings.Join(st.Math, "|") != want[i].math {
			t.Errorf("step %d:\n got %s %v\n     %s\nwant %s %s\n     %s", i+1, st.At, st.After, strings.Join(st.Math, "|"), want[i].at, want[i].after, want[i].math)
		}
	}
}

// TestWalkCharges: a charge leaves a bucket in debt, which a take waits
// for; a window's debt is counted by the windows after it.
func TestWalkCharges(t *testing.T) {
	for _, c := range []struct {
		p        algo.Params
		requests string
		want     []string // per step: its result's decision and remaining, then its arithmetic
	}{
		{algo.Params{Kind: algo.TokenBucket, Rate: 10, Period: 1_000_000, Burst: 2, Debt: 3}, "0ms charge=4, 0ms, 200ms, 300ms charge=9, 500ms charge=0",
			[]string{
				"charged -2|a fresh key: level 0, 2 tokens|tokens = burst − level = 2 − 0 = 2|charged = min(units, tokens + debt) = min(4, 2 + 3) = 4|tokens → -2 (in debt: owes 2)|every unit charged (a charge is never refused; takes are, while the key owes)|remaining = ⌊tokens⌋ = ⌊-2⌋ = -2|reset after = ⌈level × T⌉ = ⌈4 × 100ms⌉ = 400ms",
				"denied -2|0s since the last update refill 0 units (one per T = 100ms): level 4 → 4|tokens = burst − level = 2 − 4 = -2|cost 1 > tokens -2: denied, nothing spent; retry after 300ms|remaining = ⌊tokens⌋ = ⌊-2⌋ = -2|reset after = ⌈level × T⌉ = ⌈4 × 100ms⌉ = 400ms",
				"denied 0|200ms since the last update refill 2 units (one per T = 100ms): level 4 → 2|tokens = burst − level = 2 − 2 = 0|cost 1 > tokens 0: denied, nothing spent; retry after 100ms|remaining = ⌊tokens⌋ = ⌊0⌋ = 0|reset after = ⌈level × T⌉ = ⌈2 × 100ms⌉ = 200ms",
				"charged up to the debt allowance, the rest forgiven -3|100ms since the last update refill 1 units (one per T = 100ms): level 2 → 1|tokens = burst − level = 2 − 1 = 1|charged = min(units, tokens + debt) = min(9, 1 + 3) = 4|tokens → -3 (in debt: owes 3)|5 of 9 units forgiven, past the debt allowance (a charge is never refused: the key owes all it may)|remaining = ⌊tokens⌋ = ⌊-3⌋ = -3|reset after = ⌈level × T⌉ = ⌈5 × 100ms⌉ = 500ms",
				"charged -1|200ms since the last update refill 2 units (one per T = 100ms): level 5 → 3|tokens = burst − level = 2 − 3 = -1|cost 0 ≤ tokens -1: allowed|remaining = ⌊tokens⌋ = ⌊-1⌋ = -1|reset after = ⌈level × T⌉ = ⌈3 × 100ms⌉ = 300ms|a charge of 0 is a query: nothing is stored",
			}},
		{algo.Params{Kind: algo.FixedWindow, Rate: 2, Period: 1_000_000, Debt: 5}, "0ms charge=5, 500ms, 1s, 2500ms",
			[]string{
				"charged -3|no window is open: the request opens [t+0s, t+1s), count 0|fill = min(units, max(0, rate − count)) = min(5, max(0, 2 − 0)) = 2|owe = min(units − fill, debt − owed) = min(3, 5 − 0) = 3|count → 2, owed → 3|every unit charged (a charge is never refused; takes are, while the key owes)|remaining = max(0, rate − count) − owed = 0 − 3 = -3|reset after = window end + ⌈owed / rate⌉ × period − now = 3s (to the end of the last window the debt reaches)",
				"denied -3|now is in the open window [t+0s, t+1s), which counts 2, and owes 3|count + cost = 2 + 1 = 3 > rate 2: denied, nothing spent; retry after 1.5s|remaining = max(0, rate − count) − owed = 0 − 3 = -3|reset after = window end + ⌈owed / rate⌉ × period − now = 2.5s (to the end of the last window the debt reaches)",
				"denied -1|the window that ended at t+1s owed 3: the windows after it follow back to back while anything is owed; now is in the next, [t+1s, t+2s), which counts 2 of what is owed and owes 1|count + cost = 2 + 1 = 3 > rate 2: denied, nothing spent; retry after 1s|remaining = max(0, rate − count) − owed = 0 − 1 = -1|reset after = window end + ⌈owed / rate⌉ × period − now = 2s (to the end of the last window the debt reaches)",
				"allowed 0|the window that ended at t+2s owed 1: the windows after it follow back to back while anything is owed; now is in the next, [t+2s, t+3s), which counts 1 of what is owed and owes 0|count + cost = 1 + 1 = 2 ≤ rate 2: allowed|remaining = rate − count = 2 − 2 = 0|reset after = window end − now = 500ms",
			}},
	} {
		reqs, err := ParseRequests(c.requests, DefaultStart, "k", 100)
		if err != nil {
			t.Fatal(err)
		}
		w, err := NewWalk(c.p, DefaultStart, reqs, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i, st := range w.Steps {
			got := st.Result[0].Value + " " + st.Result[1].Value + "|" + strings.Join(st.Math, "|")
			if i >= len(c.want) || got != c.want[i] {
				t.Errorf("%v step %d:\n got %s\nwant %s", c.p.Kind, i+1, got, c.want[min(i, len(c.want)-1)])
			}
		}
	}
	// A charge under an algorithm that cannot carry a debt is an error
	// that changes nothing.
	w, err := NewWalk(algo.Params{Kind: algo.SlidingLog, Rate: 2, Period: 1_000_000}, DefaultStart, []Arrival{{T: DefaultStart, Key: "k", Cost: 1, Charge: true}}, 0)
	if err != nil || w.Steps[0].Error == "" || !strings.Contains(w.Steps[0].Math[0], "cannot carry a debt") {
		t.Errorf("a charge on a sliding log: %+v, %v", w.Steps, err)
	}
}

func TestParseRequests(t *testing.T) {
	for _, c := range []struct {
		in, want string
	}{
		{"0ms x3, 200ms, 1s cost=2", "0/1 0/1 0/1 200000/1 1000000/2"},
		{" 0 ,1us cost=0 x2", "0/1 1/0 1/0"},
		{"1.5s ×2", "1500000/1 1500000/1"},
		{"", "error: no requests"},
		{"0ms,,1s", "error: request 2 is empty"},
		{"1s, 0s", "error: request 2: offset 0s comes before 1s"},
		{"-1s", "error: request 1: offset -1s is not a whole number"},
		{"1ns", "error: request 1: offset 1ns is not a whole number"},
		{"soon", "error: request 1: \"soon\" is not an offset"},
		{"0ms x0", "error: request 1: \"x0\": want xN"},
		{"0ms cost=-1", "error: request 1: \"cost=-1\": want cost=N"},
		{"0ms charge=40, 1s charge=0 x2", "0/40c 1000000/0c 1000000/0c"},
		{"0ms charge=-1", "error: request 1: \"charge=-1\": want charge=N"},
		{"0ms cost=1 charge=2", "error: request 1: \"charge=2\" after cost=: give a request one cost=N or charge=N"},
		{"0ms please", "error: request 1: \"please\": want xN"},
		{"0ms x11", "error: too many requests: more than 10"},
		{"0ms x9223372036854775807", "error: too many requests: more than 10"},
	} {
		reqs, err := ParseRequests(c.in, DefaultStart, "k", 10)
		var got []string
		for _, r := range reqs {
			c := ""
			if r.Charge {
				c = "c"
			}
			got = append(got, fmt.Sprintf("%d/%d%s", r.T-DefaultStart, r.Cost, c))
		}
		g := strings.Join(got, " ")
		if err != nil {
			g = "error: " + err.Error()
		}
		if !strings.HasPrefix(g, c.want) {
			t.Errorf("ParseRequests(%q) = %s, want %s", c.in, g, c.want)
		}
	}
}

// FuzzParseRequests: any text gives requests in time order within the
// bound, or an error; never a panic.
func FuzzParseRequests(f *testing.F) {
	for _, s := range []string{"0ms x3, 200ms, 1s cost=2", "", ",", "1h ×5 cost=0", "9999999h", "0ms charge=40 x2, 1s cost=0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		reqs, err := ParseRequests(s, DefaultStart, "k", 50)
		if err != nil {
			return
		}
		if len(reqs) == 0 || len(reqs) > 50 {
			t.Fatalf("%q gave %d requests", s, len(reqs))
		}
		for i, r := range reqs {
			if r.Cost < 0 || algo.CheckTime(r.T) != nil || i > 0 && r.T < reqs[i-1].T {
				t.Fatalf("%q: request %d is %+v", s, i, r)
			}
		}
	})
}

func TestNewWalkErrors(t *testing.T) {
	p := algo.Params{Kind: algo.GCRA, Rate: 10, Period: 1_000_000, Burst: 2}
	many := make([]Arrival, 1001)
	for i := range many {
		many[i] = Arrival{T: DefaultStart, Key: "k", Cost: 1}
	}
	for _, c := range []struct {
		reqs []Arrival
		want string
	}{
		{nil, "no requests"},
		{[]Arrival{{T: DefaultStart, Key: "a", Cost: 1}, {T: DefaultStart, Key: "b", Cost: 1}}, "request 2 is for key \"b\""},
		{[]Arrival{{T: DefaultStart + 5, Key: "a", Cost: 1}, {T: DefaultStart, Key: "a", Cost: 1}}, "request 2 at t+0s comes before request 1 at t+5us"},
		{[]Arrival{{T: -1, Key: "a", Cost: 1}}, "request 1: sluice: invalid time"},
	} {
		if _, err := NewWalk(p, DefaultStart, c.reqs, 0); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("got %v, want %s", err, c.want)
		}
	}
	if _, err := NewWalk(algo.Params{Kind: algo.GCRA, Rate: 10, Period: 1_000_000}, DefaultStart, many[:1], 0); err == nil {
		t.Error("a gcra of burst 0 walked")
	}
	// A walk stops once its text passes the bytes it is given.
	w, err := NewWalk(p, DefaultStart, many, 0)
	if err != nil {
		t.Fatal(err)
	}
	var size int64
	for i := range w.Steps {
		size += w.Steps[i].Bytes()
	}
	if _, err := NewWalk(p, DefaultStart, many, size/2); !errors.Is(err, ErrWalkTooLarge) {
		t.Errorf("a walk of %d bytes under a bound of %d: %v", size, size/2, err)
	}
}

// A sliding log's state shows its entries one by one up to logShown, then
// the oldest and the newest and how many are between, so that a step's
// text is bounded however many entries the log holds.
func TestWalkLogSummary(t *testing.T) {
	p := algo.Params{Kind: algo.SlidingLog, Rate: 1000, Period: 7200e6}
	var reqs []Arrival
	for i := range 1000 {
		reqs = append(reqs, Arrival{T: DefaultStart + int64(i)*7_000_000, Key: "k", Cost: 1})
	}
	w, err := NewWalk(p, DefaultStart, reqs, 0)
	if err != nil {
		t.Fatal(err)
	}
	field := func(fs []Field, name string) string {
		for _, f := range fs {
			if f.Name == name {
				return f.Value
			}
		}
		return ""
	}
	if got, want := field(w.Steps[2].After, "log"), "t+0s ×1, t+7s ×1, t+14s ×1"; got != want {
		t.Errorf("3 entries: %q, want %q", got, want)
	}
	if got, want := field(w.Steps[3].After, "log"), "t+0s ×1, … 2 more …, t+21s ×1"; got != want {
		t.Errorf("4 entries: %q, want %q", got, want)
	}
	last := w.Steps[999].After
	if got, want := field(last, "log"), "t+0s ×1, … 998 more …, t+1h56m33s ×1"; got != want || field(last, "units in the log") != "1000" {
		t.Errorf("1000 entries: %q (%v), want %q", got, last, want)
	}
	for i := range w.Steps {
		if n := w.Steps[i].Bytes(); n > 600 {
			t.Fatalf("step %d: %d bytes of text", i+1, n)
		}
	}
}
