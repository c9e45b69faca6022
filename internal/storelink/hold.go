package storelink

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-go/sluice/internal/algo"
)

// ErrNoLeases is the error of a hold operation on a store that holds no
// concurrency limits (a sluice.Store from outside this module): it wraps
// errors.ErrUnsupported.
var ErrNoLeases = fmt.Errorf("sluice: the store holds no concurrency limits: %w", errors.ErrUnsupported)

// HoldOp is one checked hold operation (algo.HoldStep's): Op is
// algo.OpAcquire, OpRelease or OpExtend; Limit is valid (a release reads
// only its Limit, for the figures; an extend its Lifetime too); Key is not
// empty; 0 ≤ Units ≤ Limit.Limit; 1 ≤ ID ≤ algo.MaxHoldID. Degraded marks
// a release or extension of a hold that a failure policy granted: the
// store sends it where that hold is (nowhere for FailOpen's, its local
// store for FailLocal's).
type HoldOp struct {
	Op       int64
	Key      string
	Limit    algo.Concurrency
	Units    int64
	ID       int64
	Degraded bool
}

// HoldResult is a hold operation's answer: the step's decision, the
// hold's expiry (µs, by the store's clock) when an acquire or extension
// was allowed, and whether a failure policy made it.
type HoldResult struct {
	Decision algo.Decision
	Expiry   int64
	Degraded bool
}

// Holder is the side of an Engine that holds concurrency limits: memstore's
// and redisstore's engines implement it. Its arguments and results pass by
// value, so that an acquire and a release in memory allocate nothing.
type Holder interface {
	// Hold runs op at the store's time, under the store's failure policy.
	Hold(ctx context.Context, op HoldOp) (HoldResult, error)
	// HoldAt runs op at now (µs since the epoch), with no failure policy.
	HoldAt(ctx context.Context, op HoldOp, now int64) (HoldResult, error)
	// HoldAll runs the acquire op together with the rate parts reqs, at
	// the store's time and under its failure policy: all pass or none
	// (SEMANTICS.md, "Concurrency limits"). It returns the hold part's
	// result and writes each part's decision into each[i] (each as long
	// as reqs), as TakeEach reports them.
	HoldAll(ctx context.Context, op HoldOp, reqs []Request, each []algo.Decision) (HoldResult, error)
	// HoldAllAt is HoldAll at now, with no failure policy.
	HoldAllAt(ctx context.Context, op HoldOp, reqs []Request, now int64, each []algo.Decision) (HoldResult, error)
}

// CheckHold checks a hold operation as a Limiter does (see HoldOp).
func CheckHold(op *HoldOp) error {
	switch {
	case op.Op < algo.OpAcquire || op.Op > algo.OpExtend:
		return fmt.Errorf("%w: unknown lease operation %d", ErrInvalidLimit, op.Op)
	case op.ID < 1 || op.ID > algo.MaxHoldID:
		return fmt.Errorf("%w: lease id %d outside [1, 2^53)", ErrInvalidCost, op.ID)
	}
	if err := op.Limit.Validate(); err != nil {
		return err
	}
	return CheckUnits(op.Key, op.Limit.Limit, op.Units)
}

// CheckUnits checks a hold's key and units under a valid limit: a key
// not empty, 0 ≤ units ≤ limit.
func CheckUnits(key string, limit, units int64) error {
	if key != "" && uint64(units) <= uint64(limit) { // inlined where a lease is taken
		return nil
	}
	return badUnits(key, limit, units)
}

// badUnits is CheckUnits's error.
func badUnits(key string, limit, units int64) error {
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

// HoldLocal is the fast path of a Holder that decides in process
// (memstore's), as Local is for rates: its arguments and results fit in
// registers, where a HoldOp and a HoldResult would be copied through
// memory at every call. It runs op (algo.OpAcquire, ...) at the store's
// time; allowed, remaining, retryAfter and resetAfter are the decision's,
// expiry is HoldResult's.
type HoldLocal interface {
	HoldLocal(op int64, key string, c algo.Concurrency, units, id int64) (allowed bool, remaining, retryAfter, resetAfter, expiry int64, err error)
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
