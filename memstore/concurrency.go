package memstore

import (
	"context"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/internal/storelink"
)

// leaseShard holds the lease sets of the keys whose hash picks it, under
// one lock: a lease operation is a map lookup and a step over a few leases,
// shorter than the lock-free table's machinery would be worth. Padded to a
// cache line of its own.
type leaseShard struct {
	mu      entryLock
	sets    map[string]*leaseSet
	sweepAt int // sweep on the insert that brings the sets to this
	_       [40]byte
}

// leaseSet is one key's leases, sorted by expiry (algo.LeaseStep's state),
// and the time (µs) from which none is held. A set emptied by releases
// stays until a sweep finds it fresh: the next acquire on the key then
// reuses its array and allocates nothing.
type leaseSet struct {
	held    []algo.Lease
	freshAt int64
}

var (
	_ storelink.Leaser     = (*engine)(nil)
	_ storelink.LeaseLocal = (*engine)(nil)
)

// LeaseLocal is Lease for the Limiter's hot path: scalars in and out, no
// LeaseOp or LeaseResult to build and copy.
func (e *engine) LeaseLocal(op int64, key string, c algo.Concurrency, units, id int64) (allowed bool, remaining, retryAfter, resetAfter, expiry int64, err error) {
	s := e.store()
	var d algo.Decision
	expiry, err = s.leaseStep(op, key, &c, units, id, s.now(), &d)
	return d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter, expiry, err
}

// Lease runs op at the store's clock time.
func (e *engine) Lease(_ context.Context, op storelink.LeaseOp) (storelink.LeaseResult, error) {
	s := e.store()
	return s.lease(&op, s.now())
}

// LeaseAt runs op at now (µs since the epoch).
func (e *engine) LeaseAt(_ context.Context, op storelink.LeaseOp, now int64) (storelink.LeaseResult, error) {
	return e.store().lease(&op, now)
}

// lease runs one checked lease operation at now.
func (s *Store) lease(op *storelink.LeaseOp, now int64) (storelink.LeaseResult, error) {
	var r storelink.LeaseResult
	exp, err := s.leaseStep(op.Op, op.Key, &op.Limit, op.Units, op.ID, now, &r.Decision)
	if err != nil {
		return storelink.LeaseResult{}, err
	}
	r.Expiry = exp
	return r, nil
}

// leaseStep runs one checked lease operation at now under its shard's
// lock, writing the decision into *d (zero).
func (s *Store) leaseStep(op int64, key string, c *algo.Concurrency, units, id, now int64, d *algo.Decision) (int64, error) {
	if err := algo.CheckTime(now); err != nil {
		return 0, err // wraps sluice.ErrInvalidTime
	}
	sh := &s.leases[(hashOf(s.seed, key)>>40)&s.mask]
	sh.mu.Lock()
	set := sh.sets[key]
	if set == nil {
		if op != algo.OpAcquire || units == 0 {
			sh.mu.Unlock()
			// Nothing is held: the step's figures on the fresh state, which
			// a release, an extension or a query leaves as it is.
			var none []algo.Lease
			return algo.LeaseStep(c, &none, op, now, units, id, d)
		}
		set = sh.insert(key, now)
	}
	exp, err := algo.LeaseStep(c, &set.held, op, now, units, id, d)
	set.freshAt = d.FreshAt
	sh.mu.Unlock()
	return exp, err
}

// insert adds key's empty lease set (sh.mu held), first dropping the sets
// that hold nothing at now once the shard has doubled since its last
// sweep, as the rate tables do.
func (sh *leaseShard) insert(key string, now int64) *leaseSet {
	if sh.sets == nil {
		sh.sets = make(map[string]*leaseSet)
	}
	if len(sh.sets)+1 >= sh.sweepAt {
		for k, set := range sh.sets {
			if set.freshAt <= now {
				delete(sh.sets, k)
			}
		}
		sh.sweepAt = max(minSweep, 2*(len(sh.sets)+1))
	}
	set := &leaseSet{}
	sh.sets[key] = set
	return set
}

// sweepLeases drops the lease sets that hold nothing at now.
func (s *Store) sweepLeases(now int64) {
	for i := range s.leases {
		sh := &s.leases[i]
		sh.mu.Lock()
		for k, set := range sh.sets {
			if set.freshAt <= now {
				delete(sh.sets, k)
			}
		}
		sh.mu.Unlock()
	}
}

// leaseKeys is the number of keys whose lease sets are kept.
func (s *Store) leaseKeys() int {
	n := 0
	for i := range s.leases {
		sh := &s.leases[i]
		sh.mu.Lock()
		n += len(sh.sets)
		sh.mu.Unlock()
	}
	return n
}

// LeaseAll runs the acquire op with the rate parts reqs at the store's
// clock time.
func (e *engine) LeaseAll(_ context.Context, op storelink.LeaseOp, reqs []storelink.Request, each []algo.Decision) (storelink.LeaseResult, error) {
	s := e.store()
	return s.leaseAll(&op, reqs, s.now(), each)
}

// LeaseAllAt runs the acquire op with the rate parts reqs at now.
func (e *engine) LeaseAllAt(_ context.Context, op storelink.LeaseOp, reqs []storelink.Request, now int64, each []algo.Decision) (storelink.LeaseResult, error) {
	return e.store().leaseAll(&op, reqs, now, each)
}

// leaseAll decides a lease and rate parts as one: under the lease shard's
// lock (taken before any entry lock, which no rate decision holds while it
// takes a lease lock), the lease is acquired; the parts are then decided
// together, refused outright when the lease did not fit, and the lease is
// given back when they refuse. A lease shard's lock covers every acquire
// of the key, so no one sees the lease in between.
func (s *Store) leaseAll(op *storelink.LeaseOp, reqs []storelink.Request, now int64, each []algo.Decision) (storelink.LeaseResult, error) {
	var r storelink.LeaseResult
	if err := algo.CheckTime(now); err != nil {
		return r, err
	}
	sh := &s.leases[(hashOf(s.seed, op.Key)>>40)&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	set := sh.sets[op.Key]
	if set == nil {
		set = sh.insert(op.Key, now)
	}
	d := &r.Decision
	exp, err := algo.LeaseStep(&op.Limit, &set.held, algo.OpAcquire, now, op.Units, op.ID, d)
	if err != nil {
		return storelink.LeaseResult{}, err
	}
	var acc algo.Decision
	if err := s.takeAllUnless(reqs, now, &acc, each, !d.Allowed); err != nil {
		if exp > 0 {
			algo.LeaseStep(&op.Limit, &set.held, algo.OpRelease, now, 0, op.ID, d)
		}
		return storelink.LeaseResult{}, err
	}
	if len(reqs) > 0 && !acc.Allowed && d.Allowed {
		// The parts refused: the lease is given back, and reports a look
		// (a query) that says it alone would have granted.
		if exp > 0 {
			algo.LeaseStep(&op.Limit, &set.held, algo.OpRelease, now, 0, op.ID, d)
		}
		*d = algo.Decision{}
		algo.LeaseStep(&op.Limit, &set.held, algo.OpAcquire, now, 0, op.ID, d)
		exp = 0
	}
	set.freshAt = d.FreshAt
	r.Expiry = exp
	return r, nil
}
