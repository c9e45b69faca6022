package sluice_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/redisstore"
	"github.com/sluice-go/sluice/store"
)

// TestTakeAllEachErrors: a TakeAll asked for each part's result that
// cannot decide returns an error wrapping its sentinel, spends nothing and
// zeroes each, whichever path it takes (memstore's, called directly, its
// parts pooled up to 4 and made beyond; a store from outside the module,
// through the interface; no store).
func TestTakeAllEachErrors(t *testing.T) {
	ctx := context.Background()
	l := sluice.PerMinute(5)
	five := []sluice.Part{{Key: "a", Limit: l, Cost: 1}, {Key: "b", Limit: l, Cost: 1}, {Key: "c", Limit: l, Cost: 1}, {Key: "d", Limit: l, Cost: 1}, {Key: "e", Limit: l, Cost: 1}}
	for name, lim := range map[string]*sluice.Limiter{
		"memstore": sluice.New(memstore.New()),
		"outside":  sluice.New(newMapStore(newFakeClock())),
	} {
		for _, c := range []struct {
			what  string
			parts []sluice.Part
			n     int
			want  error
		}{
			{"one Result short", five[:2], 1, sluice.ErrInvalidLimit},
			{"one Result over", five[:2], 3, sluice.ErrInvalidLimit},
			{"no part", nil, 0, sluice.ErrInvalidLimit},
			{"a key twice", []sluice.Part{five[0], five[0]}, 2, sluice.ErrDuplicateKey},
			{"a key twice, 5 parts", append(five[:4:4], five[0]), 5, sluice.ErrDuplicateKey},
			{"cost over capacity", []sluice.Part{five[0], {Key: "x", Limit: l, Cost: 6}}, 2, sluice.ErrCostExceedsCapacity},
			{"cost over capacity, 5 parts", append(five[:4:4], sluice.Part{Key: "x", Limit: l, Cost: 6}), 5, sluice.ErrCostExceedsCapacity},
			{"empty key", []sluice.Part{{Limit: l, Cost: 1}}, 1, sluice.ErrEmptyKey},
		} {
			each := make([]sluice.Result, c.n)
			for i := range each {
				each[i] = sluice.Result{Allowed: true, Remaining: 7}
			}
			r, err := lim.TakeAll(ctx, c.parts, each)
			if !errors.Is(err, c.want) || r != (sluice.Result{}) {
				t.Errorf("%s, %s: %+v, %v; want an error wrapping %v", name, c.what, r, err, c.want)
			}
			if c.n == len(c.parts) {
				for i := range each {
					if each[i] != (sluice.Result{}) {
						t.Errorf("%s, %s: each[%d] = %+v after an error, want it zeroed", name, c.what, i, each[i])
					}
				}
			}
		}
		// Nothing was spent.
		each := make([]sluice.Result, 5)
		if r, err := lim.TakeAll(ctx, five, each); err != nil || !r.Allowed || r.Remaining != 4 || each[4].Remaining != 4 {
			t.Errorf("%s: after the errors: %+v, %+v, %v", name, r, each, err)
		}
	}
	_, err := sluice.New(nil).TakeAll(ctx, five[:1], make([]sluice.Result, 1))
	if !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Errorf("over no store: %v", err)
	}
}

// TestPaths: a Limiter calls memstore's Run directly, and every other
// store through the interface: redisstore's, one from outside, and a type
// that embeds memstore's, whose Run may do more than the store's.
func TestPaths(t *testing.T) {
	rs, err := redisstore.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	for name, c := range map[string]struct {
		s      store.Store
		direct bool
	}{
		"memstore":   {memstore.New(), true},
		"redisstore": {rs, false},
		"outside":    {newMapStore(newFakeClock()), false},
		"embedding":  {struct{ *memstore.Store }{memstore.New()}, false},
		"nil":        {nil, false},
	} {
		if direct := sluice.Paths(sluice.New(c.s)); direct != c.direct {
			t.Errorf("%s: memstore's direct path %v, want %v", name, direct, c.direct)
		}
	}
	// A nil *memstore.Store is no store, as nil is.
	if _, err := sluice.New((*memstore.Store)(nil)).Take(context.Background(), "k", sluice.PerSecond(1), 1); !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Errorf("over a nil *memstore.Store: %v, want ErrStoreUnavailable", err)
	}
}
