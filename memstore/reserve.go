package memstore

import (
	"context"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
)

var _ storelink.Reserver = (*engine)(nil)

// TakeReserving decides req leaving reserve units at the store's clock time.
func (e *engine) TakeReserving(_ context.Context, req storelink.Request, reserve int64) (storelink.Result, error) {
	s := e.store()
	var d algo.Decision
	err := s.decideReserving(&req, reserve, s.now(), &d)
	return storelink.ResultOf(&d), err
}

// TakeReservingAt decides req leaving reserve units at now.
func (e *engine) TakeReservingAt(_ context.Context, req storelink.Request, reserve, now int64) (algo.Decision, error) {
	var d algo.Decision
	err := e.store().decideReserving(&req, reserve, now, &d)
	return d, err
}

// decideReserving is decide for a class with a reserve: one
// algo.StepReserving under the key's entry lock. A refusal leaves the
// state, and its FreshAt, as they were.
func (s *Store) decideReserving(req *storelink.Request, reserve, now int64, d *algo.Decision) error {
	if err := algo.CheckTime(now); err != nil {
		return err
	}
	sh, h := s.locate(req.Key)
	e := sh.lockEntry(h, req.Key, now, req.Cost > 0)
	if e == nil {
		var fresh algo.State
		algo.StepReserving(&req.Params, &fresh, now, req.Cost, reserve, req.MaxDelay, d)
		return nil
	}
	algo.StepReserving(&req.Params, &e.st, now, req.Cost, reserve, req.MaxDelay, d)
	if req.Cost > 0 && d.FreshAt != 0 { // 0: a refusal that left the state
		e.freshAt = d.FreshAt
	}
	e.mu.Unlock()
	return nil
}
