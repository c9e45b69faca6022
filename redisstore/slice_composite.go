package redisstore

import (
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/store"
)

// maxSlicedParts is the most parts a composite decided from slices may
// have: their entries are locked together, found in an array on the stack.
const maxSlicedParts = 8

// takeAll decides a composite from its parts' slices when every part may
// take slices, costs more than 0 and has no headroom and no debt
// allowance, and every part's
// slices hold its cost: all parts are admitted together, each from its own
// key's slices (SEMANTICS.md, "Slices"), and each part's decision is
// written into it. When one part's slices fall short nothing is spent from
// any, and ok is false: the composite goes to Redis as without slices.
// Either way the parts' demand is counted and their next slices are taken
// when they run low, so a hot composite comes to be decided in memory.
func (tab *sliceTable) takeAll(parts []store.Part) (d algo.Decision, ok bool) {
	n := len(parts)
	if n == 0 || n > maxSlicedParts {
		return d, false
	}
	var es [maxSlicedParts]*sliceEntry
	var ps [maxSlicedParts]algo.Params
	var order [maxSlicedParts]int
	for i := range parts {
		pt := &parts[i]
		ps[i] = storelink.AlgoParams(&pt.Limit)
		if !algo.Sliceable(ps[i].Kind) || pt.Cost == 0 || pt.Headroom != 0 || ps[i].Debt != 0 {
			return d, false // a query looks at the store, as a single one does; so does a class's part, and one that may owe
		}
		es[i], order[i] = tab.entry(pt.Key), i
	}
	// Entries are locked in the order of their keys, so that two
	// composites over the same keys never wait for each other in a circle.
	for i := 1; i < n; i++ {
		for j := i; j > 0 && parts[order[j]].Key < parts[order[j-1]].Key; j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	for _, i := range order[:n] {
		es[i].mu.Lock()
	}
	defer func() {
		for _, i := range order[:n] {
			es[i].mu.Unlock()
		}
	}()
	for i := range n {
		if es[i].gone { // forgotten by the table meanwhile: rare, left to Redis
			return d, false
		}
	}
	now := tab.now()
	ok = true
	for i := range n {
		e, p := es[i], &ps[i]
		if e.params != *p && e.refill == nil && e.held(now) == 0 {
			e.params = *p // a new key, or one whose slices are gone
			e.winStart, e.winUnits, e.demand = now, 0, 0
		}
		e.note(now, parts[i].Cost, tab.horizon)
		e.expire(now)
		if e.params != *p || (e.cur.units < parts[i].Cost && e.nxt.units < parts[i].Cost) {
			ok = false
		}
	}
	if ok {
		d = admitAll(parts, es[:n], now)
	} else {
		for i := range n {
			es[i].counts.store++
		}
	}
	for i := range n {
		if es[i].params == ps[i] {
			tab.prefetch(es[i], now)
		}
	}
	return d, ok
}

// admitAll admits every part from its entry's slices (each holds its cost,
// under the entries' locks), writes each part's decision into it, and
// returns their fold as a composite's (SEMANTICS.md, "Composite limits"):
// Remaining the smallest, ResetAfter the largest, a Window only of a single
// part.
func admitAll(parts []store.Part, es []*sliceEntry, now int64) algo.Decision {
	var acc algo.Decision
	for i := range parts {
		var d algo.Decision
		es[i].local(now, parts[i].Cost, &d)
		parts[i].Decision = storelink.DecisionOf(&d)
		if i == 0 {
			acc = d
			continue
		}
		acc.Remaining = min(acc.Remaining, d.Remaining)
		acc.ResetAfter = max(acc.ResetAfter, d.ResetAfter)
	}
	if len(parts) > 1 {
		acc.Window = 0
	}
	return acc
}
