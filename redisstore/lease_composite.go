package redisstore

import (
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
)

// maxLeasedParts is the most parts a composite decided from slices may
// have: their entries are locked together, found in an array on the stack.
const maxLeasedParts = 8

// takeAll decides a composite from its parts' slices when every part is
// leasable, of cost > 0 and no reserve, and every part's slices hold its
// cost: all parts are admitted
// together, each from its own key's slices (SEMANTICS.md, "Leases"). When
// one part's slices fall short nothing is spent from any, and ok is false:
// the composite goes to Redis as without leases. Either way the parts'
// demand is counted and their next slices are taken when they run low, so
// a hot composite comes to be decided in memory. Unless each is nil, each
// part's figures go to each[i] (those of a leased decision).
func (ls *leases) takeAll(reqs []storelink.Request, each []storelink.Result) (res storelink.Result, ok bool) {
	n := len(reqs)
	if n == 0 || n > maxLeasedParts {
		return res, false
	}
	var es [maxLeasedParts]*leaseEntry
	var order [maxLeasedParts]int
	for i := range reqs {
		if !algo.Leasable(reqs[i].Params.Kind) || reqs[i].Cost == 0 || reqs[i].Reserve != 0 {
			return res, false // a query looks at the store, as a single one does; so does a class's part
		}
		es[i], order[i] = ls.entry(reqs[i].Key), i
	}
	// Entries are locked in the order of their keys, so that two
	// composites over the same keys never wait for each other in a circle.
	for i := 1; i < n; i++ {
		for j := i; j > 0 && reqs[order[j]].Key < reqs[order[j-1]].Key; j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	for _, i := range order[:n] {
		es[i].mu.Lock()
	}
	for i := range reqs {
		if es[i].gone { // forgotten by the table meanwhile: rare, left to Redis
			for _, j := range order[:n] {
				es[j].mu.Unlock()
			}
			return res, false
		}
	}
	now := ls.now()
	ok = true
	for i := range reqs {
		e, r := es[i], &reqs[i]
		if e.params != r.Params && e.refill == nil && e.held(now) == 0 {
			e.params = r.Params // a new key, or one whose slices are gone
			e.winStart, e.winUnits, e.demand = now, 0, 0
		}
		e.note(now, r.Cost, ls.horizon)
		e.expire(now)
		if e.params != r.Params || (e.cur.units < r.Cost && e.nxt.units < r.Cost) {
			ok = false
		}
	}
	if ok {
		res = ls.admitAll(reqs, es[:n], each, now)
	} else {
		for i := range reqs {
			es[i].counts.store++
		}
	}
	for i := range reqs {
		if es[i].params == reqs[i].Params {
			ls.prefetch(reqs[i].Key, es[i], now)
		}
	}
	for _, i := range order[:n] {
		es[i].mu.Unlock()
	}
	return res, ok
}

// admitAll admits every part from its entry's slices (each holds its cost,
// under the entries' locks) and folds the parts' figures as a composite's
// (SEMANTICS.md, "Composite limits"): Remaining the smallest, ResetAfter
// the largest, a Window only of a single part.
func (ls *leases) admitAll(reqs []storelink.Request, es []*leaseEntry, each []storelink.Result, now int64) storelink.Result {
	var acc storelink.Result
	for i := range reqs {
		var r storelink.Result
		es[i].local(now, reqs[i].Cost, &r)
		if each != nil {
			each[i] = r
		}
		if i == 0 {
			acc = r
			continue
		}
		acc.Remaining = min(acc.Remaining, r.Remaining)
		acc.ResetAfter = max(acc.ResetAfter, r.ResetAfter)
	}
	if len(reqs) > 1 {
		acc.Window = 0
	}
	return acc
}
