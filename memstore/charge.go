package memstore

import (
	"fmt"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/store"
)

// runCharge decides a Charge: one key, or every part of a composite.
func (s *Store) runCharge(op *store.Op, d *algo.Decision) error {
	now := s.at(op)
	if err := algo.CheckTime(now); err != nil {
		return err
	}
	if len(op.Parts) > 0 {
		return s.chargeAll(op.Parts, now, d)
	}
	var p algo.Params
	storelink.SetParams(&p, &op.Limit)
	if !algo.Chargeable(p.Kind) {
		return noCharge(p.Kind)
	}
	sh, h := s.locate(op.Key)
	e := sh.lockEntry(h, op.Key, now, op.Cost > 0)
	if e == nil { // a look at a fresh key stores nothing
		var fresh algo.State
		algo.Charge(&p, &fresh, now, 0, d)
		return nil
	}
	algo.Charge(&p, &e.st, now, op.Cost, d)
	if op.Cost > 0 {
		e.freshAt = d.FreshAt
	}
	e.mu.Unlock()
	return nil
}

// chargeAll charges every part of ps its cost at now, their entries
// locked together (see takeAll), writing each part's decision into
// ps[i].Decision and their fold into *acc. Composites of up to 4 parts
// allocate nothing.
func (s *Store) chargeAll(ps []store.Part, now int64, acc *algo.Decision) error {
	for i := range ps {
		if k := algo.Kind(ps[i].Limit.Algorithm); !algo.Chargeable(k) {
			// The part by its index: an error holding its key would move
			// every op's keys to the heap.
			return fmt.Errorf("part %d: %w", i, noCharge(k))
		}
	}
	var partBuf [4]part
	var orderBuf [4]int
	parts, order := partBuf[:0], orderBuf[:0]
	if len(ps) > len(partBuf) {
		parts, order = make([]part, 0, len(ps)), make([]int, 0, len(ps))
	}
	parts, order = s.locateParts(ps, parts, order)
	s.lockParts(parts, order, ps, now)
	for i := range parts {
		pt := &parts[i]
		st := &pt.st // a look at a fresh key, which has no entry
		if pt.e != nil {
			st = &pt.e.st
		}
		var d algo.Decision
		algo.Charge(&pt.p, st, now, ps[i].Cost, &d)
		if pt.e != nil && ps[i].Cost > 0 {
			pt.e.freshAt = d.FreshAt
		}
		if i == 0 {
			*acc = d
		} else {
			algo.Combine(acc, d)
		}
		ps[i].Decision = storelink.DecisionOf(&d)
	}
	unlockParts(parts, order)
	return nil
}

// noCharge is the error of a charge under k, which cannot carry a debt.
func noCharge(k algo.Kind) error {
	return fmt.Errorf("memstore: charge under %s: %w", k, algo.ErrNoRefund)
}
