package sluice

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/store"
)

// DefaultLifetime is the lifetime of a lease whose Concurrency names none:
// long enough for an expensive request, short enough that the slots of a
// process that died come back within the minute.
const DefaultLifetime = time.Minute

// Concurrency is a concurrency limit: at most Limit units held at once per
// key, by leases (Acquire). A lease that is not released comes back by
// itself Lifetime after it was acquired or last extended, never before: the
// slots of a holder that died or hung are not lost. A Lifetime of 0 is
// DefaultLifetime. Like a Limit, it travels with each call.
//
// Headroom keeps units for requests of a higher class (as Stripe's load
// shedders keep capacity for critical traffic): a request under a
// Concurrency with Headroom H passes only if H units are still free after
// it, while one with Headroom 0 may use the whole Limit. Give the classes
// of one key the same Limit and their own Headroom: a lower class is
// refused once the key's leases pass its share, a higher one uses
// everything. Its Remaining and RetryAfter are its class's.
type Concurrency struct {
	Limit    int64
	Lifetime time.Duration
	Headroom int64
}

// MaxConcurrent returns a concurrency limit of n units held at once, with
// the default lifetime.
func MaxConcurrent(n int64) Concurrency { return Concurrency{Limit: n} }

// WithLifetime returns c with its leases' lifetime set to d.
func (c Concurrency) WithLifetime(d time.Duration) Concurrency { c.Lifetime = d; return c }

// WithHeadroom returns c keeping units for higher classes (see Headroom).
func (c Concurrency) WithHeadroom(units int64) Concurrency { c.Headroom = units; return c }

// Validate reports why c cannot be used (an error wrapping
// ErrInvalidLimit), or nil.
func (c Concurrency) Validate() error {
	_, err := c.params()
	return err
}

// params returns c as algo takes it.
func (c Concurrency) params() (algo.Concurrency, error) {
	d := c.Lifetime
	if d == 0 {
		d = DefaultLifetime
	}
	// A class with headroom is the limit less the headroom on the same
	// key: the leases held count alike for every class, and a lowered
	// limit keeps them all (SEMANTICS.md), so that is exact.
	p := algo.Concurrency{Limit: c.Limit - c.Headroom, Lifetime: d.Microseconds()}
	if c.Limit > 0 && uint64(c.Headroom) < uint64(c.Limit) && d%time.Microsecond == 0 && p.Validate() == nil {
		return p, nil // the valid case, inlined where a lease is taken
	}
	return algo.Concurrency{}, c.invalid(d)
}

// invalid is params's error for c, whose lifetime (its default put in) is
// d.
func (c Concurrency) invalid(d time.Duration) error {
	if d < time.Microsecond || d%time.Microsecond != 0 {
		return fmt.Errorf("%w: lease lifetime %v is not a whole number of microseconds (at least 1µs)", ErrInvalidLimit, d)
	}
	if c.Limit <= 0 {
		return algo.Concurrency{Limit: c.Limit, Lifetime: d.Microseconds()}.Validate()
	}
	if c.Headroom < 0 || c.Headroom >= c.Limit {
		return fmt.Errorf("%w: a headroom of %d out of a limit of %d (want 0 ≤ headroom < limit)", ErrInvalidLimit, c.Headroom, c.Limit)
	}
	return algo.Concurrency{Limit: c.Limit - c.Headroom, Lifetime: d.Microseconds()}.Validate()
}

// Lease is the answer to Acquire. Allowed reports that the lease is held:
// release it (Release) when the work is done. Refused, it holds nothing and
// RetryAfter is what can honestly be said about when to retry: the wait
// until enough held leases reach the end of their lifetime, were none
// released or extended (releases make the real wait shorter, extensions
// longer). Remaining is the units that could still be acquired after this
// answer, ResetAfter the wait until the last lease held comes back by
// itself. Degraded reports a lease a failure policy granted.
type Lease struct {
	Result
	// Key and Limit are those of the Acquire; ID names the lease among the
	// key's (0 when none is held: refused, a query of 0 units, or FailOpen's
	// grant).
	Key   string
	Limit Concurrency
	Units int64
	ID    int64
	// Expiry is when the lease comes back by itself: µs since the Unix
	// epoch by the store's clock (Redis's TIME, unless the store was given
	// the caller's).
	Expiry int64
}

// holdTries bounds the ids an Acquire draws: a second is needed only when
// the first is held by another lease of the key (a chance of one in 2^53
// per lease held).
const holdTries = 4

// Acquire asks for a lease of units on key under c, and holds it if the
// units held on key plus units are at most c.Limit. Units 0 only looks.
// Units over c.Limit is an error (ErrCostExceedsCapacity), not a refusal.
//
// With parts, the lease is taken only if every part also grants its cost
// (a request counted against a rate limit as it starts), atomically: the
// parts spend only with the lease held, and a refusal, of the lease or of
// a part, spends and holds nothing. The Lease's Result is then the fold of
// the lease's and the parts' (as TakeAll's summary).
func (l *Limiter) Acquire(ctx context.Context, key string, c Concurrency, units int64, parts ...Part) (Lease, error) {
	p, err := c.params()
	if err == nil {
		err = storelink.CheckUnits(key, p.Limit, units)
	}
	if err != nil {
		return Lease{}, err
	}
	var ps []store.Part
	if len(parts) > 0 { // no part is a plain hold, not an empty composite
		var buf *[4]store.Part
		ps, buf = partsOf(len(parts))
		defer putParts(buf)
		if err := l.fillParts(ps, parts, store.Take); err != nil {
			return Lease{}, err
		}
	}
	ls := Lease{Key: key, Limit: c, Units: units}
	for range holdTries {
		// 53 random bits (MaxHoldID's), 0 read as 1: a shift is cheaper
		// than Int64N's bounded draw, here a tenth of the acquire.
		id := max(1, int64(rand.Uint64()>>11))
		for i := range ps {
			ps[i].Decision = store.Decision{}
		}
		ops := [1]store.Op{{Kind: store.Acquire, Key: key, Concurrency: store.Concurrency(p), Cost: units, ID: id, Parts: ps}}
		op := &ops[0]
		l.run(ctx, ops[:])
		if err := op.Err; errors.Is(err, store.ErrIDInUse) {
			continue
		} else if err != nil {
			return Lease{}, err
		}
		setResult(&ls.Result, &op.Decision)
		if op.Expiry > 0 { // else nothing held: refused, a query, or FailOpen's grant
			ls.ID, ls.Expiry = id, op.Expiry
		}
		return ls, nil
	}
	return Lease{}, fmt.Errorf("%w: %d draws", store.ErrIDInUse, holdTries)
}

// Release gives the lease back: its units are free at once. Allowed
// reports that it was still held; false means it had come back by itself
// (its lifetime ended) or was released already. A lease that holds nothing
// (ID 0) is released at once, without asking the store.
func (l *Limiter) Release(ctx context.Context, lease Lease) (Result, error) {
	return l.holdOp(ctx, store.Release, &lease, 0)
}

// Extend renews the lease for lifetime from now (0: the lease's own, as
// Acquire gave it), for work that runs longer than planned. Allowed reports
// that it was still held and is renewed, with its new Expiry; false means
// it had come back by itself, and the work should stop or acquire again.
func (l *Limiter) Extend(ctx context.Context, lease Lease, lifetime time.Duration) (Lease, error) {
	r, err := l.holdOp(ctx, store.Extend, &lease, lifetime)
	if err != nil {
		return Lease{}, err
	}
	lease.Result = r
	if !r.Allowed {
		lease.ID, lease.Expiry = 0, 0
	}
	return lease, nil
}

// holdOp runs a Release or an Extend of lease (for lifetime, 0: the
// lease's own) and returns its answer, setting the lease's Expiry on an
// Extend.
func (l *Limiter) holdOp(ctx context.Context, kind store.Kind, lease *Lease, lifetime time.Duration) (Result, error) {
	c := lease.Limit
	if lifetime != 0 {
		c.Lifetime = lifetime
	}
	p, err := c.params()
	if err == nil {
		err = storelink.CheckUnits(lease.Key, p.Limit, 0)
	}
	if err == nil && (lease.ID < 0 || lease.ID > algo.MaxHoldID) {
		err = fmt.Errorf("%w: lease id %d outside [1, 2^53)", ErrInvalidCost, lease.ID)
	}
	if err != nil {
		return Result{}, err
	}
	if lease.ID == 0 {
		return Result{Degraded: lease.Degraded}, nil
	}
	var ops [1]store.Op
	op := &ops[0]
	op.Kind, op.Key, op.Concurrency, op.ID, op.Degraded = kind, lease.Key, store.Concurrency(p), lease.ID, lease.Degraded
	l.run(ctx, ops[:])
	var r Result
	err = answer(op, &r)
	if err == nil && kind == store.Extend {
		lease.Expiry = op.Expiry
	}
	return r, err
}
