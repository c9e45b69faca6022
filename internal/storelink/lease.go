package storelink

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-go/sluice/algo"
)

// ErrNoLeases is the error of a lease operation on a store that holds no
// concurrency limits (a sluice.Store from outside this module): it wraps
// errors.ErrUnsupported.
var ErrNoLeases = fmt.Errorf("sluice: the store holds no concurrency limits: %w", errors.ErrUnsupported)

// LeaseOp is one checked lease operation (algo.LeaseStep's): Op is
// algo.OpAcquire, OpRelease or OpExtend; Limit is valid (a release reads
// only its Limit, for the figures; an extend its Lifetime too); Key is not
// empty; 0 ≤ Units ≤ Limit.Limit; 1 ≤ ID ≤ algo.MaxLeaseID. Degraded marks
// a release or extension of a lease that a failure policy granted: the
// store sends it where that lease is (nowhere for FailOpen's, its local
// store for FailLocal's).
type LeaseOp struct {
	Op       int64
	Key      string
	Limit    algo.Concurrency
	Units    int64
	ID       int64
	Degraded bool
}

// LeaseResult is a lease operation's answer: the step's decision, the
// lease's expiry (µs, by the store's clock) when an acquire or extension
// was allowed, and whether a failure policy made it.
type LeaseResult struct {
	Decision algo.Decision
	Expiry   int64
	Degraded bool
}

// Leaser is the side of an Engine that holds concurrency limits: memstore's
// and redisstore's engines implement it. Its arguments and results pass by
// value, so that an acquire and a release in memory allocate nothing.
type Leaser interface {
	// Lease runs op at the store's time, under the store's failure policy.
	Lease(ctx context.Context, op LeaseOp) (LeaseResult, error)
	// LeaseAt runs op at now (µs since the epoch), with no failure policy.
	LeaseAt(ctx context.Context, op LeaseOp, now int64) (LeaseResult, error)
	// LeaseAll runs the acquire op together with the rate parts reqs, at
	// the store's time and under its failure policy: all pass or none
	// (SEMANTICS.md, "Concurrency limits"). It returns the lease part's
	// result and writes each part's decision into each[i] (each as long
	// as reqs), as TakeEach reports them.
	LeaseAll(ctx context.Context, op LeaseOp, reqs []Request, each []algo.Decision) (LeaseResult, error)
	// LeaseAllAt is LeaseAll at now, with no failure policy.
	LeaseAllAt(ctx context.Context, op LeaseOp, reqs []Request, now int64, each []algo.Decision) (LeaseResult, error)
}

// ErrLeaseCrossSlot is the error of a composite of a lease and rate parts
// whose keys a Redis Cluster keeps in different slots: no script sees them
// all, and a lease held while the parts are taken in turn would refuse
// others for nothing. Give the keys a {hash tag}.
var ErrLeaseCrossSlot = errors.New("sluice: a composite with a lease needs its keys in one cluster slot (give them a {hash tag})")

// CheckLease checks a lease operation as a Limiter does (see LeaseOp).
func CheckLease(op *LeaseOp) error {
	switch {
	case op.Op < algo.OpAcquire || op.Op > algo.OpExtend:
		return fmt.Errorf("%w: unknown lease operation %d", ErrInvalidLimit, op.Op)
	case op.ID < 1 || op.ID > algo.MaxLeaseID:
		return fmt.Errorf("%w: lease id %d outside [1, 2^53)", ErrInvalidCost, op.ID)
	}
	if err := op.Limit.Validate(); err != nil {
		return err
	}
	return CheckUnits(op.Key, op.Limit.Limit, op.Units)
}

// CheckUnits checks a lease's key and units under a valid limit: a key
// not empty, 0 ≤ units ≤ limit.
func CheckUnits(key string, limit, units int64) error {
	switch {
	case key == "":
		return ErrEmptyKey
	case units < 0:
		return fmt.Errorf("%w: %d is negative", ErrInvalidCost, units)
	case units > limit:
		return fmt.Errorf("%w: %d units, concurrency limit %d", ErrCostExceedsCapacity, units, limit)
	}
	return nil
}

// LeaseLocal is the fast path of a Leaser that decides in process
// (memstore's), as Local is for rates: its arguments and results fit in
// registers, where a LeaseOp and a LeaseResult would be copied through
// memory at every call. It runs op (algo.OpAcquire, ...) at the store's
// time; allowed, remaining, retryAfter and resetAfter are the decision's,
// expiry is LeaseResult's.
type LeaseLocal interface {
	LeaseLocal(op int64, key string, c algo.Concurrency, units, id int64) (allowed bool, remaining, retryAfter, resetAfter, expiry int64, err error)
}

// Reserver is the side of an Engine that decides requests of a class that
// must leave units for higher classes (algo.StepReserving): memstore's and
// redisstore's engines implement it.
type Reserver interface {
	// TakeReserving decides req leaving reserve units, at the store's time
	// and under its failure policy.
	TakeReserving(ctx context.Context, req Request, reserve int64) (Result, error)
	// TakeReservingAt is TakeReserving at now, with no failure policy.
	TakeReservingAt(ctx context.Context, req Request, reserve, now int64) (algo.Decision, error)
}
