package sluice

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
)

// DefaultLifetime is the lifetime of a lease whose Concurrency names none:
// long enough for an expensive request, short enough that the slots of a
// process that died come back within the minute.
const DefaultLifetime = time.Minute

// ErrNoLeases is returned by Acquire, Release and Extend over a store that
// holds no concurrency limits (a Store from outside this module). It wraps
// errors.ErrUnsupported.
var ErrNoLeases = storelink.ErrNoLeases

// Concurrency is a concurrency limit: at most Limit units held at once per
// key, by leases (Acquire). A lease that is not released comes back by
// itself Lifetime after it was acquired or last extended, never before: the
// slots of a holder that died or hung are not lost. A Lifetime of 0 is
// DefaultLifetime. Like a Limit, it travels with each call.
//
// Reserve keeps units for requests of a higher class (reserved capacity,
// as Stripe's load shedders keep it for critical traffic): a request under
// a Concurrency with Reserve R passes only if R units are still free after
// it, while one with Reserve 0 may use the whole Limit. Give the classes
// of one key the same Limit and their own Reserve: a lower class is
// refused once the key's leases pass its share, a higher one uses
// everything. Its Remaining and RetryAfter are its class's.
type Concurrency struct {
	Limit    int64
	Lifetime time.Duration
	Reserve  int64
}

// MaxConcurrent returns a concurrency limit of n units held at once, with
// the default lifetime.
func MaxConcurrent(n int64) Concurrency { return Concurrency{Limit: n} }

// WithLifetime returns c with its leases' lifetime set to d.
func (c Concurrency) WithLifetime(d time.Duration) Concurrency { c.Lifetime = d; return c }

// Reserving returns c keeping units for higher classes (see Reserve).
func (c Concurrency) Reserving(units int64) Concurrency { c.Reserve = units; return c }

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
	// A class with a reserve is the limit less the reserve on the same
	// key: the leases held count alike for every class, and a lowered
	// limit keeps them all (SEMANTICS.md), so that is exact.
	p := algo.Concurrency{Limit: c.Limit - c.Reserve, Lifetime: d.Microseconds()}
	if c.Limit > 0 && uint64(c.Reserve) < uint64(c.Limit) && d%time.Microsecond == 0 && p.Validate() == nil {
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
	if c.Reserve < 0 || c.Reserve >= c.Limit {
		return fmt.Errorf("%w: a reserve of %d out of a limit of %d (want 0 ≤ reserve < limit)", ErrInvalidLimit, c.Reserve, c.Limit)
	}
	return algo.Concurrency{Limit: c.Limit - c.Reserve, Lifetime: d.Microseconds()}.Validate()
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
func (l *Limiter) Acquire(ctx context.Context, key string, c Concurrency, units int64) (ls Lease, err error) {
	p, err := c.params()
	if err == nil {
		err = storelink.CheckUnits(key, p.Limit, units)
	}
	if err != nil {
		return Lease{}, err
	}
	ls.Key, ls.Limit, ls.Units = key, c, units
	for range holdTries {
		// 53 random bits (MaxHoldID's), 0 read as 1: a shift is cheaper
		// than Int64N's bounded draw, here a tenth of the acquire.
		id := max(1, int64(rand.Uint64()>>11))
		var allowed, degraded bool
		var remaining, retry, reset, expiry int64
		if l.holdLocal != nil {
			// Scalars through the interface: a HoldOp and a HoldResult
			// would be copied through memory at every call.
			allowed, remaining, retry, reset, expiry, err = l.holdLocal.HoldLocal(algo.OpAcquire, key, p, units, id)
		} else {
			var r storelink.HoldResult
			r, err = l.lease(ctx, &storelink.HoldOp{Op: algo.OpAcquire, Key: key, Limit: p, Units: units, ID: id})
			allowed, remaining, retry, reset, expiry, degraded = r.Decision.Allowed, r.Decision.Remaining, r.Decision.RetryAfter, r.Decision.ResetAfter, r.Expiry, r.Degraded
		}
		if err != nil {
			if errors.Is(err, algo.ErrHoldID) {
				continue
			}
			return Lease{}, err
		}
		if expiry <= 0 { // nothing held: refused, a query, or FailOpen's grant
			id = 0
		}
		ls.Allowed, ls.Remaining, ls.RetryAfter, ls.ResetAfter, ls.Degraded = allowed, remaining, storelink.Duration(retry), storelink.Duration(reset), degraded
		ls.ID, ls.Expiry = id, expiry
		return ls, nil
	}
	return Lease{}, fmt.Errorf("%w: %d draws", algo.ErrHoldID, holdTries)
}

// Release gives a lease back. The Result's Allowed reports that the lease
// was still held (false: it had come back by itself, or was released
// already); Remaining and ResetAfter are the key's after it. Releasing a
// lease that holds nothing (refused, or a query) does nothing.
func (l *Limiter) Release(ctx context.Context, lease Lease) (Result, error) {
	return l.holdOp(ctx, algo.OpRelease, &lease, 0)
}

// Extend makes a lease still held come back by itself lifetime from now (0:
// its Concurrency's lifetime) instead of when it would have; a long request
// calls it before its lease runs out. The Lease returned has the new
// Expiry; its Allowed is false when the lease had come back already: its
// units may be held by another, and the work no longer holds a slot.
func (l *Limiter) Extend(ctx context.Context, lease Lease, lifetime time.Duration) (Lease, error) {
	r, err := l.holdOp(ctx, algo.OpExtend, &lease, lifetime)
	if err != nil {
		return Lease{}, err
	}
	lease.Result = r
	if !r.Allowed {
		lease.ID, lease.Expiry = 0, 0
	}
	return lease, nil
}

// holdOp releases or extends lease (by lifetime, 0: its own).
func (l *Limiter) holdOp(ctx context.Context, op int64, lease *Lease, lifetime time.Duration) (res Result, err error) {
	c := lease.Limit
	if lifetime != 0 {
		c.Lifetime = lifetime
	}
	p, err := c.params()
	if err == nil {
		err = storelink.CheckUnits(lease.Key, p.Limit, 0)
	}
	if err != nil {
		return Result{}, err
	}
	if lease.ID == 0 {
		// Nothing held, or FailOpen's grant: nothing to give back.
		return Result{Degraded: lease.Degraded}, nil
	}
	var retry, reset, exp int64
	if l.holdLocal != nil && !lease.Degraded {
		res.Allowed, res.Remaining, retry, reset, exp, err = l.holdLocal.HoldLocal(op, lease.Key, p, 0, lease.ID)
	} else {
		var r storelink.HoldResult
		r, err = l.lease(ctx, &storelink.HoldOp{Op: op, Key: lease.Key, Limit: p, ID: lease.ID, Degraded: lease.Degraded})
		res.Allowed, res.Remaining, retry, reset, exp, res.Degraded = r.Decision.Allowed, r.Decision.Remaining, r.Decision.RetryAfter, r.Decision.ResetAfter, r.Expiry, r.Degraded
	}
	if err != nil {
		return Result{}, err
	}
	res.RetryAfter, res.ResetAfter = storelink.Duration(retry), storelink.Duration(reset)
	if op == algo.OpExtend {
		lease.Expiry = exp
	}
	return res, nil
}

// lease checks op and runs it on the store.
func (l *Limiter) lease(ctx context.Context, op *storelink.HoldOp) (storelink.HoldResult, error) {
	if err := storelink.CheckHold(op); err != nil {
		return storelink.HoldResult{}, err
	}
	if l.holder == nil {
		return storelink.HoldResult{}, l.noHolds()
	}
	return l.holder.Hold(ctx, *op)
}

// AcquireAll asks for a lease of units on key under c together with the
// rate parts (a request that takes a slot and a unit of a per-minute
// budget): the lease is held and every part spends its cost only if all
// grant; a refusal holds nothing and spends nothing. The Lease's Result is
// the composite's, as TakeAll's: admitted, Remaining the smallest of the
// lease's and the parts' after spending, ResetAfter and Delay the largest;
// refused, the figures of a look at each (the lease's a query), and
// RetryAfter the largest of the refusing parts'. A key of the lease may
// also name a rate part: they are two states. A part's Reserve keeps its
// units for higher classes as in TakeAll, and c's Reserve the lease's.
//
// Over a Redis Cluster, keys in one slot (a {hash tag}) are decided in one
// script, atomically; keys in different slots are taken in turn, the
// lease first, and what was taken is given back when a part refuses or
// fails (see redisstore's TakeAll and SEMANTICS.md, "A lease in a
// composite"): never more than c.Limit held, and a refusal holds and
// spends nothing once the give-back is done.
func (l *Limiter) AcquireAll(ctx context.Context, key string, c Concurrency, units int64, parts []Part) (Lease, error) {
	if len(parts) == 0 {
		return l.Acquire(ctx, key, c, units)
	}
	p, err := c.params()
	if err != nil {
		return Lease{}, err
	}
	reqs, err := l.appendRequests(make([]storelink.Request, 0, len(parts)), parts)
	if err != nil {
		return Lease{}, err
	}
	op := storelink.HoldOp{Op: algo.OpAcquire, Key: key, Limit: p, Units: units}
	each := make([]algo.Decision, len(reqs))
	for range holdTries {
		op.ID = 1 + rand.Int64N(algo.MaxHoldID)
		if err := storelink.CheckHold(&op); err != nil {
			return Lease{}, err
		}
		if l.holder == nil {
			return Lease{}, l.noHolds()
		}
		r, err := l.holder.HoldAll(ctx, op, reqs, each)
		if errors.Is(err, algo.ErrHoldID) {
			continue
		}
		if err != nil {
			return Lease{}, err
		}
		// The fold of the parts' figures, which report as TakeEach's do:
		// refused, only the refusing ones carry a RetryAfter.
		sum := r.Decision
		for i := range each {
			algo.Combine(&sum, each[i])
		}
		ls := Lease{Result: Result(storelink.ResultOf(&sum)), Key: key, Limit: c, Units: units, Expiry: r.Expiry}
		ls.Degraded = r.Degraded
		if r.Expiry > 0 {
			ls.ID = op.ID
		}
		return ls, nil
	}
	return Lease{}, fmt.Errorf("%w: %d draws", algo.ErrHoldID, holdTries)
}

// noHolds is the error of a lease operation on a Limiter whose store
// holds no leases.
func (l *Limiter) noHolds() error {
	if l.eng == nil {
		return errNoStore
	}
	return ErrNoLeases
}
