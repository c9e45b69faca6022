// Package sluice is a rate limiter: exact, fast, and the same in one process as
// on a Redis/Valkey cluster.
//
// A Limiter spends budgets kept in a store (package store's contract). Each
// call carries its Limit (rate per period, burst, algorithm), so a changed
// limit needs no migration:
//
//	lim := sluice.New(memstore.New())
//	res, err := lim.Take(ctx, "user:42", sluice.PerSecond(10).WithBurst(50), 1)
//	if err != nil { ... }          // a bad limit or cost, or a store that is gone
//	if !res.Allowed { retry after res.RetryAfter }
//
// The algorithms (token bucket, GCRA, leaky bucket as a queue, fixed window,
// aligned window, sliding window, sliding log) are pure integer steps; their
// exact semantics are in SEMANTICS.md. The stores, memstore (in process),
// redisstore (shared) and any store.Store written elsewhere, keep the state
// and make each step atomic; for the same trace they give the same
// decisions, to the microsecond (package store/storetest checks it).
//
// A Limiter is safe for concurrent use.
package sluice

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/store"
)

// Result is the answer to one request.
type Result struct {
	// Allowed reports whether the request passed (and spent its cost).
	Allowed bool
	// Remaining is how many whole units could still pass at this instant,
	// after this decision. It is negative for a key in debt (see Charge):
	// −Remaining units, rounded up, must come back before a take passes.
	Remaining int64
	// RetryAfter is, for a denied request, the smallest wait after which the
	// same request would pass with no other traffic; 0 when allowed.
	RetryAfter time.Duration
	// ResetAfter is the wait until the key is back to its fresh state with no
	// other traffic.
	ResetAfter time.Duration
	// Delay is, for an admitted LeakyBucket request, how long the caller must
	// wait before it proceeds, so that requests leave evenly spaced; 0 for the
	// other algorithms.
	Delay time.Duration
	// Degraded reports a decision made while the store was unavailable, by
	// its failure policy (fail open, or a local fallback) rather than by the
	// shared state.
	Degraded bool
	// Window names, under FixedWindow and AlignedWindow, the window the
	// decision counted in: its end, in µs since the Unix epoch by the
	// store's clock. Refund, given this Result, gives units back only
	// while the key is still in that window: units spent in a window that
	// has ended are not given to the next. It is 0 under the other
	// algorithms, where no window is open, and in a composite's summary of
	// more than one part (each part's own Result has its).
	Window int64
}

// Clock is the time a Limiter reads deadlines and sleeps by (see
// store.Clock). Tests pass a fake one to their store (memstore.WithClock),
// and a Limiter then waits by its store's clock.
type Clock = store.Clock

// Limiter makes decisions over a store. Make one with New: the zero
// Limiter has no store, and its methods return an error wrapping
// ErrStoreUnavailable.
type Limiter struct {
	st store.Store
	// mem is st when it is memstore's, which the Limiter calls directly
	// so that its ops stay on the caller's stack: the same Run, not
	// another path.
	mem *memstore.Store
	// fast is st's FastTake (memstore's): a Take of one key, now, decided
	// without an op.
	fast  storelink.FastTake
	clock Clock
	// valid remembers limits already validated, so the hot path only
	// compares: a few slots, each replaced when another limit lands in it.
	valid [8]atomic.Pointer[validLimit]
}

type validLimit struct {
	lim Limit
	p   algo.Params
}

// errNoStore is the error of a Limiter made without New.
var errNoStore = fmt.Errorf("%w: the Limiter has no store (make it with New)", ErrStoreUnavailable)

// slot is where params remembers lim.
func (l *Limiter) slot(lim *Limit) *atomic.Pointer[validLimit] {
	h := (uint64(lim.Rate)*0x9E3779B97F4A7C15 ^ uint64(lim.Period) ^ uint64(lim.Burst)<<17 ^ uint64(lim.Algorithm)<<40 ^ uint64(lim.Debt)<<29) * 0xBF58476D1CE4E5B9
	return &l.valid[h>>61]
}

// params is lim.params, remembered: the Params it returns are shared, and
// never changed. (A Params has five fields, past what the compiler keeps in
// registers: copied through memory after its fields were written one by
// one, it would stall the CPU on every call.)
func (l *Limiter) params(lim *Limit) (*algo.Params, error) {
	slot := l.slot(lim)
	if v := slot.Load(); v != nil && v.lim.same(lim) {
		return &v.p, nil
	}
	p, err := lim.params()
	if err != nil {
		return nil, err
	}
	v := &validLimit{*lim, p}
	slot.Store(v)
	return &v.p, nil
}

// partParams is params for the parts of a composite, which name several
// limits at once, written into *p: a limit that finds its slot taken by
// another is checked afresh instead of taking the slot, so that two limits
// of one composite never evict each other (and allocate) on every call.
func (l *Limiter) partParams(lim *Limit, p *algo.Params) (err error) {
	slot := l.slot(lim)
	v := slot.Load()
	if v != nil && v.lim.same(lim) {
		*p = v.p
		return nil
	}
	if *p, err = lim.params(); err == nil && v == nil {
		slot.CompareAndSwap(nil, &validLimit{*lim, *p})
	}
	return err
}

// check checks one request: the limit, the key and the cost.
func (l *Limiter) check(key string, lim *Limit, cost int64) (*algo.Params, error) {
	p, err := l.params(lim)
	if err == nil {
		err = storelink.Check(key, p, cost)
	}
	return p, err
}

// Option configures a Limiter.
type Option func(*Limiter)

// WithClock sets the clock Wait reads deadlines and sleeps by. The default
// is the clock of a store that was given one (as by memstore.WithClock),
// so that a test sets its fake clock once, on the store; otherwise it is
// the system clock.
func WithClock(c Clock) Option { return func(l *Limiter) { l.clock = c } }

// Clock returns the clock l reads deadlines and sleeps by: the one given by
// WithClock, else its store's (as set by memstore.WithClock), else the
// system clock. The middleware packages take it as their default, so a test
// sets one fake clock, on the store.
func (l *Limiter) Clock() Clock {
	if l.clock == nil {
		return storelink.SystemClock{}
	}
	return l.clock
}

// New returns a Limiter over st: memstore's, redisstore's, or any
// store.Store. A store with a method Clock() store.Clock that returns a
// clock lends it to the Limiter (see WithClock). Over a nil store, the
// Limiter's methods return an error wrapping ErrStoreUnavailable.
func New(st store.Store, opts ...Option) *Limiter {
	l := &Limiter{st: st}
	if m, ok := st.(*memstore.Store); ok && m == nil {
		l.st = nil // a nil *memstore.Store is no store, as nil is
	} else {
		l.mem = m
		l.fast = storelink.FastTakeOf(st)
	}
	for _, o := range opts {
		o(l)
	}
	if c, ok := l.st.(interface{ Clock() store.Clock }); ok && l.clock == nil {
		l.clock = c.Clock()
	}
	if l.clock == nil {
		l.clock = storelink.SystemClock{}
	}
	return l
}

// Take asks whether cost units for key may pass now under lim, and spends them
// if so. Cost 0 only looks. A cost that could never pass is an error
// (ErrCostExceedsCapacity), not a denial.
func (l *Limiter) Take(ctx context.Context, key string, lim Limit, cost int64) (r Result, err error) {
	p, err := l.check(key, &lim, cost)
	if err != nil {
		return Result{}, err
	}
	if l.fast != nil { // the hot path: no op
		// Field by field: a Result built whole and copied out is read
		// back from stores still on their way to memory, a stall.
		var retry, reset, delay int64
		r.Allowed, r.Remaining, retry, reset, delay, r.Window, err = l.fast(key, p, cost, store.Never)
		if err != nil {
			return Result{}, err
		}
		r.RetryAfter = storelink.Duration(retry)
		r.ResetAfter = storelink.Duration(reset)
		r.Delay = storelink.Duration(delay)
		return r, nil
	}
	var ops [1]store.Op
	takeOp(&ops[0], key, p, cost, store.Never)
	l.run(ctx, ops[:])
	err = answer(&ops[0], &r)
	return
}

// takeOp makes op a Take of cost units of key under p.
func takeOp(op *store.Op, key string, p *algo.Params, cost, maxDelay int64) {
	op.Kind, op.Key, op.Cost, op.MaxDelay = store.Take, key, cost, maxDelay
	storelink.SetLimit(&op.Limit, p)
}

// answer writes op's answer into *r (zero), or returns its error. It
// writes field by field: a Result built and then copied out would be read
// back, whole, from stores still on their way to memory, which stalls the
// hot path.
func answer(op *store.Op, r *Result) error {
	if err := op.Err; err != nil {
		return err // never Allowed with an error
	}
	setResult(r, &op.Decision)
	return nil
}

// setResult writes d into *r.
func setResult(r *Result, d *store.Decision) {
	r.Allowed, r.Remaining, r.Degraded, r.Window = d.Allowed, d.Remaining, d.Degraded, d.Window
	r.RetryAfter = storelink.Duration(d.RetryAfter)
	r.ResetAfter = storelink.Duration(d.ResetAfter)
	r.Delay = storelink.Duration(d.Delay)
}

// Allow is Take with cost 1, reporting only whether the request passed.
func (l *Limiter) Allow(ctx context.Context, key string, lim Limit) (bool, error) {
	r, err := l.Take(ctx, key, lim, 1)
	return r.Allowed, err
}

// Wait blocks until cost units for key pass under lim, and for LeakyBucket
// until the admitted request's delay has passed. When the context's deadline
// (read on the Limiter's clock) comes before that could happen, Wait returns
// at once with ErrDeadline, spending nothing; a context canceled already
// returns its error at once, spending nothing. When the context is canceled
// while an admitted LeakyBucket request waits out its delay, the units stay
// spent.
func (l *Limiter) Wait(ctx context.Context, key string, lim Limit, cost int64) (Result, error) {
	p, err := l.check(key, &lim, cost)
	if err != nil {
		return Result{}, err
	}
	var ops [1]store.Op
	return l.wait(ctx, true, func(maxDelay int64) (Result, error) {
		ops[0] = store.Op{}
		takeOp(&ops[0], key, p, cost, maxDelay)
		l.run(ctx, ops[:])
		var r Result
		err := answer(&ops[0], &r)
		return r, err
	})
}

// wait calls take until it admits, sleeping out each RetryAfter, and then
// sleeps out the admission's Delay. maxDelay is the time left before the
// context's deadline, in µs. single says take decides one key, so that a
// LeakyBucket refusal's ResetAfter is the delay its turn would need.
func (l *Limiter) wait(ctx context.Context, single bool, take func(maxDelay int64) (Result, error)) (Result, error) {
	if l.st == nil {
		return Result{}, errNoStore
	}
	for {
		if err := ctx.Err(); err != nil {
			// Canceled: take nothing. A deadline is read on l.clock below.
			if _, ok := ctx.Deadline(); !ok || !errors.Is(err, context.DeadlineExceeded) {
				return Result{}, err
			}
		}
		maxDelay := store.Never
		left := time.Duration(math.MaxInt64)
		if dl, ok := ctx.Deadline(); ok {
			left = dl.Sub(l.clock.Now())
			if left < 0 {
				return Result{}, fmt.Errorf("%w (%w)", ErrDeadline, context.DeadlineExceeded)
			}
			maxDelay = left.Microseconds()
		}
		r, err := take(maxDelay)
		if err != nil {
			return r, err
		}
		if r.Allowed {
			if r.Delay > 0 {
				err = l.clock.Sleep(ctx, r.Delay)
			}
			return r, err
		}
		if r.RetryAfter == math.MaxInt64 { // Never: a LeakyBucket turn past the deadline
			if single {
				return r, fmt.Errorf("%w (%w): its turn would come in %v, after the deadline", ErrDeadline, context.DeadlineExceeded, r.ResetAfter)
			}
			return r, fmt.Errorf("%w (%w): its turn would come after the deadline", ErrDeadline, context.DeadlineExceeded)
		}
		if r.RetryAfter > left {
			return r, fmt.Errorf("%w (%w): next chance in %v", ErrDeadline, context.DeadlineExceeded, r.RetryAfter)
		}
		if err := l.clock.Sleep(ctx, r.RetryAfter); err != nil {
			return r, err
		}
	}
}

// Refund gives units back to key under lim, for work whose real cost
// turned out lower than what was taken (an LLM call's tokens). It never
// creates capacity beyond the burst. TokenBucket and GCRA lower the
// bucket's level; FixedWindow and AlignedWindow lower the count of a
// window, never below 0; the others return an error wrapping ErrNoRefund.
//
// take is the Result of the take whose units come back: under FixedWindow
// and AlignedWindow they are given back only while the key is still in the
// window take counted in (take.Window), so that units spent in a window
// that has ended never become room in the next. A refund that returns no
// take's units (envoy's negative hits) passes the zero Result, and gives
// them to the window the key is in now.
func (l *Limiter) Refund(ctx context.Context, key string, lim Limit, units int64, take Result) (Result, error) {
	p, err := l.params(&lim)
	if err == nil {
		err = storelink.CheckRefund(key, p, units)
	}
	if err != nil {
		return Result{}, err
	}
	var ops [1]store.Op
	op := &ops[0]
	op.Kind, op.Key, op.Cost, op.Window = store.Refund, key, units, take.Window
	storelink.SetLimit(&op.Limit, p)
	l.run(ctx, ops[:])
	var r Result
	err = answer(op, &r)
	return r, err
}

// Charge spends units of key's budget under lim for work already done,
// whose cost is known only afterwards (an LLM call's tokens, a response's
// bytes). It is never refused: units past what the key has leave it in
// debt, up to lim.Debt units past empty, and the units past that are
// forgiven. While the key is in debt, takes are refused, their RetryAfter
// the wait until it is paid and they can pass; refunds pay it back.
//
// Its Result is what a take of 0 would see afterwards, Remaining negative
// in debt, but for Allowed: false when units were forgiven (the key was
// charged all it could owe). Only TokenBucket, GCRA, FixedWindow and
// AlignedWindow can charge; the others return an error wrapping
// ErrNoRefund. SEMANTICS.md's "Charges and debt" states the bound.
func (l *Limiter) Charge(ctx context.Context, key string, lim Limit, units int64) (Result, error) {
	p, err := l.params(&lim)
	if err == nil {
		err = storelink.CheckCharge(key, p, units)
	}
	if err != nil {
		return Result{}, err
	}
	var ops [1]store.Op
	op := &ops[0]
	op.Kind, op.Key, op.Cost = store.Charge, key, units
	storelink.SetLimit(&op.Limit, p)
	l.run(ctx, ops[:])
	var r Result
	err = answer(op, &r)
	return r, err
}

// Settle settles work taken as an estimate once its actual cost is known,
// in one call: take is the Result of the Take of estimate units. When the
// take spent more than actual, the difference is refunded, to take's
// window (as Refund does); when actual is more, the difference is charged
// (as Charge does). A take that was refused, or answered by a failure
// policy (Degraded), spent nothing in the store: all of actual is charged.
// It returns the Refund's or the Charge's Result, or, with nothing to
// settle, a look (a Take of 0). Only TokenBucket, GCRA, FixedWindow and
// AlignedWindow can settle; the others return an error wrapping
// ErrNoRefund.
func (l *Limiter) Settle(ctx context.Context, key string, lim Limit, estimate, actual int64, take Result) (Result, error) {
	p, err := l.params(&lim)
	if err == nil {
		err = storelink.CheckCharge(key, p, actual)
	}
	if err == nil && estimate < 0 {
		err = fmt.Errorf("%w: estimate %d is negative", ErrInvalidCost, estimate)
	}
	if err != nil {
		return Result{}, err
	}
	spent := int64(0)
	if take.Allowed && !take.Degraded {
		spent = estimate
	}
	var ops [1]store.Op
	op := &ops[0]
	op.Kind, op.Key, op.MaxDelay = store.Take, key, store.Never
	storelink.SetLimit(&op.Limit, p)
	switch {
	case actual > spent:
		op.Kind, op.Cost = store.Charge, actual-spent
	case actual < spent:
		op.Kind, op.Cost, op.Window = store.Refund, spent-actual, take.Window
	}
	l.run(ctx, ops[:])
	var r Result
	err = answer(op, &r)
	return r, err
}

// Reset returns key to its fresh state.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if key == "" {
		return ErrEmptyKey
	}
	var ops [1]store.Op
	ops[0].Kind, ops[0].Key = store.Reset, key
	l.run(ctx, ops[:])
	return ops[0].Err
}

// run hands ops to the store. Ops a Limiter builds live on its stack:
// memstore's Run keeps nothing of them, and any other store is handed
// copies (see runCopies).
func (l *Limiter) run(ctx context.Context, ops []store.Op) {
	if l.mem != nil {
		l.mem.Run(ctx, ops)
		return
	}
	runCopies(ctx, l.st, ops)
}

// opBufs keeps the copies runCopies hands a store.
var opBufs = sync.Pool{New: func() any { return new([1]store.Op) }}

// runCopies runs copies of ops on st, a store known only by its interface,
// and writes their answers back: ops, which passing through the interface
// would move to the heap, stay where the caller made them. Their keys and
// parts are shared, not copied: the Limiter's parts are on the heap
// already (partsOf), and a key that moves there costs what a copy would.
//
//go:noinline
func runCopies(ctx context.Context, st store.Store, ops []store.Op) {
	if st == nil {
		for i := range ops {
			ops[i].Err = errNoStore
		}
		return
	}
	var cp []store.Op
	if len(ops) == 1 { // the Limiter's own: one op, from a pool
		buf := opBufs.Get().(*[1]store.Op)
		defer func() { *buf = [1]store.Op{}; opBufs.Put(buf) }()
		cp = buf[:]
	} else {
		cp = make([]store.Op, len(ops))
	}
	for i := range ops {
		o, c := &ops[i], &cp[i]
		c.Kind, c.At, c.Key, c.Limit, c.Cost, c.Headroom = o.Kind, o.At, o.Key, o.Limit, o.Cost, o.Headroom
		c.MaxDelay, c.Window, c.Concurrency, c.ID, c.Degraded, c.SummaryOnly = o.MaxDelay, o.Window, o.Concurrency, o.ID, o.Degraded, o.SummaryOnly
		c.Parts = o.Parts
	}
	st.Run(ctx, cp)
	for i := range ops {
		o, c := &ops[i], &cp[i]
		o.Decision, o.Expiry, o.Err = c.Decision, c.Expiry, c.Err
	}
}
