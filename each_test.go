package sluice_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/redisstore"
)

// TestTakeEachErrors: a TakeEach that cannot decide returns an error
// wrapping its sentinel, spends nothing and zeroes each, whichever path it
// takes (memstore's local engine up to 4 parts, its engine beyond, a Store
// from outside the module, no store).
func TestTakeEachErrors(t *testing.T) {
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
			r, err := lim.TakeEach(ctx, c.parts, each)
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
		if r, err := lim.TakeEach(ctx, five, each); err != nil || !r.Allowed || r.Remaining != 4 || each[4].Remaining != 4 {
			t.Errorf("%s: after the errors: %+v, %+v, %v", name, r, each, err)
		}
	}
	_, err := sluice.New(nil).TakeEach(ctx, five[:1], make([]sluice.Result, 1))
	if !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Errorf("over no store: %v", err)
	}
}

// TestLinkedPaths: the stores of this module meet the Limiter's link in
// full (their engine, and memstore's local path), and a type that embeds
// one, whose methods may do more than the store's, is a Store from outside.
func TestLinkedPaths(t *testing.T) {
	rs, err := redisstore.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	for name, c := range map[string]struct {
		s             sluice.Store
		linked, local bool
	}{
		"memstore":   {memstore.New(), true, true},
		"redisstore": {rs, true, false},
		"outside":    {newMapStore(newFakeClock()), false, false},
		"embedding":  {struct{ *memstore.Store }{memstore.New()}, false, false},
		"nil":        {(*memstore.Store)(nil), false, false},
	} {
		if linked, local := sluice.Paths(sluice.New(c.s)); linked != c.linked || local != c.local {
			t.Errorf("%s: linked %v, local %v; want %v, %v", name, linked, local, c.linked, c.local)
		}
	}
}
