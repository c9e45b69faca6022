package redisstore

import (
	"context"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
)

// engine is the store's side of the link to a sluice.Limiter: what the
// Limiter calls, on requests it has checked, and what the module's replays
// and tests call to decide at a given time.
type engine Store

var (
	_ storelink.Engine = (*engine)(nil)
	_ storelink.Linked = (*Store)(nil)
)

// Engine returns the store's engine: the path by which a sluice.Limiter
// (and this module's tools) reach the store, on requests already checked.
// It is for this module: its type is internal, and its methods may change
// in any release.
func (s *Store) Engine() storelink.Engine {
	if s == nil {
		return nil
	}
	return (*engine)(s)
}

// Store returns the store.
func (e *engine) Store() any { return (*Store)(e) }

func (e *engine) Take(ctx context.Context, req storelink.Request) (storelink.Result, error) {
	return (*Store)(e).take(ctx, req)
}

func (e *engine) TakeAll(ctx context.Context, reqs []storelink.Request) (storelink.Result, error) {
	return (*Store)(e).takeAllNow(ctx, reqs)
}

func (e *engine) TakeEach(ctx context.Context, reqs []storelink.Request, each []storelink.Result) (storelink.Result, error) {
	return (*Store)(e).takeEachNow(ctx, reqs, each)
}

func (e *engine) Refund(ctx context.Context, req storelink.Request, window int64) (storelink.Result, error) {
	return (*Store)(e).refundNow(ctx, req, window)
}

func (e *engine) Reset(ctx context.Context, key string) error { return (*Store)(e).Reset(ctx, key) }

// Clock is the clock WithClock gave, or nil: the store decides at the
// server's time, which a Limiter cannot sleep by.
func (e *engine) Clock() storelink.Clock {
	if e.clk == nil {
		return nil // not a non-nil interface holding a nil one
	}
	return e.clk
}

// TakeAt makes one decision for req at time now (µs since the epoch), and
// applies no failure policy.
func (e *engine) TakeAt(ctx context.Context, req storelink.Request, now int64) (algo.Decision, error) {
	if err := algo.CheckTime(now); err != nil {
		return algo.Decision{}, err // wraps sluice.ErrInvalidTime; a negative now would read as TIME
	}
	return (*Store)(e).decide(ctx, req, now)
}

// TakeAllAt is TakeAt for a composite.
func (e *engine) TakeAllAt(ctx context.Context, reqs []storelink.Request, now int64) (algo.Decision, error) {
	if err := algo.CheckTime(now); err != nil {
		return algo.Decision{}, err // wraps sluice.ErrInvalidTime
	}
	return (*Store)(e).takeAll(ctx, reqs, now, nil)
}

// TakeEachAt is TakeAllAt that also writes each part's decision into
// each[i] (each as long as reqs).
func (e *engine) TakeEachAt(ctx context.Context, reqs []storelink.Request, now int64, each []algo.Decision) (algo.Decision, error) {
	if err := algo.CheckTime(now); err != nil {
		return algo.Decision{}, err // wraps sluice.ErrInvalidTime
	}
	return (*Store)(e).takeAll(ctx, reqs, now, each)
}
