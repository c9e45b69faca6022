package storetest

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/model"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// Holds runs the concurrency limits' checks every store must pass: a
// random trace against the exact model, holds that come back at the end of
// their lifetime and not before, the errors, and goroutines that never hold
// more than the limit.
func Holds(t *testing.T, newStore NewStore) {
	t.Run("Trace", func(t *testing.T) { HoldTrace(t, newStore, 1500) })
	t.Run("Lifetime", func(t *testing.T) { HoldLifetime(t, newStore) })
	t.Run("Errors", func(t *testing.T) { HoldErrors(t, sluice.New(newStore(t, nil))) })
	t.Run("Goroutines", func(t *testing.T) { HoldGoroutines(t, sluice.New(newStore(t, nil)), 16, 200) })
	t.Run("Composite", func(t *testing.T) { HoldComposite(t, newStore, 1000) })
	t.Run("CompositeApart", func(t *testing.T) { HoldCompositeApart(t, newStore, 1000) })
	t.Run("Classes", func(t *testing.T) { HoldClasses(t, sluice.New(newStore(t, nil))) })
}

// HoldClasses checks headroom: under a limit of 5 with 2 kept for
// critical requests, normal ones hold at most 3 and critical ones the rest,
// whichever class came first.
func HoldClasses(t *testing.T, lim *sluice.Limiter) {
	ctx := context.Background()
	critical := sluice.MaxConcurrent(5).WithLifetime(time.Hour)
	normal := critical.WithHeadroom(2)
	grant := func(c sluice.Concurrency, n int) int {
		got := 0
		for range n {
			ls, err := lim.Acquire(ctx, "classes", c, 1)
			if err != nil {
				t.Fatal(err)
			}
			if ls.Allowed {
				got++
			}
		}
		return got
	}
	if n := grant(critical, 1); n != 1 {
		t.Fatalf("critical first: %d granted", n)
	}
	if n := grant(normal, 4); n != 2 {
		t.Fatalf("normal with 1 critical held: %d of 4 granted, want 2 (3 in all for its class)", n)
	}
	if n := grant(critical, 4); n != 2 {
		t.Fatalf("critical with 3 held: %d of 4 granted, want the 2 reserved", n)
	}
}

// HoldComposite checks a random trace of n composites of a hold and rate
// parts (Limiter.Acquire with parts), half of the parts with a random
// headroom, among releases, against the model (model.AcquireEach): every
// summary equals the fold of the model's parts,
// and the hold is held exactly when the model holds it. The keys share a
// {hash tag}, so that a cluster decides each composite in one script.
func HoldComposite(t *testing.T, newStore NewStore, n int) {
	rates := []sluice.Limit{
		sluice.PerSecond(20).WithBurst(3),
		sluice.PerSecond(5).WithAlgorithm(sluice.FixedWindow),
		sluice.PerSecond(8).WithAlgorithm(sluice.SlidingLog),
		sluice.PerSecond(10).WithBurst(2).WithAlgorithm(sluice.GCRA),
		sluice.PerSecond(4).WithAlgorithm(sluice.SlidingWindow),
	}
	holdComposite(t, newStore, n, "{u}", rates)
}

// HoldCompositeApart is HoldComposite with keys in different cluster
// slots (no {hash tag}), so that a cluster takes the hold and the parts in
// turn and gives back what was taken when one refuses (redisstore's
// holdInTurn), under the limits whose give-back restores the state exactly
// (token-bucket, gcra, aligned-window: a fixed window's refund keeps the
// window its take opened, and the sliding ones give nothing back), one
// limit a key (a take under a changed limit converts the key's state in
// its own terms, and a give-back leaves it converted). Every
// admission equals the model's, and so does every refusal but for its
// RetryAfter, which is the first refusing part's only (at most the
// model's, which folds every part's): the parts after it are not reached.
// Each decision also leaves the state the model's, which the next ones
// check.
func HoldCompositeApart(t *testing.T, newStore NewStore, n int) {
	rates := []sluice.Limit{
		sluice.PerSecond(20).WithBurst(3),
		sluice.PerSecond(5).WithAlgorithm(sluice.AlignedWindow),
		sluice.PerSecond(10).WithBurst(2).WithAlgorithm(sluice.GCRA),
	}
	holdComposite(t, newStore, n, "", rates)
}

// holdComposite is HoldComposite with every key prefixed by tag, over
// part limits drawn from rates; without a tag a refusal's RetryAfter may
// be below the model's (HoldCompositeApart).
func holdComposite(t *testing.T, newStore NewStore, n int, tag string, rates []sluice.Limit) {
	seed := testenv.Seed(t)
	r := rand.New(rand.NewPCG(seed, 27))
	clock := new(setClock)
	lim := sluice.New(newStore(t, clock))
	ls := model.NewHolds()
	ks := model.NewKeys()
	ctx := context.Background()
	job := tag + "job"
	partKeys := []string{tag + "rate", tag + "global", job} // job also names the hold: two states
	var held []sluice.Lease
	now := Base
	for i := range n {
		now += r.Int64N(60_000)
		clock.us.Store(now)
		if len(held) > 0 && r.IntN(3) == 0 {
			j := r.IntN(len(held))
			got, err := lim.Release(ctx, held[j])
			want := resultOf(ls.Release(job, held[j].Limit.Limit, now, held[j].ID))
			if err != nil || got != want {
				t.Fatalf("seed %d op %d: release %+v %v, model %+v", seed, i, got, err, want)
			}
			held = slices.Delete(held, j, j+1)
			continue
		}
		c := sluice.MaxConcurrent(1 + r.Int64N(3)).WithLifetime(time.Duration(50+r.Int64N(300)) * time.Millisecond)
		units := r.Int64N(c.Limit + 1)
		var parts []sluice.Part
		var models []*model.Model
		var keys []string
		var costs, reserves []int64
		for _, k := range r.Perm(len(partKeys))[:r.IntN(len(partKeys)+1)] {
			l := rates[r.IntN(len(rates))]
			if tag == "" {
				l = rates[k] // one limit a key: a take under another converts the state, which no give-back undoes
			}
			p, _ := storelink.Params(l)
			cost := r.Int64N(p.Capacity() + 1)
			reserve := randomReserve(r, p.Capacity()-cost)
			parts = append(parts, sluice.Part{Key: partKeys[k], Limit: l, Cost: cost, Headroom: reserve})
			models = append(models, ks.Model(ModelLimit(p)))
			keys, costs, reserves = append(keys, partKeys[k]), append(costs, cost), append(reserves, reserve)
		}
		got, err := lim.Acquire(ctx, job, c, units, parts...)
		if err != nil {
			t.Fatalf("seed %d op %d: %v", seed, i, err)
		}
		id := got.ID
		if id == 0 {
			id = -int64(i) - 1
		}
		each := make([]algo.Decision, len(parts))
		hold := model.AcquireEach(ls, job, c.Limit, c.Lifetime.Microseconds(), units, id, models, keys, costs, reserves, now, each)
		want := resultOf(model.Fold(hold, each))
		if tag == "" && !want.Allowed && got.RetryAfter > 0 && got.RetryAfter <= want.RetryAfter {
			want.RetryAfter = got.RetryAfter // the first refusing part's (HoldCompositeApart)
		}
		if got.Result != want || (got.ID != 0) != (want.Allowed && units > 0) {
			t.Fatalf("seed %d op %d (hold %d of %d, parts %+v at +%dµs): %+v id %d, model %+v (hold %+v, parts %+v)",
				seed, i, units, c.Limit, parts, now-Base, got.Result, got.ID, want, hold, each)
		}
		if got.ID != 0 {
			held = append(held, got)
		}
	}
	t.Logf("%d composites with a hold equal to the model (seed %d)", n, seed)
}

// HoldTrace checks a random trace of n acquires, releases and extensions
// on a few keys, under limits and lifetimes that change, through a Limiter
// over a store that decides by a clock the trace sets: every answer equals
// the model's (model.Holds), and every hold granted comes back at its
// Expiry.
func HoldTrace(t *testing.T, newStore NewStore, n int) {
	seed := testenv.Seed(t)
	r := rand.New(rand.NewPCG(seed, 25))
	clock := new(setClock)
	lim := sluice.New(newStore(t, clock))
	m := model.NewHolds()
	ctx := context.Background()
	keys := []string{"a", "b", "{a}c"}
	var granted []sluice.Lease
	now := Base
	for i := range n {
		now += r.Int64N(40_000)
		clock.us.Store(now)
		key := keys[r.IntN(len(keys))]
		c := sluice.MaxConcurrent(1 + r.Int64N(5)).WithLifetime(time.Duration(1+r.Int64N(100)) * time.Millisecond)
		var got sluice.Result
		var want sluice.Result
		var expiry, wantExpiry int64
		switch k := r.IntN(10); {
		case k < 5 || len(granted) == 0:
			units := r.Int64N(c.Limit + 1)
			ls, err := lim.Acquire(ctx, key, c, units)
			if err != nil {
				t.Fatalf("seed %d op %d: acquire: %v", seed, i, err)
			}
			id := ls.ID
			if id == 0 {
				id = -int64(i) - 1 // refused or a query: the model holds nothing under it
			}
			want = resultOf(m.Acquire(key, c.Limit, c.Lifetime.Microseconds(), now, units, id))
			got, expiry = ls.Result, ls.Expiry
			if ls.ID != 0 {
				granted = append(granted, ls)
				wantExpiry = now + c.Lifetime.Microseconds()
			}
		case k < 8:
			ls := granted[r.IntN(len(granted))]
			res, err := lim.Release(ctx, ls)
			if err != nil {
				t.Fatalf("seed %d op %d: release: %v", seed, i, err)
			}
			got, want = res, resultOf(m.Release(ls.Key, ls.Limit.Limit, now, ls.ID))
		default:
			j := r.IntN(len(granted))
			ls, err := lim.Extend(ctx, granted[j], c.Lifetime)
			if err != nil {
				t.Fatalf("seed %d op %d: extend: %v", seed, i, err)
			}
			want = resultOf(m.Extend(granted[j].Key, granted[j].Limit.Limit, c.Lifetime.Microseconds(), now, granted[j].ID))
			got, expiry = ls.Result, ls.Expiry
			if ls.Allowed {
				wantExpiry = now + c.Lifetime.Microseconds()
			}
		}
		if got != want || expiry != wantExpiry {
			t.Fatalf("seed %d op %d on %q at +%dµs: %+v expiry %d, model %+v expiry %d", seed, i, key, now-Base, got, expiry, want, wantExpiry)
		}
	}
	t.Logf("%d hold operations equal to the model (seed %d)", n, seed)
}

// HoldLifetime checks that the holds of a holder that never releases
// come back at the end of their lifetime, not a microsecond before, and
// that an extension moves that end.
func HoldLifetime(t *testing.T, newStore NewStore) {
	clock := new(setClock)
	clock.us.Store(Base)
	lim := sluice.New(newStore(t, clock))
	ctx := context.Background()
	c := sluice.MaxConcurrent(3).WithLifetime(time.Second)
	var held []sluice.Lease
	for range 3 {
		ls, err := lim.Acquire(ctx, "job", c, 1)
		if err != nil || !ls.Allowed || ls.Expiry != Base+1_000_000 {
			t.Fatalf("acquire: %+v %v", ls, err)
		}
		held = append(held, ls)
	}
	clock.us.Store(Base + 500_000)
	ext, err := lim.Extend(ctx, held[0], 0)
	if err != nil || !ext.Allowed || ext.Expiry != Base+1_500_000 {
		t.Fatalf("extend: %+v %v, want held until +1.5s", ext, err)
	}
	clock.us.Store(Base + 999_999)
	ls, err := lim.Acquire(ctx, "job", c, 1)
	if err != nil || ls.Allowed || ls.RetryAfter != time.Microsecond {
		t.Fatalf("1µs before two holds end: %+v %v, want refused, retry after 1µs", ls, err)
	}
	clock.us.Store(Base + 1_000_000)
	ls, err = lim.Acquire(ctx, "job", c, 2)
	if err != nil || !ls.Allowed || ls.Remaining != 0 {
		t.Fatalf("when they end: %+v %v, want both slots back", ls, err)
	}
	if r, err := lim.Release(ctx, held[1]); err != nil || r.Allowed {
		t.Fatalf("release of a hold that came back: %+v %v, want not held", r, err)
	}
	if e, err := lim.Extend(ctx, held[2], 0); err != nil || e.Allowed || e.ID != 0 {
		t.Fatalf("extend of a hold that came back: %+v %v, want not held", e, err)
	}
	if r, err := lim.Release(ctx, ext); err != nil || !r.Allowed || r.Remaining != 1 {
		t.Fatalf("release of the extended hold: %+v %v, want held, 1 free after", r, err)
	}
}

// HoldErrors checks the errors of bad hold operations: none holds or
// changes anything.
func HoldErrors(t *testing.T, lim *sluice.Limiter) {
	ctx := context.Background()
	for _, tc := range []struct {
		key   string
		c     sluice.Concurrency
		units int64
		want  error
	}{
		{"", sluice.MaxConcurrent(1), 1, sluice.ErrEmptyKey},
		{"k", sluice.MaxConcurrent(0), 1, sluice.ErrInvalidLimit},
		{"k", sluice.MaxConcurrent(2).WithLifetime(-time.Second), 1, sluice.ErrInvalidLimit},
		{"k", sluice.MaxConcurrent(2).WithLifetime(time.Nanosecond), 1, sluice.ErrInvalidLimit},
		{"k", sluice.MaxConcurrent(2), 3, sluice.ErrCostExceedsCapacity},
		{"k", sluice.MaxConcurrent(2), -1, sluice.ErrInvalidCost},
	} {
		if _, err := lim.Acquire(ctx, tc.key, tc.c, tc.units); !errors.Is(err, tc.want) {
			t.Errorf("Acquire(%q, %+v, %d): %v, want %v", tc.key, tc.c, tc.units, err, tc.want)
		}
	}
	if ls, err := lim.Acquire(ctx, "k", sluice.MaxConcurrent(2), 0); err != nil || !ls.Allowed || ls.Remaining != 2 {
		t.Errorf("a query after the errors: %+v %v, want 2 free", ls, err)
	}
	if _, err := lim.Release(ctx, sluice.Lease{ID: 5, Limit: sluice.MaxConcurrent(1)}); !errors.Is(err, sluice.ErrEmptyKey) {
		t.Errorf("release with no key: %v", err)
	}
}

// HoldGoroutines has g goroutines acquire a slot of a limit of 3, count
// themselves in flight outside the limiter, and release, n times each: the
// count never passes 3.
func HoldGoroutines(t *testing.T, lim *sluice.Limiter, g, n int) {
	ctx := context.Background()
	c := sluice.MaxConcurrent(3).WithLifetime(time.Hour)
	var inFlight, most, passed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, g)
	for range g {
		wg.Go(func() {
			for range n {
				ls, err := lim.Acquire(ctx, "conc", c, 1)
				if err != nil {
					errs <- err
					return
				}
				if !ls.Allowed {
					continue
				}
				v := inFlight.Add(1)
				for m := most.Load(); v > m && !most.CompareAndSwap(m, v); m = most.Load() {
				}
				passed.Add(1)
				inFlight.Add(-1)
				if r, err := lim.Release(ctx, ls); err != nil || !r.Allowed {
					errs <- errors.Join(err, errors.New("a hold kept for an hour was not held at its release"))
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if most.Load() > 3 || passed.Load() == 0 {
		t.Fatalf("at most %d in flight (limit 3), %d passed", most.Load(), passed.Load())
	}
	if ls, err := lim.Acquire(ctx, "conc", c, 3); err != nil || !ls.Allowed {
		t.Fatalf("after every release, the whole limit: %+v %v", ls, err)
	}
	t.Logf("%d passed, at most %d in flight", passed.Load(), most.Load())
}
