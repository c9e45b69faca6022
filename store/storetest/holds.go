package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/model"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/store"
)

// hold is a hold a check was granted: its op's key, limit and id, and
// when it comes back.
type hold struct {
	key    string
	limit  store.Concurrency
	id     int64
	expiry int64
}

// acquire is an Acquire of units on key under cc at at, named id.
func acquire(key string, cc store.Concurrency, at, units, id int64) store.Op {
	return store.Op{Kind: store.Acquire, At: at, Key: key, Concurrency: cc, Cost: units, ID: id, MaxDelay: store.Never}
}

// holdOp is a Release or an Extend (by lifetime) of h at at.
func holdOp(kind store.Kind, h hold, at, lifetime int64) store.Op {
	cc := h.limit
	if lifetime != 0 {
		cc.Lifetime = lifetime
	}
	return store.Op{Kind: kind, At: at, Key: h.key, Concurrency: cc, ID: h.id}
}

// decideHold runs op, an Acquire, Release or Extend with no parts, and
// fails the test unless its decision and Expiry are the model's (m).
func (c *checker) decideHold(m *model.Holds, op store.Op) store.Op {
	c.t.Helper()
	got := c.one(op)
	cc, exp := op.Concurrency, int64(0)
	var d algo.Decision
	switch op.Kind {
	case store.Acquire:
		d = m.Acquire(op.Key, cc.Limit, cc.Lifetime, op.At, op.Cost, op.ID)
		if d.Allowed && op.Cost > 0 {
			exp = op.At + cc.Lifetime
		}
	case store.Release:
		d = m.Release(op.Key, cc.Limit, op.At, op.ID)
	case store.Extend:
		d = m.Extend(op.Key, cc.Limit, cc.Lifetime, op.At, op.ID)
		if d.Allowed {
			exp = op.At + cc.Lifetime
		}
	}
	if got.Decision != want(d) || got.Expiry != exp {
		c.t.Fatalf("%s:\n got  %+v expiry %d\n want %+v expiry %d", describe(&got), got.Decision, got.Expiry, want(d), exp)
	}
	return got
}

// traceHolds checks a random trace of acquires, releases and extensions
// on a few keys, under limits and lifetimes that change: every answer
// equals the model's (model.Holds), every hold granted comes back at its
// Expiry, and an acquire naming a hold still held is refused with
// ErrIDInUse and changes nothing.
func traceHolds(c *checker, n int) {
	seed := testenv.Seed(c.t)
	r := rand.New(rand.NewPCG(seed, 25))
	m := model.NewHolds()
	keys := []string{"a", "b", "{a}c"}
	var granted []hold
	now, id, inUse := Base, int64(0), 0
	for range 2 * n {
		now += r.Int64N(40_000)
		key := keys[r.IntN(len(keys))]
		cc := store.Concurrency{Limit: 1 + r.Int64N(5), Lifetime: 1 + r.Int64N(100_000)}
		k := r.IntN(20)
		if len(granted) == 0 {
			k = 0
		}
		j := r.IntN(max(1, len(granted)))
		switch {
		case k < 10:
			id++
			op := c.decideHold(m, acquire(key, cc, now, r.Int64N(cc.Limit+1), id))
			if op.Expiry > 0 {
				granted = append(granted, hold{key, cc, id, op.Expiry})
			}
		case k < 16:
			c.decideHold(m, holdOp(store.Release, granted[j], now, 0))
			granted = slices.Delete(granted, j, j+1)
		case k < 18 || granted[j].expiry <= now:
			if op := c.decideHold(m, holdOp(store.Extend, granted[j], now, cc.Lifetime)); op.Expiry > 0 {
				granted[j].expiry = op.Expiry
			}
		default:
			h := granted[j]
			c.expectErr(acquire(h.key, cc, now, 1+r.Int64N(cc.Limit), h.id), store.ErrIDInUse)
			inUse++
		}
	}
	c.t.Logf("%d hold operations (%d naming a held id) equal to the model (seed %d)", 2*n, inUse, seed)
}

// holdLifetime checks that the holds of a holder that never releases
// come back at the end of their lifetime, not a microsecond before, and
// that an extension moves that end.
func holdLifetime(c *checker, _ int) {
	m := model.NewHolds()
	cc := store.Concurrency{Limit: 3, Lifetime: 1_000_000}
	var held []hold
	for id := range int64(3) {
		op := c.decideHold(m, acquire("job", cc, Base, 1, id+1))
		held = append(held, hold{"job", cc, id + 1, op.Expiry})
	}
	if ext := c.decideHold(m, holdOp(store.Extend, held[0], Base+500_000, 0)); ext.Expiry != Base+1_500_000 {
		c.t.Fatalf("an extension: %+v expiry %d, want held until +1.5s", ext.Decision, ext.Expiry)
	}
	if op := c.decideHold(m, acquire("job", cc, Base+999_999, 1, 4)); op.Decision.Allowed || op.Decision.RetryAfter != 1 {
		c.t.Fatalf("1µs before two holds end: %+v, want refused, retry after 1µs", op.Decision)
	}
	if op := c.decideHold(m, acquire("job", cc, Base+1_000_000, 2, 5)); !op.Decision.Allowed {
		c.t.Fatalf("when they end: %+v, want both slots back", op.Decision)
	}
	if op := c.decideHold(m, holdOp(store.Release, held[1], Base+1_000_000, 0)); op.Decision.Allowed {
		c.t.Fatalf("a release of a hold that came back: %+v, want not held", op.Decision)
	}
	if op := c.decideHold(m, holdOp(store.Extend, held[2], Base+1_000_000, 0)); op.Decision.Allowed {
		c.t.Fatalf("an extension of a hold that came back: %+v, want not held", op.Decision)
	}
	if op := c.decideHold(m, holdOp(store.Release, held[0], Base+1_000_000, 0)); !op.Decision.Allowed || op.Decision.Remaining != 1 {
		c.t.Fatalf("a release of the extended hold: %+v, want held, 1 free after", op.Decision)
	}
}

// traceHoldComposites checks a random trace of composite acquires (a
// hold and rate parts, half of them leaving random headroom) among
// releases: the summary, each part's decision and the Expiry equal the
// model's (model.AcquireEach). The hold's key also names a rate part: two
// states. The keys share a {hash tag}.
func traceHoldComposites(c *checker, n int) {
	seed := testenv.Seed(c.t)
	r := rand.New(rand.NewPCG(seed, 27))
	rates := []store.Limit{
		limit(algo.TokenBucket, 20, 1_000_000, 3),
		limit(algo.FixedWindow, 5, 1_000_000, 0),
		limit(algo.SlidingLog, 8, 1_000_000, 0),
		limit(algo.GCRA, 10, 1_000_000, 2),
		limit(algo.SlidingWindow, 4, 1_000_000, 0),
	}
	ls, ks := model.NewHolds(), model.NewKeys()
	const job = "{u}job"
	partKeys := []string{"{u}rate", "{u}global", job}
	var held []hold
	now, admitted := Base, 0
	for i := range n {
		now += r.Int64N(60_000)
		if len(held) > 0 && r.IntN(3) == 0 {
			j := r.IntN(len(held))
			c.decideHold(ls, holdOp(store.Release, held[j], now, 0))
			held = slices.Delete(held, j, j+1)
			continue
		}
		cc := store.Concurrency{Limit: 1 + r.Int64N(3), Lifetime: 50_000 + r.Int64N(300_000)}
		op := acquire(job, cc, now, r.Int64N(cc.Limit+1), int64(i+1))
		var models []*model.Model
		var keys []string
		var costs, reserves []int64
		for _, k := range r.Perm(len(partKeys))[:r.IntN(len(partKeys)+1)] {
			l := rates[r.IntN(len(rates))]
			capacity := params(l).Capacity()
			cost := r.Int64N(capacity + 1)
			reserve := int64(0)
			if r.IntN(2) == 0 {
				reserve = r.Int64N(capacity - cost + 1)
			}
			op.Parts = append(op.Parts, store.Part{Key: partKeys[k], Limit: l, Cost: cost, Headroom: reserve})
			models = append(models, ks.Model(modelLimit(l)))
			keys, costs, reserves = append(keys, partKeys[k]), append(costs, cost), append(reserves, reserve)
		}
		op = c.one(op)
		each := make([]algo.Decision, len(op.Parts))
		h := model.AcquireEach(ls, job, cc.Limit, cc.Lifetime, op.Cost, op.ID, models, keys, costs, reserves, now, each)
		sum, exp := model.Fold(h, each), int64(0)
		if sum.Allowed && op.Cost > 0 {
			exp = now + cc.Lifetime
		}
		if op.Decision != want(sum) || op.Expiry != exp {
			c.t.Fatalf("seed %d op %d (%s):\n got  %+v expiry %d\n want %+v expiry %d (the hold's %+v)", seed, i, describe(&op), op.Decision, op.Expiry, want(sum), exp, h)
		}
		for j := range each {
			c.expect(fmt.Sprintf("seed %d op %d (%s): part %d", seed, i, describe(&op), j), op.Parts[j].Decision, want(each[j]))
		}
		if exp > 0 {
			held = append(held, hold{job, cc, op.ID, exp})
			admitted++
		}
	}
	c.t.Logf("%d composite acquires and releases (%d held) equal to the model (seed %d)", n, admitted, seed)
}

// holdGoroutines has goroutines acquire a slot of a limit of 3 at one
// instant, count themselves in flight outside the store, and release, many
// times each: the count never passes 3, and every release finds its hold.
func holdGoroutines(c *checker, _ int) {
	const g, n = 8, 60
	cc := store.Concurrency{Limit: 3, Lifetime: 3_600_000_000}
	if !c.supports(acquire("conc", cc, Base, 0, 1)) {
		c.t.Skip("skipped: holds are not supported")
	}
	var inFlight, most, passed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, g)
	for gi := range g {
		wg.Go(func() {
			for i := range n {
				ops := []store.Op{acquire("conc", cc, Base, 1, int64(gi*n+i+1))}
				if c.s.Run(c.t.Context(), ops); ops[0].Err != nil {
					errs <- ops[0].Err
					return
				}
				if !ops[0].Decision.Allowed {
					continue
				}
				v := inFlight.Add(1)
				for m := most.Load(); v > m && !most.CompareAndSwap(m, v); m = most.Load() {
				}
				passed.Add(1)
				look := []store.Op{acquire("conc", cc, Base, 0, 1)} // while it holds its slot
				c.s.Run(c.t.Context(), look)
				inFlight.Add(-1)
				h := hold{"conc", cc, ops[0].ID, ops[0].Expiry}
				ops[0] = holdOp(store.Release, h, Base, 0)
				if c.s.Run(c.t.Context(), ops); ops[0].Err != nil || !ops[0].Decision.Allowed {
					errs <- errors.Join(ops[0].Err, fmt.Errorf("hold %d, kept for an hour, was not held at its release", h.id))
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		c.t.Fatal(err)
	}
	if most.Load() > 3 || passed.Load() == 0 {
		c.t.Fatalf("at most %d in flight (limit 3), %d passed", most.Load(), passed.Load())
	}
	if op := c.one(acquire("conc", cc, Base, 3, g*n+1)); !op.Decision.Allowed {
		c.t.Fatalf("after every release, the whole limit: %+v", op.Decision)
	}
	c.t.Logf("%d passed, at most %d in flight", passed.Load(), most.Load())
}
