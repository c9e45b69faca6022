package memstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/store"
)

var _ store.Store = (*Store)(nil)

func init() {
	storelink.FastTakeOf = func(st store.Store) storelink.FastTake {
		s, ok := st.(*Store)
		if !ok || s == nil {
			return nil
		}
		return func(key string, p *algo.Params, cost, maxDelay int64) (bool, int64, int64, int64, int64, int64, error) {
			var d algo.Decision
			err := s.decideNow(key, p, cost, maxDelay, &d)
			return d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter, d.Delay, d.Window, err
		}
	}
}

// Run decides every op of ops, each atomically, at its At or, when that is
// 0, at the store's clock (see store.Store). A sluice.Limiter calls it
// directly, its ops on its own stack: Run keeps nothing of them, so a
// decision on a key that exists allocates nothing.
func (s *Store) Run(_ context.Context, ops []store.Op) {
	for i := range ops {
		op := &ops[i]
		s.run(op)
	}
}

// Clock returns the clock WithClock gave, or nil: a sluice.Limiter over
// the store reads deadlines and sleeps by it.
func (s *Store) Clock() store.Clock {
	if s.clock == nil {
		return nil // not a non-nil interface holding a nil one
	}
	return s.clock
}

// run decides one op.
func (s *Store) run(op *store.Op) {
	var d algo.Decision
	var err error
	switch op.Kind {
	case store.Take:
		err = s.runTake(op, &d)
	case store.Refund:
		var p algo.Params
		storelink.SetParams(&p, &op.Limit)
		d, err = s.refund(op.Key, &p, op.Cost, op.Window, s.at(op))
	case store.Reset:
		s.reset(op.Key)
	case store.Acquire, store.Release, store.Extend:
		err = s.runHold(op, &d)
	case store.Charge:
		err = s.runCharge(op, &d)
	default:
		err = fmt.Errorf("memstore: operation %d: %w", op.Kind, errors.ErrUnsupported)
	}
	storelink.SetDecision(&op.Decision, &d)
	op.Err = err
}

// at is the time op is decided at.
func (s *Store) at(op *store.Op) int64 {
	if op.At != 0 {
		return op.At
	}
	return s.now()
}

// runTake decides a Take: one key, with or without headroom, or a
// composite.
func (s *Store) runTake(op *store.Op, d *algo.Decision) error {
	if len(op.Parts) > 0 {
		return s.takeAll(op.Parts, op.MaxDelay, s.at(op), d, false)
	}
	var p algo.Params
	storelink.SetParams(&p, &op.Limit)
	switch {
	case op.Headroom != 0:
		return s.decideHeadroom(op.Key, &p, op.Cost, op.Headroom, op.MaxDelay, s.at(op), d)
	case op.At == 0:
		return s.decideNow(op.Key, &p, op.Cost, op.MaxDelay, d)
	}
	return s.decide(op.Key, &p, op.Cost, op.MaxDelay, op.At, d)
}

// runHold decides an Acquire, a Release or an Extend, an Acquire with
// parts as one with its rate parts, answering their summary.
func (s *Store) runHold(op *store.Op, d *algo.Decision) error {
	c := algo.Concurrency(op.Concurrency)
	kind := storelink.HoldOpOf(op.Kind)
	var exp int64
	var err error
	if len(op.Parts) == 0 {
		exp, err = s.holdStep(kind, op.Key, &c, op.Cost, op.ID, s.at(op), d)
	} else if exp, err = s.holdAll(op.Key, &c, op.Cost, op.ID, op.Parts, op.MaxDelay, s.at(op), d); err == nil {
		// The answer is the composite's: the hold's folded with the parts'.
		for i := range op.Parts {
			algo.Combine(d, storelink.AlgoDecision(&op.Parts[i].Decision))
		}
	}
	op.Expiry = exp
	return err
}
