package algo_test

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/model"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
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
			spentIn := map[string]int64{} // the Window of each key's last take
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
					window := []int64{0, spentIn[key], spentIn[key] + p.Period}[rng.IntN(3)]
					got, err = algo.Refund(&p, &s, now, units, window)
					want = ks.Refund(key, model.Limit{Kind: p.Kind, Rate: p.Rate, Period: p.Period, Burst: p.Burst}, now, units, window)
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
					if changed {
						spentIn[key] = got.Window
					}
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
		if _, err := algo.Refund(&p, &s, t0, 1, 0); !errors.Is(err, algo.ErrNoRefund) {
			t.Errorf("%v: %v, want ErrNoRefund", k, err)
		}
		if s.Kind != before.Kind || s.A != before.A || s.B != before.B || s.C != before.C || len(s.Log) != len(before.Log) {
			t.Errorf("%v: a refused refund changed the state: %+v → %+v", k, before, s)
		}
	}
}

// Units spent in a window that has ended are not given back to the next:
// a refund that names the window of its take (its Decision.Window) gives
// nothing once the key has moved on, and one that names none gives back to
// the window the key is in. A count brought to 0 leaves the key fresh.
func TestRefundLateWindow(t *testing.T) {
	for _, k := range []algo.Kind{algo.FixedWindow, algo.AlignedWindow} {
		p := algo.Params{Kind: k, Rate: 10, Period: 60_000_000}
		start := (t0/p.Period + 1) * p.Period // a window's start, for both kinds
		var s algo.State
		first := algo.Step(&p, &s, start, 10, algo.Never)
		if !first.Allowed || first.Window != start+p.Period {
			t.Fatalf("%v: first take %+v, want allowed in the window ending %d", k, first, start+p.Period)
		}
		next := algo.Step(&p, &s, start+p.Period, 10, algo.Never)
		if !next.Allowed || next.Window != start+2*p.Period {
			t.Fatalf("%v: take in the next window %+v", k, next)
		}
		d, err := algo.Refund(&p, &s, start+p.Period+1, 10, first.Window)
		if err != nil || d.Remaining != 0 {
			t.Errorf("%v: a late refund of the first window's units: %+v, %v; want nothing given back", k, d, err)
		}
		if d := algo.Step(&p, &s, start+p.Period+2, 1, algo.Never); d.Allowed {
			t.Errorf("%v: the next window admitted 11 of 10 after a late refund", k)
		}
		d, err = algo.Refund(&p, &s, start+p.Period+3, 4, next.Window)
		if err != nil || d.Remaining != 4 || d.ResetAfter != p.Period-3 {
			t.Errorf("%v: refund of 4 to its own window: %+v, %v; want remaining 4", k, d, err)
		}
		d, err = algo.Refund(&p, &s, start+p.Period+4, 6, 0)
		if err != nil || d.Remaining != 10 || d.ResetAfter != 0 || s.Kind != 0 {
			t.Errorf("%v: refund of the last 6: %+v (state %+v), %v; want the key fresh", k, d, s, err)
		}
	}
}
