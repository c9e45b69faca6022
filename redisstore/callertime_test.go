package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/redisstore"
)

// TestInvalidCallerTime: a caller's clock (WithClock) outside the range
// a step accepts is an error wrapping sluice.ErrInvalidTime on every path,
// whatever the failure policy: never a decision at the server's time (a
// negative time is the scripts' "use TIME"), never Allowed, never Degraded.
func TestInvalidCallerTime(t *testing.T) {
	client := redistest.Shared(t).Client()
	ctx := context.Background()
	tb := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: 1_000_000, Burst: 5}
	for _, now := range []int64{-1, -5_000_000, algo.MaxTime + 1} {
		for _, policy := range []redisstore.FailurePolicy{redisstore.FailClosed, redisstore.FailOpen, redisstore.FailLocal} {
			name := fmt.Sprintf("now=%d/policy=%d", now, policy)
			st := newGoRedis(t, client,
				redisstore.WithPrefix(fmt.Sprintf("callertime:%d:", time.Now().UnixNano())),
				redisstore.WithFailurePolicy(policy),
				redisstore.WithClock(storelink.MicroClock(func() int64 { return now })))
			req := storelink.Request{Key: "k", Params: tb, Cost: 1, MaxDelay: algo.Never}
			check := func(op string, r sluice.Result, err error) {
				t.Helper()
				if !errors.Is(err, sluice.ErrInvalidTime) || r != (sluice.Result{}) {
					t.Errorf("%s %s: %+v, %v; want the zero Result and ErrInvalidTime", name, op, r, err)
				}
			}
			r, err := take(ctx, st, req)
			check("Take", r, err)
			r, err = takeAll(ctx, st, []storelink.Request{req, {Key: "j", Params: tb, Cost: 1, MaxDelay: algo.Never}})
			check("TakeAll", r, err)
			r, err = refund(ctx, st, req)
			check("Refund", r, err)
			r, err = sluice.New(st).Take(ctx, "k", sluice.PerSecond(5), 1)
			check("Limiter.Take", r, err)
			if n, err := client.Exists(ctx, redisstore.RateKey(st, "k"), redisstore.RateKey(st, "j")).Result(); err != nil || n != 0 {
				t.Errorf("%s: %d keys written (%v), want none", name, n, err)
			}
			st.Close()
		}
	}
}
