package sluice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/internal/testsupport/storetest"
	"github.com/sluice-go/sluice/memstore"
	storeapi "github.com/sluice-go/sluice/store"
)

// A clock outside the range a step accepts (before the epoch, after 2^52 µs)
// is an error on every path of the Limiter, and an error result is never
// Allowed: the Result is zero and the error wraps ErrInvalidTime.
func TestInvalidTimeIsNeverAllowed(t *testing.T) {
	for _, now := range []int64{-1, algo.MaxTime + 1, -1 << 62} {
		store := memstore.New(memstore.WithClock(storelink.MicroClock(func() int64 { return now })))
		// The Limiter's own clock keeps Wait's deadlines sane while the
		// store's is broken.
		lim := sluice.New(store, sluice.WithClock(newFakeClock()))
		ctx := context.Background()
		for _, l := range []sluice.Limit{
			sluice.PerSecond(10),
			sluice.PerSecond(10).WithAlgorithm(sluice.GCRA),
			sluice.PerSecond(10).WithBurst(3).WithAlgorithm(sluice.LeakyBucket),
			sluice.PerSecond(10).WithAlgorithm(sluice.FixedWindow),
			sluice.PerSecond(10).WithAlgorithm(sluice.SlidingWindow),
			sluice.PerSecond(10).WithAlgorithm(sluice.SlidingLog),
		} {
			check := func(op string, r sluice.Result, err error) {
				t.Helper()
				if !errors.Is(err, sluice.ErrInvalidTime) {
					t.Errorf("now %d, %s, %s: error %v, want ErrInvalidTime", now, l.Algorithm, op, err)
				}
				if r != (sluice.Result{}) {
					t.Errorf("now %d, %s, %s: result %+v with an error, want the zero Result", now, l.Algorithm, op, r)
				}
			}
			for _, cost := range []int64{0, 1} {
				r, err := lim.Take(ctx, "k", l, cost)
				check("Take", r, err)
				r, err = lim.Wait(ctx, "k", l, cost)
				check("Wait", r, err)
				p, _ := storelink.Params(l)
				op := storetest.RunAt(ctx, store, 0, storetest.TakeOp(storelink.Request{Key: "k", Params: p, Cost: cost, MaxDelay: algo.Never}))
				if !errors.Is(op.Err, sluice.ErrInvalidTime) || op.Decision != (storeapi.Decision{}) {
					t.Errorf("now %d, %s, Store.Run: %+v %v, want no decision and ErrInvalidTime", now, l.Algorithm, op.Decision, op.Err)
				}
			}
			ok, err := lim.Allow(ctx, "k", l)
			if ok || !errors.Is(err, sluice.ErrInvalidTime) {
				t.Errorf("now %d, %s: Allow = %v, %v", now, l.Algorithm, ok, err)
			}
			parts := []sluice.Part{{Key: "a", Limit: l, Cost: 1}, {Key: "b", Limit: sluice.PerMinute(5), Cost: 1}}
			r, err := takeAll(lim, ctx, parts)
			check("TakeAll", r, err)
			r, err = waitAll(lim, ctx, parts)
			check("WaitAll", r, err)
			if l.Algorithm == sluice.TokenBucket || l.Algorithm == sluice.GCRA {
				r, err = lim.Refund(ctx, "k", l, 1, sluice.Result{})
				check("Refund", r, err)
			}
		}
		if n := store.Len(); n != 0 {
			t.Errorf("now %d: the store holds %d keys after calls that all failed", now, n)
		}
	}
}

// takeAll and waitAll make the composite calls in one place.
func takeAll(lim *sluice.Limiter, ctx context.Context, parts []sluice.Part) (sluice.Result, error) {
	return lim.TakeAll(ctx, parts, nil)
}

func waitAll(lim *sluice.Limiter, ctx context.Context, parts []sluice.Part) (sluice.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	return lim.WaitAll(ctx, parts, nil)
}
