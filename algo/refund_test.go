package algo_test

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/internal/model"
	"github.com/sluice-go/sluice/internal/testenv"
)

// Refunds of the algorithms that can give units back, mixed into traces of
// takes under the same limit and under another algorithm (whose state the
// refund must read as a request would), equal the model's decision by
// decision. Each key's state is dropped, as a store expires it, at random
// requests at or after the FreshAt of the last decision that changed it.
func TestRefundModel(t *testing.T) {
	seed := testenv.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 3))
	kinds := algo.Kinds()
	refunds := 0
	for _, kind := range []algo.Kind{algo.TokenBucket, algo.GCRA, algo.FixedWindow, algo.AlignedWindow} {
		for trace := range 40 {
			rp := rates[rng.IntN(len(rates))]
			p := algo.Params{Kind: kind, Rate: rp.rate, Period: rp.period, Burst: 1 + rng.Int64N(5)}
			rq := rates[rng.IntN(len(rates))]
			q := algo.Params{Kind: kinds[rng.IntN(len(kinds))], Rate: rq.rate, Period: rq.period, Burst: 1 + rng.Int64N(5)}
			if rng.IntN(2) == 0 {
				q.Rate, q.Period = p.Rate, p.Period
			}
			if q.Kind == algo.LeakyBucket {
				q.Burst--
			}
			ks := model.NewKeys()
			state := map[string]algo.State{}
			freshAt := map[string]int64{}
			now := t0 + rng.Int64N(2*p.Period)
			for i := range 300 {
				key := []string{"a", "b"}[rng.IntN(2)]
				switch rng.IntN(3) {
				case 0:
				case 1:
					now += rng.Int64N(p.Period/p.Rate*2 + 2)
				default:
					now += rng.Int64N(2*p.Period + 1)
				}
				if fa, ok := freshAt[key]; ok && now >= fa && rng.IntN(2) == 0 {
					delete(state, key)
					delete(freshAt, key)
				}
				s := state[key]
				before := s
				var got, want algo.Decision
				var err error
				var changed bool // a take stores when it costs; a refund when it gives back
				op, lim := "refund", p
				switch r := rng.IntN(4); {
				case r == 0:
					units := rng.Int64N(p.Capacity() + 2)
					got, err = algo.Refund(&p, &s, now, units)
					want = ks.Refund(key, model.Limit{Kind: p.Kind, Rate: p.Rate, Period: p.Period, Burst: p.Burst}, now, units)
					refunds++
					changed = s.Kind != before.Kind || s.A != before.A || s.B != before.B || s.C != before.C || s.Rate != before.Rate || s.Period != before.Period
				default:
					if r == 1 {
						lim, op = q, "take under "+q.Kind.String()
					} else {
						op = "take"
					}
					cost := rng.Int64N(lim.Capacity() + 1)
					got = algo.Step(&lim, &s, now, cost, algo.Never)
					changed = cost > 0
					want = ks.Take(key, model.Limit{Kind: lim.Kind, Rate: lim.Rate, Period: lim.Period, Burst: lim.Burst}, now, cost)
				}
				if err != nil {
					t.Fatalf("seed %d: %v trace %d event %d: %s: %v", seed, kind, trace, i, op, err)
				}
				if !same(got, want) {
					t.Fatalf("seed %d: %v %+v (other %+v) trace %d event %d at t0+%d, key %s: %s: %s, model %s",
						seed, kind, p, q, trace, i, now-t0, key, op, fmtDecision(got), fmtDecision(want))
				}
				if changed {
					freshAt[key] = got.FreshAt
				}
				state[key] = s
			}
		}
	}
	t.Logf("%d refunds equal to the model (seed %d)", refunds, seed)
}

// The algorithms that cannot give units back say so and change nothing.
func TestRefundRefused(t *testing.T) {
	for _, k := range []algo.Kind{algo.LeakyBucket, algo.SlidingWindow, algo.SlidingLog} {
		p := algo.Params{Kind: k, Rate: 5, Period: 1_000_000, Burst: 1}
		s := algo.State{}
		algo.Step(&p, &s, t0, 1, algo.Never)
		before := s
		if _, err := algo.Refund(&p, &s, t0, 1); !errors.Is(err, algo.ErrNoRefund) {
			t.Errorf("%v: %v, want ErrNoRefund", k, err)
		}
		if s.Kind != before.Kind || s.A != before.A || s.B != before.B || s.C != before.C || len(s.Log) != len(before.Log) {
			t.Errorf("%v: a refused refund changed the state: %+v → %+v", k, before, s)
		}
	}
}
