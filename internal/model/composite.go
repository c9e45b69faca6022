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

// TakeAll is the contract's composite rule: models[i] decides keys[i] as if
// alone; the request passes only if all grant, and a refusal leaves every
// model as it was. RetryAfter is the largest of the refusals', Remaining the
// smallest, ResetAfter and Delay the largest.
func TakeAll(models []*Model, keys []string, now, cost int64) algo.Decision {
	saved := make([]*keyState, len(models))
	for i, m := range models {
		if st := m.keys[keys[i]]; st != nil {
			saved[i] = st.clone()
		}
	}
	var acc algo.Decision
	var denied []algo.Decision
	for i, m := range models {
		d := m.Take(keys[i], now, cost)
		if i == 0 {
			acc = d
		}
		acc.Allowed = acc.Allowed && d.Allowed
		acc.Remaining = min(acc.Remaining, d.Remaining)
		acc.ResetAfter = max(acc.ResetAfter, d.ResetAfter)
		acc.Delay = max(acc.Delay, d.Delay)
		if !d.Allowed {
			denied = append(denied, d)
		}
	}
	acc.RetryAfter = 0
	for _, d := range denied {
		acc.RetryAfter = max(acc.RetryAfter, d.RetryAfter)
	}
	if !acc.Allowed {
		for i, m := range models {
			if saved[i] == nil {
				delete(m.keys, keys[i])
			} else {
				m.keys[keys[i]] = saved[i]
			}
		}
	}
	return acc
}
