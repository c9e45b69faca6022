package model

import (
	"fmt"

	"github.com/sluice-go/sluice/internal/algo"
)

// Holds is the contract's concurrency limits (SEMANTICS.md, "Concurrency
// limits") over a key space of their own, written from the text: each key
// holds a set of holds, each with its units and the instant it comes back
// by itself; a hold is held at t when t is before that instant. Figures
// that the contract defines as "the smallest wait such that …" are found by
// searching over the wait. The zero Holds is not usable; call NewHolds.
// It is not safe for concurrent use.
type Holds struct {
	keys map[string]map[int64]hold
}

type hold struct{ units, expiry int64 }

// NewHolds returns an empty key space of holds.
func NewHolds() *Holds { return &Holds{keys: make(map[string]map[int64]hold)} }

// held is the units of key's holds held at t.
func (ls *Holds) held(key string, t int64) int64 {
	n := int64(0)
	for _, l := range ls.keys[key] {
		if t < l.expiry {
			n += l.units
		}
	}
	return n
}

// figures fills Remaining and ResetAfter at now under limit.
func (ls *Holds) figures(key string, limit, now int64, d *algo.Decision) {
	d.Remaining = max(0, limit-ls.held(key, now))
	last := now
	for _, l := range ls.keys[key] {
		last = max(last, l.expiry)
	}
	d.ResetAfter = search(0, last-now, func(w int64) bool { return ls.held(key, now+w) == 0 })
}

// Acquire asks for a hold of units (0 ≤ units ≤ limit) on key at now, named
// id, held for lifetime µs: granted when the units held at now plus units
// are at most limit. Refused, RetryAfter is the smallest wait after which it
// would be granted were no hold released or extended. It panics when a
// hold of key held at now already has the id (the contract's error, which
// changes nothing) and on units outside [0, limit].
func (ls *Holds) Acquire(key string, limit, lifetime, now, units, id int64) algo.Decision {
	if units < 0 || units > limit {
		panic(fmt.Sprintf("model: units %d outside [0, %d]", units, limit))
	}
	if l, ok := ls.keys[key][id]; ok && now < l.expiry && units > 0 {
		panic(fmt.Sprintf("model: hold id %d of %q is held", id, key))
	}
	var d algo.Decision
	fits := func(t int64) bool { return ls.held(key, t)+units <= limit }
	switch {
	case units == 0 || fits(now):
		d.Allowed = true
		if units > 0 {
			if ls.keys[key] == nil {
				ls.keys[key] = make(map[int64]hold)
			}
			ls.keys[key][id] = hold{units, now + lifetime}
		}
	default:
		last := now
		for _, l := range ls.keys[key] {
			last = max(last, l.expiry)
		}
		d.RetryAfter = search(0, last-now, func(w int64) bool { return fits(now + w) })
	}
	ls.figures(key, limit, now, &d)
	return d
}

// Release gives back key's hold id at now: Allowed when it was held at
// now. Remaining is read under limit.
func (ls *Holds) Release(key string, limit, now, id int64) algo.Decision {
	var d algo.Decision
	if l, ok := ls.keys[key][id]; ok {
		d.Allowed = now < l.expiry
		delete(ls.keys[key], id)
	}
	ls.figures(key, limit, now, &d)
	return d
}

// Extend makes key's hold id, if held at now, held until now + lifetime
// (Allowed); a hold that had come back stays gone.
func (ls *Holds) Extend(key string, limit, lifetime, now, id int64) algo.Decision {
	var d algo.Decision
	if l, ok := ls.keys[key][id]; ok && now < l.expiry {
		d.Allowed = true
		ls.keys[key][id] = hold{l.units, now + lifetime}
	}
	ls.figures(key, limit, now, &d)
	return d
}

// Held is the units of key's holds held at t: what a counter of work in
// flight counts.
func (ls *Holds) Held(key string, t int64) int64 { return ls.held(key, t) }

// AcquireEach is the contract's composite of a hold and rate parts: the
// hold of units on key (under limit and lifetime, named id) and models[i]'s
// costs[i] units for keys[i] pass only if all grant; a refusal holds nothing
// and spends nothing. It returns the hold part's decision and writes each
// rate part's into each[i], as TakeEach states them: admitted, each part's
// own after spending (the hold's after it is held); refused, a look at
// each part (the hold's a query of 0 units) whose Allowed says whether the
// part alone would have granted, with its own RetryAfter when it would not.
// The summary is the fold of the hold's and the parts' (Fold). Part i
// leaves reserves[i] units for higher classes (nil: none), as
// TakeEachHeadroom states it.
func AcquireEach(ls *Holds, key string, limit, lifetime, units, id int64, models []*Model, keys []string, costs, reserves []int64, now int64, each []algo.Decision) algo.Decision {
	saved := make([]*keyState, len(models))
	had := make([]bool, len(models))
	for i, m := range models {
		if st, ok := m.keys[keys[i]]; ok {
			saved[i], had[i] = st.clone(), true
		}
	}
	alone := make([]algo.Decision, len(models))
	allowed := units == 0 || ls.held(key, now)+units <= limit
	holdAlone := allowed
	for i, m := range models {
		alone[i] = m.TakeHeadroom(keys[i], now, costs[i], reserveOf(reserves, i))
		allowed = allowed && alone[i].Allowed
	}
	if allowed {
		copy(each, alone)
		return ls.Acquire(key, limit, lifetime, now, units, id)
	}
	for i, m := range models {
		if had[i] {
			m.keys[keys[i]] = saved[i]
		} else {
			delete(m.keys, keys[i])
		}
		d := m.TakeHeadroom(keys[i], now, 0, reserveOf(reserves, i))
		each[i] = algo.Decision{Allowed: alone[i].Allowed, Remaining: d.Remaining, ResetAfter: d.ResetAfter}
		if !alone[i].Allowed {
			each[i].RetryAfter = alone[i].RetryAfter
		}
	}
	if holdAlone {
		return ls.Acquire(key, limit, lifetime, now, 0, id) // a look: it would have granted
	}
	return ls.Acquire(key, limit, lifetime, now, units, id) // its refusal holds nothing
}

// Fold is a composite's summary of its parts' decisions (the hold's first,
// then the rate parts'): allowed when all are, the smallest Remaining, the
// largest RetryAfter, ResetAfter and Delay, no Window.
func Fold(hold algo.Decision, each []algo.Decision) algo.Decision {
	d := fold(append([]algo.Decision{hold}, each...))
	d.Window = 0
	return d
}
