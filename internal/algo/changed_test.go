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

// A changedEvent is one request of a trace whose limit changes from request
// to request.
type changedEvent struct {
	key       string
	p         algo.Params
	now, cost int64
}

// changedTrace draws n requests over a few keys, each under one of a few
// limits of random algorithms, rates, periods and bursts: a key often stays
// under one limit for a while, then moves to another (a changed rate, period
// or burst, a rolling deploy to another algorithm).
func changedTrace(rng *rand.Rand, n int) []changedEvent {
	var limits []algo.Params
	kinds := algo.Kinds()
	for range 2 + rng.IntN(4) {
		p := randomParams(rng, kinds[rng.IntN(len(kinds))])
		if len(limits) > 0 && rng.IntN(3) == 0 { // a variant of one already drawn
			q := limits[rng.IntN(len(limits))]
			switch rng.IntN(3) {
			case 0:
				p.Rate, p.Period = q.Rate, q.Period
			case 1:
				p = randomParams(rng, q.Kind)
			default:
				q.Kind = kinds[rng.IntN(len(kinds))]
				p = randomParams(rng, q.Kind)
				p.Rate, p.Period = q.Rate, q.Period
			}
		}
		limits = append(limits, p)
	}
	keys := []string{"a", "b", "c"}[:1+rng.IntN(3)]
	cur := map[string]int{}
	trace := make([]changedEvent, 0, n)
	now := t0 + rng.Int64N(2_000_000)
	for range n {
		key := keys[rng.IntN(len(keys))]
		if rng.IntN(8) == 0 {
			cur[key] = rng.IntN(len(limits))
		}
		p := limits[cur[key]]
		g := &generator{rng: rng, p: p}
		now += g.gap(now, algo.Decision{}, 0, false)
		trace = append(trace, changedEvent{key, p, now, g.cost()})
	}
	return trace
}

// TestChangedLimitsMatchModel runs traces whose limits change (rate, period,
// burst, algorithm) through Step and through the model, which reads another
// limit's state as SEMANTICS.md's "Changed limits" says, and requires the
// same decisions. Dropping a state at the FreshAt its last decision gave (as
// an expiring store does) must change nothing, whatever limit reads it
// next; and with token-bucket and gcra swapped throughout, every decision
// must be the same.
func TestChangedLimitsMatchModel(t *testing.T) {
	traces, length := 600, 200
	switch {
	case raceEnabled:
		traces = 40
	case !testenv.Long():
		traces = 100
	}
	compared := 0
	for _, seed := range seeds(t) {
		rng := rand.New(rand.NewPCG(seed, 99))
		for n := range traces {
			trace := changedTrace(rng, length)
			ks := model.NewKeys()
			states := map[string]algo.State{}
			dropped := map[string]algo.State{}
			swapped := map[string]algo.State{}
			freshAt := map[string]int64{}
			drop := rand.New(rand.NewPCG(seed, uint64(n)))
			var got []algo.Decision
			for i, e := range trace {
				lim := model.Limit{Kind: e.p.Kind, Rate: e.p.Rate, Period: e.p.Period, Burst: e.p.Burst}
				var want algo.Decision
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Fatalf("seed %d trace %d event %d: the model panicked: %v\n%s", seed, n, i, r, reportChanged(trace, append(got, algo.Decision{}), i))
						}
					}()
					want = ks.Take(e.key, lim, e.now, e.cost)
				}()
				s := states[e.key]
				d := algo.Step(&e.p, &s, e.now, e.cost, algo.Never)
				states[e.key] = s
				got = append(got, d)
				fail := func(what string, other algo.Decision) {
					t.Helper()
					t.Fatalf("seed %d trace %d event %d: %s\n got   %s\n other %s\n%s", seed, n, i, what,
						fmtDecision(d), fmtDecision(other), reportChanged(trace, got, i))
				}
				if err := checkInvariants(e.p, e.now, e.cost, d); err != nil {
					fail("invariant: "+err.Error(), d)
				}
				if !same(d, want) {
					fail("step ≠ model", want)
				}

				ds := dropped[e.key]
				if fa, ok := freshAt[e.key]; ok && e.now >= fa && drop.IntN(2) == 0 {
					ds = algo.State{}
				}
				dd := algo.Step(&e.p, &ds, e.now, e.cost, algo.Never)
				dropped[e.key] = ds
				if e.cost > 0 {
					freshAt[e.key] = dd.FreshAt
				}
				if !same(d, dd) {
					fail("dropping a state at FreshAt changed a decision", dd)
				}

				q := e.p
				switch q.Kind {
				case algo.TokenBucket:
					q.Kind = algo.GCRA
				case algo.GCRA:
					q.Kind = algo.TokenBucket
				}
				ss := swapped[e.key]
				sd := algo.Step(&q, &ss, e.now, e.cost, algo.Never)
				swapped[e.key] = ss
				if sd != d {
					fail("token-bucket and gcra swapped decided otherwise", sd)
				}
				compared++
			}
		}
	}
	t.Logf("%d decisions under changing limits equal to the model", compared)
}

func reportChanged(trace []changedEvent, got []algo.Decision, i int) string {
	var b strings.Builder
	for j := max(0, i-40); j <= i; j++ {
		e := trace[j]
		fmt.Fprintf(&b, "  %4d key=%s %v %d/%dµs burst %d t=%d cost=%d: %s\n", j, e.key, e.p.Kind, e.p.Rate, e.p.Period, e.p.Burst, e.now-t0, e.cost, fmtDecision(got[j]))
	}
	return b.String()
}
