package rlqs

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// rateHeld is what the harness's log says holder id may enforce at t, as
// a rate (tokens per µs): the largest of the assignments sent to it at
// since or later whose TTL and slack have not run out.
func (h *harness) rateHeld(id Holder, t, since int64) *big.Rat {
	r := new(big.Rat)
	for _, s := range h.sent[id] {
		if s.act.Abandon || s.act.Wait || s.at < since || s.at+s.act.TTL.Microseconds()+h.a.slack <= t {
			continue
		}
		if x := big.NewRat(s.act.Tokens, s.act.Fill.Microseconds()); x.Cmp(r) > 0 {
			r = x
		}
	}
	return r
}

// ratesHeld is Σ rateHeld over every holder.
func (h *harness) ratesHeld(t, since int64) *big.Rat {
	sum := new(big.Rat)
	for id := range h.sent {
		sum.Add(sum, h.rateHeld(id, t, since))
	}
	return sum
}

func rateOf(b Budget) *big.Rat { return big.NewRat(b.Rate, b.Fill.Microseconds()) }

// reloadBound checks the bound across a reload at since to b, at the
// harness's now, as rates: the leases granted since the reload add up to
// at most b's rate; all the leases to at most the larger of b's rate and
// what was outstanding at the reload (held), and to at most b's rate
// once a lease has passed since the reload.
func (h *harness) reloadBound(b Budget, since int64, held *big.Rat, what string) {
	h.t.Helper()
	r := rateOf(b)
	if got := h.ratesHeld(h.now, since); got.Cmp(r) > 0 {
		h.t.Fatalf("%s: the leases granted since the reload hold %s a µs, over the new rate %s", what, got.FloatString(9), r.FloatString(9))
	}
	all := h.ratesHeld(h.now, 0)
	limit := r
	if h.now < since+h.a.longest && held.Cmp(r) > 0 {
		limit = held
	}
	if all.Cmp(limit) > 0 {
		h.t.Fatalf("%s: the leases hold %s a µs, over %s (new rate %s, held at the reload %s)", what, all.FloatString(9), limit.FloatString(9), r.FloatString(9), held.FloatString(9))
	}
	if bk := h.a.buckets[b.Key]; bk != nil {
		counted := big.NewRat(h.a.outstanding(h.now, bk), bk.fill)
		if counted.Cmp(all) < 0 {
			h.t.Fatalf("%s: the allocator counts %s a µs outstanding, the log %s", what, counted.FloatString(9), all.FloatString(9))
		}
	}
}

// A reload that changes the unit (a second to a minute) and one that
// lowers the rate (to a fifth): the old leases count in the new unit as
// rates, rounded up; nothing is granted while they fill the new rate;
// once they end, grants come back, within the new rate; the demand
// estimates carry over to the new unit.
func TestReloadKeepsBound(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to Budget
	}{
		{"unit", Budget{Key: "k", Rate: 1000, Fill: time.Second}, Budget{Key: "k", Rate: 30000, Fill: time.Minute}},
		{"unit up", Budget{Key: "k", Rate: 60000, Fill: time.Minute}, Budget{Key: "k", Rate: 1000, Fill: time.Second}},
		{"lowered", Budget{Key: "k", Rate: 1000, Fill: time.Second}, Budget{Key: "k", Rate: 200, Fill: time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Config{})
			per := func(b Budget) uint64 { return uint64(b.Rate * int64(time.Second) / int64(b.Fill)) } // a second's rate
			// Three clients that want more than the rate between them.
			for range 30 {
				for id := Holder(1); id <= 3; id++ {
					h.report(tc.from, id, 1, per(tc.from)/2, per(tc.from)/2)
				}
				h.advance(time.Second)
				h.round()
			}
			held := h.ratesHeld(h.now, 0)
			if held.Cmp(new(big.Rat).Mul(rateOf(tc.from), big.NewRat(9, 10))) < 0 {
				t.Fatalf("before the reload the leases hold %s a µs, want most of %s", held.FloatString(9), rateOf(tc.from).FloatString(9))
			}
			// the demand of the holders that do not report at the reload
			demandOf := func() *big.Rat {
				d := new(big.Rat)
				for _, ho := range h.a.buckets["k"].holders {
					if ho.id != 1 {
						d.Add(d, big.NewRat(ho.demand, ho.b.fill*scale))
					}
				}
				return d
			}
			demand := demandOf()
			h.advance(time.Millisecond) // after the round's refreshes
			since := h.now
			h.report(tc.to, 1, 1, per(tc.from)/5, per(tc.from)/5)
			h.reloadBound(tc.to, since, held, "the first report after it")
			after := demandOf()
			if q, _ := new(big.Rat).Quo(after, demand).Float64(); q < 0.99 || q > 1.01 {
				t.Errorf("demand %s a µs after the reload, %s before: want it carried over", after.FloatString(9), demand.FloatString(9))
			}
			granted := false
			for step := range 40 {
				h.advance(250 * time.Millisecond)
				for id := Holder(1); id <= 3; id++ {
					if step%4 == int(id) {
						h.report(tc.to, id, 1, per(tc.to)/2, per(tc.to)/2)
					}
				}
				h.round()
				h.reloadBound(tc.to, since, held, "after the reload")
				if h.now >= since+h.a.longest && h.ratesHeld(h.now, since).Sign() > 0 {
					granted = true
				}
			}
			if !granted {
				t.Errorf("a lease after the reload, nothing granted in the new unit")
			}
		})
	}
}

// The property across reloads: whatever the reloads do to a budget's
// rate and unit, mid-trace, the leases granted since the last one hold
// at most its rate, as rates, at every instant; all of them at most the
// larger of it and what was held at the reload, and it alone a lease on.
func TestReloadBoundRandom(t *testing.T) {
	seed := testenv.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 34))
	traces := 20
	if testenv.Long() {
		traces = 200
	}
	fills := []time.Duration{time.Second, 2 * time.Second, time.Minute, time.Hour}
	for range traces {
		h := newHarness(t, Config{Band: rng.Float64() * 0.2, IdleReports: 1 + rng.IntN(4)})
		b := Budget{Key: "k", Rate: 1 + rng.Int64N(2000), Fill: time.Second}
		// The allocator learns of a reload from the first report of the
		// budget under the new rules: that is the reload's instant, since.
		seen, since, held := b, int64(0), new(big.Rat)
		n := 1 + rng.IntN(6)
		for step := range 300 {
			h.advance(time.Duration(rng.Int64N(1500)) * time.Millisecond)
			switch r := rng.IntN(40); {
			case r == 0:
				b.Fill = fills[rng.IntN(len(fills))]
				b.Rate = rng.Int64N(1 + 3*int64(b.Fill/time.Second)*1000)
			case r < 10:
				h.round()
			default:
				if seen != b {
					h.advance(time.Microsecond) // after a round at this instant
					seen, since, held = b, h.now, h.ratesHeld(h.now, 0)
				}
				id := Holder(1 + rng.IntN(n))
				c := uint64(rng.Int64N(3000))
				h.report(b, id, 1+rng.Int64N(3), c/2, c-c/2)
			}
			h.reloadBound(seen, since, held, fmt.Sprintf("seed %d step %d", seed, step))
		}
	}
}

// A sliced replica's slice changes unit with its budget, rounded down:
// 6000 a minute is 100 a second (not 6000), 100 a second 6000 a minute;
// a replica grants from no more than a lowered rate.
func TestReloadSlice(t *testing.T) {
	for _, tc := range []struct {
		from, to Budget
		slice    int64 // in from's unit
		want     int64 // capacity in to's unit
	}{
		{Budget{Key: "k", Rate: 60000, Fill: time.Minute}, Budget{Key: "k", Rate: 1000, Fill: time.Second}, 6059, 100},
		{Budget{Key: "k", Rate: 1000, Fill: time.Second}, Budget{Key: "k", Rate: 60000, Fill: time.Minute}, 100, 6000},
		// a rate lowered: no more than it from a slice leased before
		{Budget{Key: "k", Rate: 1000, Fill: time.Second}, Budget{Key: "k", Rate: 200, Fill: time.Second}, 1000, 200},
	} {
		a, err := New(Config{Sliced: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Report(0, tc.from, 1, 1, 1, 0, nil); err != nil {
			t.Fatal(err)
		}
		a.buckets["k"].asked = tc.slice
		a.SetSlices(0, []Slice{{Key: "k", Fill: tc.from.Fill, Tokens: tc.slice, Fair: tc.slice}})
		if _, err := a.Report(1, tc.to, 1, 1, 1, 0, nil); err != nil {
			t.Fatal(err)
		}
		if got := a.capacity(1, a.buckets["k"], a.ttl+a.slack); got != tc.want {
			t.Errorf("a slice of %d per %v, the unit now %v: capacity %d, want %d", tc.slice, tc.from.Fill, tc.to.Fill, got, tc.want)
		}
	}
}
