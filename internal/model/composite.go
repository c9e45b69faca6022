package model

import (
	"maps"
	"slices"

	"github.com/sluice-go/sluice/algo"
)

// clone copies a key's state; the big.Rat values are never changed in place,
// so they are shared.
func (st *keyState) clone() *keyState {
	c := *st
	c.counts = maps.Clone(st.counts)
	c.log = slices.Clone(st.log)
	return &c
}

// TakeAll is the contract's composite rule: models[i] decides costs[i] units
// for keys[i] as if alone; the request passes only if all grant, and a
// refusal leaves every model as it was.
//
// Admitted: Remaining is the smallest of the parts', ResetAfter and Delay
// the largest. Refused: nothing was spent, so Remaining and ResetAfter are
// the smallest and the largest of a look (cost 0) at each part, Delay is 0,
// and RetryAfter is the largest of the refusing parts'.
func TakeAll(models []*Model, keys []string, costs []int64, now int64) algo.Decision {
	saved := make([]*keyState, len(models))
	had := make([]bool, len(models))
	for i, m := range models {
		if st, ok := m.keys[keys[i]]; ok {
			saved[i], had[i] = st.clone(), true
		}
	}
	var acc algo.Decision
	allowed := true
	for i, m := range models {
		d := m.Take(keys[i], now, costs[i])
		if i == 0 {
			acc = d
		}
		acc.Remaining = min(acc.Remaining, d.Remaining)
		acc.ResetAfter = max(acc.ResetAfter, d.ResetAfter)
		acc.Delay = max(acc.Delay, d.Delay)
		if !d.Allowed {
			if allowed {
				acc.RetryAfter = 0
			}
			allowed = false
			acc.RetryAfter = max(acc.RetryAfter, d.RetryAfter)
		}
	}
	acc.Allowed = allowed
	if allowed {
		acc.RetryAfter = 0
		return acc
	}
	for i, m := range models {
		if had[i] {
			m.keys[keys[i]] = saved[i]
		} else {
			delete(m.keys, keys[i])
		}
	}
	acc.Delay = 0
	for i, m := range models {
		d := m.Take(keys[i], now, 0)
		if i == 0 {
			acc.Remaining, acc.ResetAfter = d.Remaining, d.ResetAfter
		}
		acc.Remaining = min(acc.Remaining, d.Remaining)
		acc.ResetAfter = max(acc.ResetAfter, d.ResetAfter)
	}
	return acc
}
