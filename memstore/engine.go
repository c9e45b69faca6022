package memstore

import (
	"context"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/storeapi"
)

// engine is the store's sealed side: what a sluice.Limiter calls, on
// requests it has checked, and what the module's replays and tests call to
// decide at a given time. Its type is unexported, so its methods are in no
// user's documentation; the Limiter finds it through core.Unseal.
type engine Store

func init() { core.Seal(func(s *Store) any { return (*engine)(s) }) }

func (e *engine) store() *Store { return (*Store)(e) }

// Take makes one decision for req at the store's clock time.
func (e *engine) Take(_ context.Context, req core.Request) (sluice.Result, error) {
	var d algo.Decision
	s := e.store()
	err := s.decide(req.Key, &req.Params, req.Cost, req.MaxDelay, s.now(), &d)
	return storeapi.Result(&d), err
}

// TakeLocal is Take for the Limiter's hot path. On an error every figure is
// 0 but retryAfter, which is algo.Never: read as "allowed is retryAfter ==
// 0", an error is never allowed.
func (e *engine) TakeLocal(key string, p algo.Params, cost int64) (remaining, retryAfter, resetAfter, delay, window int64, err error) {
	var d algo.Decision
	s := e.store()
	if err = s.decide(key, &p, cost, algo.Never, s.now(), &d); err != nil {
		return 0, algo.Never, 0, 0, 0, err
	}
	return d.Remaining, d.RetryAfter, d.ResetAfter, d.Delay, d.Window, nil
}

// TakeAll makes one decision for a composite at the store's clock time.
func (e *engine) TakeAll(_ context.Context, reqs []core.Request) (sluice.Result, error) {
	var d algo.Decision
	s := e.store()
	err := s.takeAll(reqs, s.now(), &d, nil)
	return storeapi.Result(&d), err
}

// TakeAllLocal is TakeAll for the Limiter's hot path, on the parts it has
// checked and their params: their requests are built here, on the stack, so
// that composites of up to 4 parts allocate nothing.
func (e *engine) TakeAllLocal(parts []sluice.Part, ps [4]algo.Params) (sluice.Result, error) {
	var buf [4]core.Request
	reqs := localRequests(&buf, parts, &ps)
	var d algo.Decision
	s := e.store()
	err := s.takeAll(reqs, s.now(), &d, nil)
	return storeapi.Result(&d), err
}

// localRequests builds in buf the requests of parts, checked, under ps.
func localRequests(buf *[4]core.Request, parts []sluice.Part, ps *[4]algo.Params) []core.Request {
	reqs := buf[:len(parts)]
	for i := range reqs {
		r := &reqs[i] // set the fields: copying a Request costs more
		r.Key, r.Params, r.Cost, r.MaxDelay = parts[i].Key, ps[i], parts[i].Cost, algo.Never
	}
	return reqs
}

// TakeEach is TakeAll that also writes each part's result into each[i]
// (each as long as reqs).
func (e *engine) TakeEach(_ context.Context, reqs []core.Request, each []sluice.Result) (sluice.Result, error) {
	var buf [4]algo.Decision
	ds := buf[:0]
	if len(reqs) > len(buf) {
		ds = make([]algo.Decision, len(reqs))
	}
	ds = ds[:len(reqs)]
	var d algo.Decision
	s := e.store()
	if err := s.takeAll(reqs, s.now(), &d, ds); err != nil {
		return sluice.Result{}, err
	}
	for i := range ds {
		each[i] = storeapi.Result(&ds[i])
	}
	return storeapi.Result(&d), nil
}

// TakeEachLocal is TakeAllLocal that also returns each part's result
// (parts[i]'s in each[i]): by value, since a slice the Limiter passed in
// through the interface would escape to the heap.
func (e *engine) TakeEachLocal(parts []sluice.Part, ps [4]algo.Params) (r sluice.Result, each [4]sluice.Result, err error) {
	var buf [4]core.Request
	reqs := localRequests(&buf, parts, &ps)
	var d algo.Decision
	var ds [4]algo.Decision
	s := e.store()
	if err = s.takeAll(reqs, s.now(), &d, ds[:len(reqs)]); err != nil {
		return sluice.Result{}, each, err
	}
	for i := range reqs {
		each[i] = storeapi.Result(&ds[i])
	}
	return storeapi.Result(&d), each, nil
}

// Refund gives req.Cost units back to req.Key at the store's clock time, a
// window's only to the window that ends at window (0: any).
func (e *engine) Refund(_ context.Context, req core.Request, window int64) (sluice.Result, error) {
	d, err := e.store().refund(&req, window)
	return storeapi.Result(&d), err
}

// Reset returns key to its fresh state.
func (e *engine) Reset(ctx context.Context, key string) error { return e.store().Reset(ctx, key) }

// Clock is the clock WithClock gave, or nil.
func (e *engine) Clock() sluice.Clock { return e.clock }

// TakeAt makes one decision for req at time now (µs since the epoch).
func (e *engine) TakeAt(req core.Request, now int64) (algo.Decision, error) {
	var d algo.Decision
	err := e.store().decide(req.Key, &req.Params, req.Cost, req.MaxDelay, now, &d)
	return d, err
}

// TakeAllAt makes one decision for a composite at time now.
func (e *engine) TakeAllAt(reqs []core.Request, now int64) (algo.Decision, error) {
	var d algo.Decision
	err := e.store().takeAll(reqs, now, &d, nil)
	return d, err
}

// TakeEachAt is TakeAllAt that also writes each part's decision into
// each[i] (each as long as reqs).
func (e *engine) TakeEachAt(reqs []core.Request, now int64, each []algo.Decision) (algo.Decision, error) {
	var d algo.Decision
	err := e.store().takeAll(reqs, now, &d, each)
	return d, err
}
