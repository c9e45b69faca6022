package memstore

import (
	"context"
	"sync"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
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

var (
	_ storelink.Holder    = (*engine)(nil)
	_ storelink.HoldLocal = (*engine)(nil)
)

// HoldLocal is Hold for the Limiter's hot path: scalars in and out, no
// HoldOp or HoldResult to build and copy.
func (e *engine) HoldLocal(op int64, key string, c algo.Concurrency, units, id int64) (allowed bool, remaining, retryAfter, resetAfter, expiry int64, err error) {
	s := e.store()
	var d algo.Decision
	expiry, err = s.holdStep(op, key, &c, units, id, s.now(), &d)
	return d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter, expiry, err
}

// Hold runs op at the store's clock time.
func (e *engine) Hold(_ context.Context, op storelink.HoldOp) (storelink.HoldResult, error) {
	s := e.store()
	return s.hold(&op, s.now())
}

// HoldAt runs op at now (µs since the epoch).
func (e *engine) HoldAt(_ context.Context, op storelink.HoldOp, now int64) (storelink.HoldResult, error) {
	return e.store().hold(&op, now)
}

// hold runs one checked hold operation at now.
func (s *Store) hold(op *storelink.HoldOp, now int64) (storelink.HoldResult, error) {
	var r storelink.HoldResult
	exp, err := s.holdStep(op.Op, op.Key, &op.Limit, op.Units, op.ID, now, &r.Decision)
	if err != nil {
		return storelink.HoldResult{}, err
	}
	r.Expiry = exp
	return r, nil
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
	set.freshAt = d.FreshAt
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
	set := &holdSet{key: key, next: sh.sets[h]}
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

// HoldAll runs the acquire op with the rate parts reqs at the store's
// clock time.
func (e *engine) HoldAll(_ context.Context, op storelink.HoldOp, reqs []storelink.Request, each []algo.Decision) (storelink.HoldResult, error) {
	s := e.store()
	return s.holdAll(&op, reqs, s.now(), each)
}

// HoldAllAt runs the acquire op with the rate parts reqs at now.
func (e *engine) HoldAllAt(_ context.Context, op storelink.HoldOp, reqs []storelink.Request, now int64, each []algo.Decision) (storelink.HoldResult, error) {
	return e.store().holdAll(&op, reqs, now, each)
}

// holdAll decides a hold and rate parts as one: under the hold shard's
// lock (taken before any entry lock, which no rate decision holds while it
// takes a hold lock), the hold is acquired; the parts are then decided
// together, refused outright when the hold did not fit, and the hold is
// given back when they refuse. A hold shard's lock covers every acquire
// of the key, so no one sees the hold in between.
func (s *Store) holdAll(op *storelink.HoldOp, reqs []storelink.Request, now int64, each []algo.Decision) (storelink.HoldResult, error) {
	var r storelink.HoldResult
	if err := algo.CheckTime(now); err != nil {
		return r, err
	}
	sh, h := s.holdShard(op.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	set := sh.find(h, op.Key)
	if set == nil {
		set = sh.insert(h, op.Key, now)
	}
	d := &r.Decision
	exp, err := algo.HoldStep(&op.Limit, &set.held, algo.OpAcquire, now, op.Units, op.ID, d)
	if err != nil {
		return storelink.HoldResult{}, err
	}
	var acc algo.Decision
	if err := s.takeAllUnless(reqs, now, &acc, each, !d.Allowed); err != nil {
		if exp > 0 {
			algo.HoldStep(&op.Limit, &set.held, algo.OpRelease, now, 0, op.ID, d)
		}
		return storelink.HoldResult{}, err
	}
	if len(reqs) > 0 && !acc.Allowed && d.Allowed {
		// The parts refused: the hold is given back, and reports a look
		// (a query) that says it alone would have granted.
		if exp > 0 {
			algo.HoldStep(&op.Limit, &set.held, algo.OpRelease, now, 0, op.ID, d)
		}
		*d = algo.Decision{}
		algo.HoldStep(&op.Limit, &set.held, algo.OpAcquire, now, 0, op.ID, d)
		exp = 0
	}
	set.freshAt = d.FreshAt
	r.Expiry = exp
	return r, nil
}
