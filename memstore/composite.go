package memstore

import (
	"slices"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/store"
)

// part is what takeAll keeps of the composite's part of the same index:
// its limit, shard, hash and entry, and the state it steps (a copy, kept
// only if every part grants).
type part struct {
	sh      *shard
	h       uint64
	p       algo.Params
	e       *entry
	freshAt int64
	st      algo.State
}

// before reports whether the entry of a, whose key is ak, is locked before
// b's (key bk): by hash, then key.
func (a *part) before(ak string, b *part, bk string) bool {
	if a.h != b.h {
		return a.h < b.h
	}
	return ak < bk
}

// takeAll makes one decision for the composite of checked parts ps at
// time now (µs since the epoch), writing it into *acc, which must be zero,
// and each part's into ps[i].Decision (see model.TakeEach for what a part
// reports). A part with headroom steps as algo.StepHeadroom. The entries
// of all parts are locked together, in one order (by hash, then key), so
// the decision is atomic; a part that spends nothing on a key without an
// entry steps a fresh state and stores nothing. Composites of up to 4
// parts allocate nothing. veto adds a part that refuses (a hold that does
// not fit: see holdAll), whose figures the caller folds in: the parts then
// spend nothing and report as in a refusal.
//
// It reads the parts' keys where they are, and stores none of them
// through a pointer: the compiler would then move the caller's parts to
// the heap.
func (s *Store) takeAll(ps []store.Part, maxDelay, now int64, acc *algo.Decision, veto bool) error {
	if err := algo.CheckTime(now); err != nil {
		return err // wraps store.ErrInvalidTime
	}
	if len(ps) == 0 {
		return nil
	}
	var partBuf [4]part
	var orderBuf [4]int
	var eachBuf [4]algo.Decision
	parts, order, each := partBuf[:0], orderBuf[:0], eachBuf[:0]
	if len(ps) > len(partBuf) {
		parts, order, each = make([]part, 0, len(ps)), make([]int, 0, len(ps)), make([]algo.Decision, 0, len(ps))
	}
	each = each[:len(ps)]
	parts, order = s.locateParts(ps, parts, order)
	s.lockParts(parts, order, ps, now)
	s.stepParts(parts, ps, maxDelay, now, acc, each)
	if veto {
		acc.Allowed = false
	}
	if acc.Allowed {
		for i := range parts {
			if pt := &parts[i]; ps[i].Cost > 0 {
				pt.e.st = pt.st
				pt.e.freshAt = pt.freshAt
			}
		}
	} else {
		refusedParts(parts, ps, maxDelay, now, acc, each)
	}
	unlockParts(parts, order)
	for i := range ps {
		storelink.SetDecision(&ps[i].Decision, &each[i])
	}
	return nil
}

// locateParts fills parts (empty, with room for ps) with the limit, shard
// and hash of each of ps, and order with their indexes in the order their
// entries are locked (by hash, then key).
func (s *Store) locateParts(ps []store.Part, parts []part, order []int) ([]part, []int) {
	for i := range ps {
		parts = parts[:i+1] // its buffer is zero: set the fields, copy no part
		pt := &parts[i]
		storelink.SetParams(&pt.p, &ps[i].Limit)
		pt.sh, pt.h = s.locate(ps[i].Key)
		// Insertion sort of the lock order: composites are small.
		j := len(order)
		order = append(order, i)
		for ; j > 0 && pt.before(ps[i].Key, &parts[order[j-1]], ps[order[j-1]].Key); j-- {
			order[j] = order[j-1]
		}
		order[j] = i
	}
	return parts, order
}

// stepParts steps every part on a copy of its state, kept only if all
// grant, writing each's decision into each[i] and their fold into acc.
func (s *Store) stepParts(parts []part, ps []store.Part, maxDelay, now int64, acc *algo.Decision, each []algo.Decision) {
	for i := range parts {
		pt := &parts[i]
		if pt.e != nil {
			pt.st = pt.e.st
			if pt.st.Log != nil {
				pt.st.Log = slices.Clone(pt.st.Log)
			}
		}
		d := &each[i]
		algo.StepHeadroom(&pt.p, &pt.st, now, ps[i].Cost, ps[i].Headroom, maxDelay, d)
		pt.freshAt = d.FreshAt
		if i == 0 {
			*acc = *d
		} else {
			algo.Combine(acc, *d)
		}
	}
}

// refusedParts makes acc and each describe the parts as they are, since
// nothing was spent: a look at each.
func refusedParts(parts []part, ps []store.Part, maxDelay, now int64, acc *algo.Decision, each []algo.Decision) {
	var lookBuf [4]algo.Decision
	looks := lookBuf[:0]
	for i := range parts {
		var st algo.State
		if e := parts[i].e; e != nil {
			st = e.st
		}
		var d algo.Decision
		algo.StepHeadroom(&parts[i].p, &st, now, 0, ps[i].Headroom, maxDelay, &d)
		looks = append(looks, d)
		algo.RefusedPart(&each[i], &d)
	}
	algo.Refused(acc, looks)
}

// lockParts locks the entries of the parts in order (sorted by hash and
// key), each distinct key once, creating those of the parts that spend. It
// holds no entry lock while it takes a shard's lock, the order sweeps and
// inserts take them in; an entry found dead after all are locked makes it
// start again.
func (s *Store) lockParts(parts []part, order []int, ps []store.Part, now int64) {
	for {
		// Entries first, without entry locks.
		for _, i := range order {
			pt := &parts[i]
			pt.e = pt.sh.get(pt.h, ps[i].Key)
			if pt.e == nil && ps[i].Cost > 0 {
				pt.sh.mu.Lock()
				pt.e = pt.sh.getOrInsert(pt.h, ps[i].Key, now)
				pt.sh.mu.Unlock()
			}
		}
		// Parts on one key share its entry: the first that found one.
		for j := 1; j < len(order); j++ {
			if a, b := &parts[order[j-1]], &parts[order[j]]; ps[order[j]].Key == ps[order[j-1]].Key && a.e != nil {
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
