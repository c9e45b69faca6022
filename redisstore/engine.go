package redisstore

import (
	"context"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/internal/core"
)

// engine is the store's sealed side: what a sluice.Limiter calls, on
// requests it has checked, and what the module's replays and tests call to
// decide at a given time (storeapi.RedisAt). Its type is unexported, so its methods are in no
// user's documentation; the Limiter finds it through core.Unseal.
type engine Store

func init() { core.Seal(func(s *Store) any { return (*engine)(s) }) }

func (e *engine) Take(ctx context.Context, req core.Request) (sluice.Result, error) {
	return (*Store)(e).take(ctx, req)
}

func (e *engine) TakeAll(ctx context.Context, reqs []core.Request) (sluice.Result, error) {
	return (*Store)(e).takeAllNow(ctx, reqs)
}

func (e *engine) TakeEach(ctx context.Context, reqs []core.Request, each []sluice.Result) (sluice.Result, error) {
	return (*Store)(e).takeEachNow(ctx, reqs, each)
}

func (e *engine) Refund(ctx context.Context, req core.Request, window int64) (sluice.Result, error) {
	return (*Store)(e).refundNow(ctx, req, window)
}

func (e *engine) Reset(ctx context.Context, key string) error { return (*Store)(e).Reset(ctx, key) }

// Clock is the clock WithClock gave, or nil: the store decides at the
// server's time, which a Limiter cannot sleep by.
func (e *engine) Clock() sluice.Clock { return e.clk }

// TakeAt makes one decision for req, which must be checked, at time now (µs
// since the epoch), and applies no failure policy.
func (e *engine) TakeAt(ctx context.Context, req core.Request, now int64) (algo.Decision, error) {
	if err := algo.CheckTime(now); err != nil {
		return algo.Decision{}, err // wraps sluice.ErrInvalidTime; a negative now would read as TIME
	}
	return (*Store)(e).decide(ctx, req, now)
}

// TakeAllAt is TakeAt for a composite.
func (e *engine) TakeAllAt(ctx context.Context, reqs []core.Request, now int64) (algo.Decision, error) {
	if err := algo.CheckTime(now); err != nil {
		return algo.Decision{}, err // wraps sluice.ErrInvalidTime
	}
	return (*Store)(e).takeAll(ctx, reqs, now, nil)
}

// TakeEachAt is TakeAllAt that also writes each part's decision into
// each[i] (each as long as reqs).
func (e *engine) TakeEachAt(ctx context.Context, reqs []core.Request, now int64, each []algo.Decision) (algo.Decision, error) {
	if err := algo.CheckTime(now); err != nil {
		return algo.Decision{}, err // wraps sluice.ErrInvalidTime
	}
	return (*Store)(e).takeAll(ctx, reqs, now, each)
}
