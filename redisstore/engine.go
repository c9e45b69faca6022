package redisstore

import (
	"context"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/core"
)

// engine is the store's sealed side: what a sluice.Limiter calls, on
// requests it has checked. Its type is unexported, so its methods are in no
// user's documentation; the Limiter finds it through core.Unseal.
type engine Store

func init() { core.Seal(func(s *Store) any { return (*engine)(s) }) }

func (e *engine) Take(ctx context.Context, req core.Request) (sluice.Result, error) {
	return (*Store)(e).take(ctx, req)
}

func (e *engine) TakeAll(ctx context.Context, reqs []core.Request) (sluice.Result, error) {
	return (*Store)(e).takeAllNow(ctx, reqs)
}

func (e *engine) Refund(ctx context.Context, req core.Request) (sluice.Result, error) {
	return (*Store)(e).refundNow(ctx, req)
}

func (e *engine) Reset(ctx context.Context, key string) error { return (*Store)(e).Reset(ctx, key) }

// Clock is the clock WithClock gave, or nil: the store decides at the
// server's time, which a Limiter cannot sleep by.
func (e *engine) Clock() sluice.Clock { return e.clk }
