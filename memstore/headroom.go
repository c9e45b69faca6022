package memstore

import (
	"github.com/sluice-go/sluice/internal/algo"
)

// decideHeadroom is decide for a class with a reserve: one
// algo.StepHeadroom under the key's entry lock. A refusal leaves the
// state, and its FreshAt, as they were.
func (s *Store) decideHeadroom(key string, p *algo.Params, cost, reserve, maxDelay, now int64, d *algo.Decision) error {
	if err := algo.CheckTime(now); err != nil {
		return err
	}
	sh, h := s.locate(key)
	e := sh.lockEntry(h, key, now, cost > 0)
	if e == nil {
		var fresh algo.State
		algo.StepHeadroom(p, &fresh, now, cost, reserve, maxDelay, d)
		return nil
	}
	algo.StepHeadroom(p, &e.st, now, cost, reserve, maxDelay, d)
	if cost > 0 && d.FreshAt != 0 { // 0: a refusal that left the state
		e.freshAt = d.FreshAt
	}
	e.mu.Unlock()
	return nil
}
