package model

import (
	"maps"
	"slices"

	"github.com/sluice-go/sluice/internal/algo"
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
	if len(models) > 1 || !allowed {
		acc.Window = 0 // a window is one part's, and a refusal spent in none
	}
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

// TakeEach is TakeAll that also reports each part's own decision at the
// composite's instant in each[i] (each is as long as models). It is stated
// apart from TakeAll, so that the tests check the one against the other:
//
//   - Admitted: part i's decision after spending its cost (Allowed, its
//     Remaining, ResetAfter and Delay; RetryAfter 0).
//   - Refused: nothing was spent, so each[i] is a look (cost 0) at part i —
//     its Remaining and ResetAfter, Delay 0 — whose Allowed says whether
//     part i alone would have granted its cost at that instant; a part that
//     would not reports its own RetryAfter, the others 0.
//
// So the summary is each's fold: Allowed all of theirs, Remaining the
// smallest, ResetAfter and Delay the largest, RetryAfter the largest.
func TakeEach(models []*Model, keys []string, costs []int64, now int64, each []algo.Decision) algo.Decision {
	return TakeEachHeadroom(models, keys, costs, nil, now, each)
}

// TakeEachHeadroom is TakeEach whose part i leaves reserves[i] units for
// higher classes (nil: none), as TakeHeadroom states it for one limit
// (SEMANTICS.md, "Reserved capacity"): part i alone grants only if
// costs[i] + reserves[i] units would pass, and then spends costs[i]; its
// Remaining, and its look's in a refusal, are the class's (less the
// reserve, at least 0); a part that would not grant reports the RetryAfter
// of costs[i] + reserves[i]. The composite passes only if every part
// grants, and a refusal spends nothing.
func TakeEachHeadroom(models []*Model, keys []string, costs, reserves []int64, now int64, each []algo.Decision) algo.Decision {
	saved := make([]*keyState, len(models))
	had := make([]bool, len(models))
	for i, m := range models {
		if st, ok := m.keys[keys[i]]; ok {
			saved[i], had[i] = st.clone(), true
		}
	}
	alone := make([]algo.Decision, len(models))
	allowed := true
	for i, m := range models {
		alone[i] = m.TakeHeadroom(keys[i], now, costs[i], reserveOf(reserves, i))
		allowed = allowed && alone[i].Allowed
	}
	if allowed {
		copy(each, alone)
		return fold(alone)
	}
	for i, m := range models {
		if had[i] {
			m.keys[keys[i]] = saved[i]
		} else {
			delete(m.keys, keys[i])
		}
	}
	looks := make([]algo.Decision, len(models))
	for i, m := range models {
		d := m.TakeHeadroom(keys[i], now, 0, reserveOf(reserves, i))
		looks[i] = algo.Decision{Allowed: alone[i].Allowed, Remaining: d.Remaining, ResetAfter: d.ResetAfter}
		if !alone[i].Allowed {
			looks[i].RetryAfter = alone[i].RetryAfter
		}
	}
	copy(each, looks)
	return fold(looks)
}

// reserveOf is part i's reserve in reserves (nil: none).
func reserveOf(reserves []int64, i int) int64 {
	if reserves == nil {
		return 0
	}
	return reserves[i]
}

// fold is the composite's summary of its parts' decisions: allowed when all
// are, the smallest Remaining, the largest RetryAfter, ResetAfter and Delay.
func fold(ds []algo.Decision) algo.Decision {
	acc := ds[0]
	for _, d := range ds[1:] {
		acc.Window = 0 // a window is one part's
		acc.Allowed = acc.Allowed && d.Allowed
		acc.Remaining = min(acc.Remaining, d.Remaining)
		acc.RetryAfter = max(acc.RetryAfter, d.RetryAfter)
		acc.ResetAfter = max(acc.ResetAfter, d.ResetAfter)
		acc.Delay = max(acc.Delay, d.Delay)
	}
	return acc
}
