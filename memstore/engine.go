package memstore

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
	_ storelink.Local  = (*engine)(nil)
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

func (e *engine) store() *Store { return (*Store)(e) }

// Store returns the store.
func (e *engine) Store() any { return e.store() }

// Take makes one decision for req at the store's clock time.
func (e *engine) Take(_ context.Context, req storelink.Request) (storelink.Result, error) {
	var d algo.Decision
	s := e.store()
	err := s.decide(req.Key, &req.Params, req.Cost, req.MaxDelay, s.now(), &d)
	return storelink.ResultOf(&d), err
}

// TakeLocal is Take for the Limiter's hot path. On an error every figure is
// 0 but retryAfter, which is algo.Never: read as "allowed is retryAfter ==
// 0", an error is never allowed.
func (e *engine) TakeLocal(key string, p algo.Params, cost int64) (remaining, retryAfter, resetAfter, delay, window int64, err error) {
	var d algo.Decision
	s := e.store()
	if err = s.decideNow(key, &p, cost, algo.Never, &d); err != nil {
		return 0, algo.Never, 0, 0, 0, err
	}
	return d.Remaining, d.RetryAfter, d.ResetAfter, d.Delay, d.Window, nil
}

// TakeAll makes one decision for a composite at the store's clock time.
func (e *engine) TakeAll(_ context.Context, reqs []storelink.Request) (storelink.Result, error) {
	var d algo.Decision
	s := e.store()
	err := s.takeAll(reqs, s.now(), &d, nil)
	return storelink.ResultOf(&d), err
}

// TakeAllLocal is TakeAll for the Limiter's hot path, on the composite
// reqs[:n], which reaches it by value: composites of up to 4 parts allocate
// nothing.
func (e *engine) TakeAllLocal(reqs [storelink.MaxLocalParts]storelink.Request, n int) (storelink.Result, error) {
	var d algo.Decision
	s := e.store()
	err := s.takeAll(reqs[:n], s.now(), &d, nil)
	return storelink.ResultOf(&d), err
}

// TakeEach is TakeAll that also writes each part's result into each[i]
// (each as long as reqs).
func (e *engine) TakeEach(_ context.Context, reqs []storelink.Request, each []storelink.Result) (storelink.Result, error) {
	var buf [storelink.MaxLocalParts]algo.Decision
	ds := buf[:0]
	if len(reqs) > len(buf) {
		ds = make([]algo.Decision, len(reqs))
	}
	ds = ds[:len(reqs)]
	var d algo.Decision
	s := e.store()
	if err := s.takeAll(reqs, s.now(), &d, ds); err != nil {
		return storelink.Result{}, err
	}
	for i := range ds {
		each[i] = storelink.ResultOf(&ds[i])
	}
	return storelink.ResultOf(&d), nil
}

// TakeEachLocal is TakeAllLocal that also returns each part's result
// (reqs[i]'s in each[i]): by value, since a slice the Limiter passed in
// through the interface would escape to the heap.
func (e *engine) TakeEachLocal(reqs [storelink.MaxLocalParts]storelink.Request, n int) (r storelink.Result, each [storelink.MaxLocalParts]storelink.Result, err error) {
	var d algo.Decision
	var ds [storelink.MaxLocalParts]algo.Decision
	s := e.store()
	if err = s.takeAll(reqs[:n], s.now(), &d, ds[:n]); err != nil {
		return storelink.Result{}, each, err
	}
	for i := range n {
		each[i] = storelink.ResultOf(&ds[i])
	}
	return storelink.ResultOf(&d), each, nil
}

// Refund gives req.Cost units back to req.Key at the store's clock time, a
// window's only to the window that ends at window (0: any).
func (e *engine) Refund(_ context.Context, req storelink.Request, window int64) (storelink.Result, error) {
	d, err := e.store().refund(&req, window)
	return storelink.ResultOf(&d), err
}

// Reset returns key to its fresh state.
func (e *engine) Reset(ctx context.Context, key string) error { return e.store().Reset(ctx, key) }

// Clock is the clock WithClock gave, or nil.
func (e *engine) Clock() storelink.Clock {
	if e.clock == nil {
		return nil // not a non-nil interface holding a nil one
	}
	return e.clock
}

// TakeAt makes one decision for req at time now (µs since the epoch).
func (e *engine) TakeAt(_ context.Context, req storelink.Request, now int64) (algo.Decision, error) {
	var d algo.Decision
	err := e.store().decide(req.Key, &req.Params, req.Cost, req.MaxDelay, now, &d)
	return d, err
}

// TakeAllAt makes one decision for a composite at time now.
func (e *engine) TakeAllAt(_ context.Context, reqs []storelink.Request, now int64) (algo.Decision, error) {
	var d algo.Decision
	err := e.store().takeAll(reqs, now, &d, nil)
	return d, err
}

// TakeEachAt is TakeAllAt that also writes each part's decision into
// each[i] (each as long as reqs).
func (e *engine) TakeEachAt(_ context.Context, reqs []storelink.Request, now int64, each []algo.Decision) (algo.Decision, error) {
	var d algo.Decision
	err := e.store().takeAll(reqs, now, &d, each)
	return d, err
}
