package memstore

import (
	"context"
	"slices"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
)

// TakeAll makes one decision for a composite request at the store's clock
// time: it passes only if every part grants, and a refusal changes no part.
// It checks reqs as a sluice.Limiter does.
func (s *Store) TakeAll(_ context.Context, reqs []sluice.Request) (sluice.Result, error) {
	rs, err := storelink.CheckedParts(reqs)
	if err != nil {
		return sluice.Result{}, err
	}
	var d algo.Decision
	err = s.takeAll(rs, s.now(), &d, nil)
	return sluice.Result(storelink.ResultOf(&d)), err
}

// part is one part of a composite (parts[i] is reqs[i]'s): its key, shard,
// hash and entry, and the state it steps (a copy, kept only if every part
// grants).
type part struct {
	key     string
	sh      *shard
	h       uint64
	e       *entry
	freshAt int64
	st      algo.State
}

// before reports whether a's entry is locked before b's: by hash, then key.
func (a *part) before(b *part) bool {
	if a.h != b.h {
		return a.h < b.h
	}
	return a.key < b.key
}

// takeAll makes one decision for a composite of checked requests at time
// now (µs since the epoch), writing it into *acc, which must be zero, and,
// unless each is nil, each part's decision into each[i] (each as long as
// reqs; see model.TakeEach for what a part reports). A part with a
// Reserve steps as algo.StepReserving. The entries of all parts are locked
// together, in one order (by hash, then key), so the decision is atomic; a part that spends nothing on a key
// without an entry steps a fresh state and stores nothing. Composites of up
// to 4 parts allocate nothing.
func (s *Store) takeAll(reqs []storelink.Request, now int64, acc *algo.Decision, each []algo.Decision) error {
	return s.takeAllUnless(reqs, now, acc, each, false)
}

// takeAllUnless is takeAll with one more part that refuses when veto is
// set (a hold that does not fit: see holdAll), whose figures the caller
// folds in: the parts then spend nothing and report as in a refusal.
func (s *Store) takeAllUnless(reqs []storelink.Request, now int64, acc *algo.Decision, each []algo.Decision, veto bool) error {
	if err := algo.CheckTime(now); err != nil {
		return err // wraps sluice.ErrInvalidTime
	}
	if len(reqs) == 0 {
		return nil
	}
	var partBuf [4]part
	var orderBuf [4]int
	parts, order := partBuf[:0], orderBuf[:0]
	if len(reqs) > len(partBuf) {
		parts, order = make([]part, 0, len(reqs)), make([]int, 0, len(reqs))
	}
	for i := range reqs {
		parts = parts[:i+1] // its buffer is zero: set the fields, copy no part
		pt := &parts[i]
		pt.key = reqs[i].Key
		pt.sh, pt.h = s.locate(pt.key)
		// Insertion sort of the lock order: composites are small.
		j := len(order)
		order = append(order, i)
		for ; j > 0 && pt.before(&parts[order[j-1]]); j-- {
			order[j] = order[j-1]
		}
		order[j] = i
	}
	s.lockParts(parts, order, reqs, now)
	// Step every part on a copy of its state; keep the copies only if all
	// grant.
	for i := range parts {
		pt, r := &parts[i], &reqs[i]
		if pt.e != nil {
			pt.st = pt.e.st
			if pt.st.Log != nil {
				pt.st.Log = slices.Clone(pt.st.Log)
			}
		}
		var d algo.Decision
		algo.StepReserving(&r.Params, &pt.st, now, r.Cost, r.Reserve, r.MaxDelay, &d)
		pt.freshAt = d.FreshAt
		if each != nil {
			each[i] = d
		}
		if i == 0 {
			*acc = d
		} else {
			algo.Combine(acc, d)
		}
	}
	if veto {
		acc.Allowed = false
	}
	if acc.Allowed {
		for i := range parts {
			if pt := &parts[i]; reqs[i].Cost > 0 {
				pt.e.st = pt.st
				pt.e.freshAt = pt.freshAt
			}
		}
	} else {
		// Nothing was spent: the decision describes the parts as they are.
		var lookBuf [4]algo.Decision
		looks := lookBuf[:0]
		for i := range parts {
			var st algo.State
			if e := parts[i].e; e != nil {
				st = e.st
			}
			var d algo.Decision
			algo.StepReserving(&reqs[i].Params, &st, now, 0, reqs[i].Reserve, reqs[i].MaxDelay, &d)
			looks = append(looks, d)
			if each != nil {
				algo.RefusedPart(&each[i], &d)
			}
		}
		algo.Refused(acc, looks)
	}
	unlockParts(parts, order)
	return nil
}

// lockParts locks the entries of the parts in order (sorted by hash and
// key), each distinct key once, creating those of the parts that spend. It
// holds no entry lock while it takes a shard's lock, the order sweeps and
// inserts take them in; an entry found dead after all are locked makes it
// start again.
func (s *Store) lockParts(parts []part, order []int, reqs []storelink.Request, now int64) {
	for {
		// Entries first, without entry locks.
		for _, i := range order {
			pt := &parts[i]
			pt.e = pt.sh.get(pt.h, pt.key)
			if pt.e == nil && reqs[i].Cost > 0 {
				pt.sh.mu.Lock()
				pt.e = pt.sh.getOrInsert(pt.h, pt.key, now)
				pt.sh.mu.Unlock()
			}
		}
		// Parts on one key share its entry: the first that found one.
		for j := 1; j < len(order); j++ {
			if a, b := &parts[order[j-1]], &parts[order[j]]; b.key == a.key && a.e != nil {
				b.e = a.e
			}
		}
		ok := true
		for j := range order {
			if e := lockedAt(parts, order, j); e != nil {
				e.mu.Lock()
				if e.freshAt == dead {
					ok = false
				}
			}
		}
		if ok {
			return
		}
		unlockParts(parts, order)
	}
}

// unlockParts unlocks what lockParts locked.
func unlockParts(parts []part, order []int) {
	for j := range order {
		if e := lockedAt(parts, order, j); e != nil {
			e.mu.Unlock()
		}
	}
}

// lockedAt returns the entry lockParts locks at the j-th place of order:
// the part's entry, unless it has none or shares the previous part's.
func lockedAt(parts []part, order []int, j int) *entry {
	e := parts[order[j]].e
	if j > 0 && e == parts[order[j-1]].e {
		return nil
	}
	return e
}
