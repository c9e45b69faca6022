package memstore

import (
	"strings"
	"sync"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/store"
)

// holdShard holds the hold sets of the keys whose hash picks it, under
// one lock: a hold operation is a map lookup and a step that costs the
// same at any number of holds (algo.Holds), shorter than the lock-free
// table's machinery would be worth. The map is
// keyed by the key's hash, the one that picked the shard, so that an
// operation hashes its key once (a string key would be hashed again by
// the map). Padded to a cache line of its own.
type holdShard struct {
	mu      sync.Mutex
	sets    map[uint64]*holdSet
	sweepAt int // sweep on the insert that brings the sets to this
	_       [40]byte
}

// holdSet is one key's holds (algo.HoldStep's state, algo.Holds),
// and the time (µs) from which none is held. A set emptied by releases
// stays until a sweep finds it fresh: the next acquire on the key then
// reuses its array and allocates nothing. Next is the set of another key
// with the same hash (a chance of 2^-64 for two keys).
type holdSet struct {
	key     string
	held    algo.Holds
	freshAt int64
	next    *holdSet
}

// find returns the hold set of key, whose hash is h, or nil (sh.mu held).
func (sh *holdShard) find(h uint64, key string) *holdSet {
	for set := sh.sets[h]; set != nil; set = set.next {
		if set.key == key {
			return set
		}
	}
	return nil
}

// holdShard returns the shard of key's hold set and key's hash.
func (s *Store) holdShard(key string) (*holdShard, uint64) {
	h := hashOf(s.seed, key)
	return &s.holds[(h>>40)&s.mask], h
}

// holdStep runs one checked hold operation at now under its shard's
// lock, writing the decision into *d (zero).
func (s *Store) holdStep(op int64, key string, c *algo.Concurrency, units, id, now int64, d *algo.Decision) (int64, error) {
	if uint64(now) > uint64(algo.MaxTime) { // below 0 too: CheckTime's range
		return 0, algo.CheckTime(now) // wraps sluice.ErrInvalidTime
	}
	h := hashOf(s.seed, key) // holdShard's, written out: too big to inline
	sh := &s.holds[(h>>40)&s.mask]
	sh.mu.Lock()
	set := sh.find(h, key)
	if set == nil {
		if op != algo.OpAcquire || units == 0 {
			sh.mu.Unlock()
			// Nothing is held: the step's figures on the fresh state, which
			// a release, an extension or a query leaves as it is.
			var none algo.Holds
			return algo.HoldStep(c, &none, op, now, units, id, d)
		}
		set = sh.insert(h, key, now)
	}
	exp, err := algo.HoldStep(c, &set.held, op, now, units, id, d)
	if err == nil { // an id in use changed nothing, and its FreshAt is 0
		set.freshAt = d.FreshAt
	}
	sh.mu.Unlock()
	return exp, err
}

// insert adds the empty hold set of key, whose hash is h (sh.mu held),
// first dropping the sets that hold nothing at now once the shard has
// doubled since its last sweep, as the rate tables do.
func (sh *holdShard) insert(h uint64, key string, now int64) *holdSet {
	if sh.sets == nil {
		sh.sets = make(map[uint64]*holdSet)
	}
	if len(sh.sets)+1 >= sh.sweepAt {
		sh.sweep(now)
		sh.sweepAt = max(minSweep, 2*(len(sh.sets)+1))
	}
	set := &holdSet{key: strings.Clone(key), next: sh.sets[h]} // see shard.insert
	sh.sets[h] = set
	return set
}

// sweep drops the hold sets that hold nothing at now (sh.mu held).
func (sh *holdShard) sweep(now int64) {
	for h, first := range sh.sets {
		if first.next == nil { // the rule: a hash of one key
			if first.freshAt <= now {
				delete(sh.sets, h)
			}
			continue
		}
		var kept *holdSet
		for set := first; set != nil; {
			next := set.next
			if set.freshAt > now {
				set.next, kept = kept, set
			}
			set = next
		}
		if kept == nil {
			delete(sh.sets, h)
		} else {
			sh.sets[h] = kept
		}
	}
}

// drop removes the hold set of key, whose hash is h, if there is one
// (sh.mu held).
func (sh *holdShard) drop(h uint64, key string) {
	var prev *holdSet
	for set := sh.sets[h]; set != nil; prev, set = set, set.next {
		switch {
		case set.key != key:
			continue
		case prev != nil:
			prev.next = set.next
		case set.next != nil:
			sh.sets[h] = set.next
		default:
			delete(sh.sets, h)
		}
		return
	}
}

// sweepHolds drops the hold sets that hold nothing at now.
func (s *Store) sweepHolds(now int64) {
	for i := range s.holds {
		sh := &s.holds[i]
		sh.mu.Lock()
		sh.sweep(now)
		sh.mu.Unlock()
	}
}

// holdKeys is the number of keys whose hold sets are kept.
func (s *Store) holdKeys() int {
	n := 0
	for i := range s.holds {
		sh := &s.holds[i]
		sh.mu.Lock()
		for _, set := range sh.sets {
			for ; set != nil; set = set.next {
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// holdAll decides a hold and rate parts as one: under the hold shard's
// lock (taken before any entry lock, which no rate decision holds while it
// takes a hold lock), the hold is acquired; the parts are then decided
// together, refused outright when the hold did not fit, and the hold is
// given back when they refuse. A hold shard's lock covers every acquire
// of the key, so no one sees the hold in between.
func (s *Store) holdAll(key string, c *algo.Concurrency, units, id int64, ps []store.Part, maxDelay, now int64, d *algo.Decision) (int64, error) {
	if err := algo.CheckTime(now); err != nil {
		return 0, err
	}
	sh, h := s.holdShard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	set := sh.find(h, key)
	if set == nil {
		set = sh.insert(h, key, now)
	}
	exp, err := algo.HoldStep(c, &set.held, algo.OpAcquire, now, units, id, d)
	if err != nil {
		return 0, err
	}
	var acc algo.Decision
	if err := s.takeAll(ps, maxDelay, now, &acc, !d.Allowed); err != nil {
		if exp > 0 {
			algo.HoldStep(c, &set.held, algo.OpRelease, now, 0, id, d)
		}
		return 0, err
	}
	if !acc.Allowed && d.Allowed {
		// The parts refused: the hold is given back, and reports a look
		// (a query) that says it alone would have granted.
		if exp > 0 {
			algo.HoldStep(c, &set.held, algo.OpRelease, now, 0, id, d)
		}
		*d = algo.Decision{}
		algo.HoldStep(c, &set.held, algo.OpAcquire, now, 0, id, d)
		exp = 0
	}
	set.freshAt = d.FreshAt
	return exp, nil
}
