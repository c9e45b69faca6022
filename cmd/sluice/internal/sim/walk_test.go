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
// order, some of them queries and some over the capacity.
func randomWalk(r *rand.Rand, k algo.Kind) (algo.Params, []Arrival) {
	l := walkLimits[r.IntN(len(walkLimits))]
	p := algo.Params{Kind: k, Rate: l.rate, Period: l.period, Burst: 1 + r.Int64N(6)}
	if k == algo.LeakyBucket {
		p.Burst = r.Int64N(6)
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
		reqs = append(reqs, Arrival{T: t, Key: "k", Cost: r.Int64N(p.Capacity() + 2)})
	}
	return p, reqs
}

// TestWalkMatchesModel: on random sequences, every step's decision is the
// exact model's, the state it leaves answers a query as the model's does,
// each step's state before is the previous step's after, and a cost over
// the capacity is an error that changes nothing.
func TestWalkMatchesModel(t *testing.T) {
	r := rand.New(rand.NewPCG(testenv.Seed(t), 27))
	for _, k := range algo.Kinds() {
		for trial := range 150 {
			p, reqs := randomWalk(r, k)
			w, err := NewWalk(p, DefaultStart, reqs, 0)
			if err != nil {
				t.Fatalf("%v: %v", p, err)
			}
			m := model.New(k, p.Rate, p.Period, p.Burst)
			var s algo.State // the key's state, stepped beside the walk
			for i, st := range w.Steps {
				where := fmt.Sprintf("%v rate=%d period=%d burst=%d trial %d step %d (%s cost %d)", k, p.Rate, p.Period, p.Burst, trial, st.N, st.At, st.Cost)
				if i > 0 && fmt.Sprint(st.Before) != fmt.Sprint(w.Steps[i-1].After) {
					t.Fatalf("%s: before %v is not the previous after %v", where, st.Before, w.Steps[i-1].After)
				}
				if st.Cost > p.Capacity() {
					if st.Error == "" || fmt.Sprint(st.After) != fmt.Sprint(st.Before) || st.Result != nil {
						t.Fatalf("%s: a cost over capacity %d gave %+v", where, p.Capacity(), st)
					}
					continue
				}
				want := m.Take("k", st.T, st.Cost)
				algo.Step(&p, &s, st.T, st.Cost, algo.Never)
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
	if !strings.Contains(math, verdict) && st.Cost > 0 {
		t.Fatalf("%s: the arithmetic %q never says %s", where, st.Math, verdict)
	}
	// The arithmetic ends where the decision does.
	if !d.Allowed && !strings.Contains(math, "retry after "+dur(d.RetryAfter)) {
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
		{"0ms please", "error: request 1: \"please\": want xN"},
		{"0ms x11", "error: too many requests: more than 10"},
		{"0ms x9223372036854775807", "error: too many requests: more than 10"},
	} {
		reqs, err := ParseRequests(c.in, DefaultStart, "k", 10)
		var got []string
		for _, r := range reqs {
			got = append(got, fmt.Sprintf("%d/%d", r.T-DefaultStart, r.Cost))
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
	for _, s := range []string{"0ms x3, 200ms, 1s cost=2", "", ",", "1h ×5 cost=0", "9999999h"} {
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
