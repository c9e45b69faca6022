package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/internal/testsupport/storetest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/store"
)

func TestCompositeOneUserBurst(t *testing.T) {
	s := memstore.New()
	storetest.OneUserBurst(t, storetest.AllAt(s), "")
	storetest.OneUserBurstEach(t, storetest.EachAt(s), "each:")
}

func TestCompositeRandom(t *testing.T) {
	s := memstore.New()
	storetest.RandomComposites(t, storetest.AllAt(s), storetest.EachAt(s), "", 60, 200)
}

// TestSuite runs the checks every store must pass.
func TestSuite(t *testing.T) {
	storetest.Run(t, func(_ *testing.T, c store.Clock) store.Store {
		if c == nil {
			return memstore.New()
		}
		return memstore.New(memstore.WithClock(c))
	})
}

func TestTakeAllErrors(t *testing.T) {
	lim := sluice.New(memstore.New())
	ctx := context.Background()
	l := sluice.PerSecond(1)
	if _, err := lim.TakeAll(ctx, []sluice.Part{{Key: "a", Limit: l, Cost: 1}, {Key: "a", Limit: l, Cost: 1}}, nil); !errors.Is(err, sluice.ErrDuplicateKey) {
		t.Errorf("duplicate key: %v", err)
	}
	if _, err := lim.TakeAll(ctx, nil, nil); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("no parts: %v", err)
	}
	if _, err := lim.TakeAll(ctx, []sluice.Part{{Key: "a", Limit: l, Cost: 2}, {Key: "b", Limit: sluice.PerSecond(10), Cost: 2}}, nil); !errors.Is(err, sluice.ErrCostExceedsCapacity) {
		t.Errorf("cost over one part's capacity: %v", err)
	}
	if _, err := lim.TakeAll(ctx, []sluice.Part{{Key: "", Limit: l, Cost: 1}}, nil); !errors.Is(err, sluice.ErrEmptyKey) {
		t.Errorf("empty key: %v", err)
	}
}

// TestLimiterPathsAgree: the Limiter's path (its checks, then Run at the
// store's clock, the ops on its stack) decides as Run does at the time it
// is given, on random composites over a few keys, errors included.
func TestLimiterPathsAgree(t *testing.T) {
	now := int64(1_764_000_000_000_000)
	lim := sluice.New(memstore.New(memstore.WithClock(storelink.MicroClock(func() int64 { return now }))))
	ref := memstore.New()
	ctx := context.Background()
	limits := []sluice.Limit{
		sluice.PerSecond(3).WithBurst(5),
		sluice.Per(7, 100*time.Millisecond).WithBurst(2).WithAlgorithm(sluice.GCRA),
		sluice.PerSecond(4).WithAlgorithm(sluice.SlidingLog),
		sluice.PerSecond(2).WithBurst(3).WithAlgorithm(sluice.LeakyBucket),
	}
	rng := rand.New(rand.NewPCG(testenv.SeedOr(t, 1), 2))
	seen := map[string]int{}
	for i := range 20000 {
		now += rng.Int64N(400_000)
		n := 1 + rng.IntN(3)
		perm := rng.Perm(5)
		parts := make([]sluice.Part, n)
		for j := range parts {
			// 3 is over the gcra limit's capacity
			parts[j] = sluice.Part{Key: fmt.Sprintf("k%d", perm[j]), Limit: limits[perm[j]%len(limits)], Cost: rng.Int64N(4)}
		}
		cost := parts[0].Cost
		single := n == 1 && rng.IntN(2) == 0
		reqs, err := checked(parts, single)
		var got, want sluice.Result
		var gotErr, wantErr error
		if single {
			got, gotErr = lim.Take(ctx, parts[0].Key, parts[0].Limit, cost)
			if err == nil {
				d, e := storetest.TakeAt(ctx, ref, reqs[0], now)
				want, wantErr = sluice.Result(storelink.ResultOf(&d)), e
			}
		} else {
			got, gotErr = lim.TakeAll(ctx, parts, nil)
			if err == nil {
				d, e := storetest.AllAt(ref)(ctx, reqs, now)
				want, wantErr = sluice.Result(storelink.ResultOf(&d)), e
			}
		}
		if err != nil {
			wantErr = err
		}
		switch {
		case gotErr != nil:
			seen["error"]++
		case got.Allowed:
			seen["allowed"]++
		default:
			seen["denied"]++
		}
		if got != want || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Fatalf("step %d: %v cost %d: Limiter %+v, %v; store %+v, %v", i, parts, cost, got, gotErr, want, wantErr)
		}
	}
	if seen["allowed"] < 1000 || seen["denied"] < 1000 || seen["error"] < 100 {
		t.Errorf("a trace that tests little: %v", seen)
	}
}

// checked checks parts as a Limiter does, a part's error naming its part
// unless single (a Take), and returns them as requests.
func checked(parts []sluice.Part, single bool) ([]storelink.Request, error) {
	reqs := make([]storelink.Request, len(parts))
	for j, pt := range parts {
		p, err := storelink.Params(pt.Limit)
		if err == nil {
			err = storelink.Check(pt.Key, &p, pt.Cost)
		}
		if err != nil && single {
			return nil, err
		} else if err != nil {
			return nil, storelink.PartError(j, pt.Key, err)
		}
		reqs[j] = storelink.Request{Key: pt.Key, Params: p, Cost: pt.Cost, MaxDelay: algo.Never}
	}
	return reqs, nil
}

// TestZeroAllocs: a decision on a key that exists, alone or in a composite
// of up to 4 parts, allocates nothing.
func TestZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	lim := sluice.New(memstore.New())
	ctx := context.Background()
	l := sluice.PerSecond(1_000_000).WithBurst(1000)
	parts := []sluice.Part{{Key: "chat:1", Limit: l, Cost: 1}, {Key: "global", Limit: l.WithBurst(30), Cost: 1}, {Key: "c", Limit: l, Cost: 1}, {Key: "d", Limit: l, Cost: 1}}
	refused := []sluice.Part{{Key: "e", Limit: l, Cost: 1}, {Key: "f", Limit: sluice.PerHour(1), Cost: 1}}
	for name, f := range map[string]func(){
		"Take":         func() { lim.Take(ctx, "user:1", l, 1) },
		"TakeAll of 2": func() { lim.TakeAll(ctx, parts[:2], nil) },
		"TakeAll of 4": func() { lim.TakeAll(ctx, parts, nil) },
		"TakeAll of 2, each": func() {
			var each [4]sluice.Result // on the stack: TakeAll keeps it there
			lim.TakeAll(ctx, parts[:2], each[:2])
		},
		"TakeAll of 4, each": func() {
			var each [4]sluice.Result
			lim.TakeAll(ctx, parts, each[:])
		},
		"TakeAll refused, each": func() {
			var each [2]sluice.Result
			lim.TakeAll(ctx, refused, each[:])
		},
	} {
		f()
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s: %v allocations per decision, want 0", name, n)
		}
	}
	// Whichever slots of the Limiter's memory of valid limits the parts'
	// limits fall in (some of these pairs share one), nothing is allocated.
	for n := int64(2); n < 40; n++ {
		lim := sluice.New(memstore.New())
		parts := []sluice.Part{{Key: "a", Limit: sluice.PerSecond(1_000_000), Cost: 1}, {Key: "b", Limit: sluice.PerSecond(1_000_000 + n), Cost: 1}}
		if a := testing.AllocsPerRun(100, func() { lim.TakeAll(ctx, parts, nil) }); a != 0 {
			t.Errorf("TakeAll of limits %v and %v: %v allocations per decision, want 0", parts[0].Limit, parts[1].Limit, a)
		}
	}
}
