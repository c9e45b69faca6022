package model

import (
	"fmt"

	"github.com/sluice-go/sluice/algo"
)

// Leases is the contract's concurrency limits (SEMANTICS.md, "Concurrency
// limits") over a key space of their own, written from the text: each key
// holds a set of leases, each with its units and the instant it comes back
// by itself; a lease is held at t when t is before that instant. Figures
// that the contract defines as "the smallest wait such that …" are found by
// searching over the wait. The zero Leases is not usable; call NewLeases.
// It is not safe for concurrent use.
type Leases struct {
	keys map[string]map[int64]lease
}

type lease struct{ units, expiry int64 }

// NewLeases returns an empty key space of leases.
func NewLeases() *Leases { return &Leases{keys: make(map[string]map[int64]lease)} }

// held is the units of key's leases held at t.
func (ls *Leases) held(key string, t int64) int64 {
	n := int64(0)
	for _, l := range ls.keys[key] {
		if t < l.expiry {
			n += l.units
		}
	}
	return n
}

// figures fills Remaining and ResetAfter at now under limit.
func (ls *Leases) figures(key string, limit, now int64, d *algo.Decision) {
	d.Remaining = max(0, limit-ls.held(key, now))
	last := now
	for _, l := range ls.keys[key] {
		last = max(last, l.expiry)
	}
	d.ResetAfter = search(0, last-now, func(w int64) bool { return ls.held(key, now+w) == 0 })
}

// Acquire asks for a lease of units (0 ≤ units ≤ limit) on key at now, named
// id, held for lifetime µs: granted when the units held at now plus units
// are at most limit. Refused, RetryAfter is the smallest wait after which it
// would be granted were no lease released or extended. It panics when a
// lease of key held at now already has the id (the contract's error, which
// changes nothing) and on units outside [0, limit].
func (ls *Leases) Acquire(key string, limit, lifetime, now, units, id int64) algo.Decision {
	if units < 0 || units > limit {
		panic(fmt.Sprintf("model: units %d outside [0, %d]", units, limit))
	}
	if l, ok := ls.keys[key][id]; ok && now < l.expiry && units > 0 {
		panic(fmt.Sprintf("model: lease id %d of %q is held", id, key))
	}
	var d algo.Decision
	fits := func(t int64) bool { return ls.held(key, t)+units <= limit }
	switch {
	case units == 0 || fits(now):
		d.Allowed = true
		if units > 0 {
			if ls.keys[key] == nil {
				ls.keys[key] = make(map[int64]lease)
			}
			ls.keys[key][id] = lease{units, now + lifetime}
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

// Release gives back key's lease id at now: Allowed when it was held at
// now. Remaining is read under limit.
func (ls *Leases) Release(key string, limit, now, id int64) algo.Decision {
	var d algo.Decision
	if l, ok := ls.keys[key][id]; ok {
		d.Allowed = now < l.expiry
		delete(ls.keys[key], id)
	}
	ls.figures(key, limit, now, &d)
	return d
}

// Extend makes key's lease id, if held at now, held until now + lifetime
// (Allowed); a lease that had come back stays gone.
func (ls *Leases) Extend(key string, limit, lifetime, now, id int64) algo.Decision {
	var d algo.Decision
	if l, ok := ls.keys[key][id]; ok && now < l.expiry {
		d.Allowed = true
		ls.keys[key][id] = lease{l.units, now + lifetime}
	}
	ls.figures(key, limit, now, &d)
	return d
}

// Held is the units of key's leases held at t: what a counter of work in
// flight counts.
func (ls *Leases) Held(key string, t int64) int64 { return ls.held(key, t) }
