// Package sluice is a rate limiter: exact, fast, and the same in one process as
// on a Redis/Valkey cluster.
//
// A Limiter spends budgets kept in a Store. Each call carries its Limit (rate
// per period, burst, algorithm), so a changed limit needs no migration:
//
//	lim := sluice.New(memstore.New())
//	res, err := lim.Take(ctx, "user:42", sluice.PerSecond(10).WithBurst(50), 1)
//	if err != nil { ... }          // a bad limit or cost, or a store that is gone
//	if !res.Allowed { retry after res.RetryAfter }
//
// The algorithms (token bucket, GCRA, leaky bucket as a queue, fixed window,
// sliding window, sliding log) are pure integer steps in package algo; their
// exact semantics are in SEMANTICS.md. The stores, memstore (in process) and
// redisstore (shared), keep the state and make each step atomic; for the same
// trace they give the same decisions, to the microsecond.
//
// A Limiter is safe for concurrent use.
package sluice

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/algo"
)

// Result is the answer to one request.
type Result struct {
	// Allowed reports whether the request passed (and spent its cost).
	Allowed bool
	// Remaining is how many whole units could still pass at this instant,
	// after this decision.
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
}

// FromDecision converts an algorithm's decision into a Result. It takes a
// pointer so that the hot path does not copy the decision.
func FromDecision(d *algo.Decision) Result {
	return Result{
		Allowed:    d.Allowed,
		Remaining:  d.Remaining,
		RetryAfter: micros(d.RetryAfter),
		ResetAfter: micros(d.ResetAfter),
		Delay:      micros(d.Delay),
	}
}

// micros converts a step's microseconds into a Duration, saturating where
// algo.Never would overflow.
func micros(us int64) time.Duration {
	if us >= math.MaxInt64/int64(time.Microsecond) {
		return math.MaxInt64
	}
	return time.Duration(us) * time.Microsecond
}

// Request is one decision as a Store receives it, already checked by
// CheckParams.
type Request struct {
	Key    string
	Params algo.Params
	Cost   int64
	// MaxDelay bounds a LeakyBucket admission's delay, in µs (algo.Never for
	// none); Wait sets it from the context's deadline.
	MaxDelay int64
}

// Store keeps limiter state and applies algo.Step to it atomically.
type Store interface {
	// Take makes one decision for req and stores the resulting state.
	Take(ctx context.Context, req Request) (Result, error)
	// TakeAll makes one decision for a composite request, atomically: it
	// passes only if every part grants, and a refusal changes no part. The
	// parts name distinct keys.
	TakeAll(ctx context.Context, reqs []Request) (Result, error)
	// Refund gives req.Cost units back to req.Key (see algo.Refund).
	Refund(ctx context.Context, req Request) (Result, error)
	// Reset returns key to its fresh state.
	Reset(ctx context.Context, key string) error
}

// LocalStore is implemented by stores that decide in process and need no
// context (memstore). The Limiter calls TakeLocal on its hot path: its meaning
// is Take's with MaxDelay algo.Never, but arguments and results travel in
// registers (a Result is too wide for them, and copying one costs more than
// the decision's arithmetic). allowed is RetryAfter == 0.
type LocalStore interface {
	TakeLocal(key string, p algo.Params, cost int64) (remaining, retryAfter, resetAfter, delay int64, err error)
	// TakeAllLocal is TakeAll for the Limiter's hot path, on the parts as
	// the caller gave them: the store checks them (AppendRequests) into a
	// buffer of its own, which a slice passed through the Store interface
	// could not be (it would be allocated on the heap on every call).
	TakeAllLocal(parts []Part) (Result, error)
}

// Clock is the time a Limiter waits by. Tests pass a fake one; the default is
// the system clock.
type Clock interface {
	Now() time.Time
	// Sleep waits for d or until ctx is done, whichever comes first, and
	// returns ctx's error in the second case.
	Sleep(ctx context.Context, d time.Duration) error
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SystemClock is the real clock.
var SystemClock Clock = systemClock{}

// Limiter makes decisions over a Store.
type Limiter struct {
	store Store
	local LocalStore // store, when it is one
	clock Clock
	// valid remembers limits already validated, so the hot path only
	// compares: a few slots, each replaced when another limit lands in it.
	valid [8]atomic.Pointer[validLimit]
}

type validLimit struct {
	lim Limit
	p   algo.Params
}

// params is lim.params, remembered.
func (l *Limiter) params(lim Limit) (algo.Params, error) {
	h := (uint64(lim.Rate)*0x9E3779B97F4A7C15 ^ uint64(lim.Period) ^ uint64(lim.Burst)<<17 ^ uint64(lim.Algorithm)<<40) * 0xBF58476D1CE4E5B9
	slot := &l.valid[h>>61]
	if v := slot.Load(); v != nil && v.lim == lim {
		return v.p, nil
	}
	p, err := lim.params()
	if err == nil {
		slot.Store(&validLimit{lim, p})
	}
	return p, err
}

// Option configures a Limiter.
type Option func(*Limiter)

// WithClock sets the clock Wait sleeps by (default SystemClock).
func WithClock(c Clock) Option { return func(l *Limiter) { l.clock = c } }

// New returns a Limiter over store.
func New(store Store, opts ...Option) *Limiter {
	l := &Limiter{store: store, clock: SystemClock}
	for _, o := range opts {
		o(l)
	}
	l.local, _ = store.(LocalStore)
	return l
}

// Take asks whether cost units for key may pass now under lim, and spends them
// if so. Cost 0 only looks. A cost that could never pass is an error
// (ErrCostExceedsCapacity), not a denial.
func (l *Limiter) Take(ctx context.Context, key string, lim Limit, cost int64) (Result, error) {
	p, err := l.params(lim)
	if err == nil {
		err = CheckParams(key, p, cost)
	}
	if err != nil {
		return Result{}, err
	}
	if l.local != nil {
		remaining, retry, reset, delay, err := l.local.TakeLocal(key, p, cost)
		if err != nil {
			return Result{}, err // never Allowed with an error
		}
		return Result{
			Allowed:    retry == 0,
			Remaining:  remaining,
			RetryAfter: micros(retry),
			ResetAfter: micros(reset),
			Delay:      micros(delay),
		}, nil
	}
	return l.store.Take(ctx, Request{Key: key, Params: p, Cost: cost, MaxDelay: algo.Never})
}

// Allow is Take with cost 1, reporting only whether the request passed.
func (l *Limiter) Allow(ctx context.Context, key string, lim Limit) (bool, error) {
	r, err := l.Take(ctx, key, lim, 1)
	return r.Allowed, err
}

// ErrDeadline is returned by Wait when the request could not be admitted (or,
// for LeakyBucket, proceed) before the context's deadline. It also matches
// context.DeadlineExceeded. Nothing was spent.
var ErrDeadline = errors.New("sluice: would wait past the context's deadline")

// Wait blocks until cost units for key pass under lim, and for LeakyBucket
// until the admitted request's delay has passed. When the context's deadline
// (read on the Limiter's clock) comes before that could happen, Wait returns
// at once with ErrDeadline, spending nothing; a context canceled already
// returns its error at once, spending nothing. When the context is canceled
// while an admitted LeakyBucket request waits out its delay, the units stay
// spent.
func (l *Limiter) Wait(ctx context.Context, key string, lim Limit, cost int64) (Result, error) {
	p, err := Check(key, lim, cost)
	if err != nil {
		return Result{}, err
	}
	return l.wait(ctx, true, func(maxDelay int64) (Result, error) {
		return l.store.Take(ctx, Request{Key: key, Params: p, Cost: cost, MaxDelay: maxDelay})
	})
}

// wait calls take until it admits, sleeping out each RetryAfter, and then
// sleeps out the admission's Delay. maxDelay is the time left before the
// context's deadline, in µs. single says take decides one key, so that a
// LeakyBucket refusal's ResetAfter is the delay its turn would need.
func (l *Limiter) wait(ctx context.Context, single bool, take func(maxDelay int64) (Result, error)) (Result, error) {
	for {
		if err := ctx.Err(); err != nil {
			// Canceled: take nothing. A deadline is read on l.clock below.
			if _, ok := ctx.Deadline(); !ok || !errors.Is(err, context.DeadlineExceeded) {
				return Result{}, err
			}
		}
		maxDelay := algo.Never
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

// Part is one limit of a composite request: Cost units spent on Key under
// Limit. Each part has its own cost ("1 request and 850 tokens"); a part of
// Cost 0 only looks, as Take with cost 0 does.
type Part struct {
	Key   string
	Limit Limit
	Cost  int64
}

// ErrDuplicateKey is returned when a composite request names the same key
// twice.
var ErrDuplicateKey = errors.New("sluice: a composite names a key twice")

// AppendRequests checks the parts of a composite request and appends their
// requests (MaxDelay algo.Never) to dst, for stores that implement
// LocalStore.TakeAllLocal. The error says which part is wrong, or that two
// parts name one key (ErrDuplicateKey).
func AppendRequests(dst []Request, parts []Part) ([]Request, error) {
	if len(parts) == 0 {
		return dst, fmt.Errorf("%w: a composite needs at least one part", ErrInvalidLimit)
	}
	n := len(dst)
	for i := range parts {
		pt := &parts[i]
		p, err := Check(pt.Key, pt.Limit, pt.Cost)
		if err != nil {
			return dst[:n], fmt.Errorf("part %d (%q): %w", i, pt.Key, err)
		}
		for j := range i {
			if parts[j].Key == pt.Key {
				return dst[:n], fmt.Errorf("%w: %q", ErrDuplicateKey, pt.Key)
			}
		}
		dst = append(dst, Request{}) // set the fields: copying a Request costs more
		r := &dst[len(dst)-1]
		r.Key, r.Params, r.Cost, r.MaxDelay = pt.Key, p, pt.Cost, algo.Never
	}
	return dst, nil
}

// TakeAll asks whether every part may spend its cost (a global budget and a
// per-chat one, say) and spends on all only if all grant: a refusal spends
// nothing anywhere.
//
// Admitted, Remaining is the smallest of the parts' after spending,
// ResetAfter and Delay the largest. Refused, nothing was spent, so Remaining
// and ResetAfter describe the unspent parts (the smallest and the largest of
// a look at each), Delay is 0, and RetryAfter is the largest of the refusing
// parts'.
func (l *Limiter) TakeAll(ctx context.Context, parts []Part) (Result, error) {
	if l.local != nil {
		return l.local.TakeAllLocal(parts)
	}
	reqs, err := AppendRequests(make([]Request, 0, len(parts)), parts)
	if err != nil {
		return Result{}, err
	}
	return l.store.TakeAll(ctx, reqs)
}

// WaitAll is Wait for a composite request: it blocks until every part grants
// at once, and returns at once with ErrDeadline, spending nothing, when that
// cannot happen before the context's deadline.
func (l *Limiter) WaitAll(ctx context.Context, parts []Part) (Result, error) {
	reqs, err := AppendRequests(make([]Request, 0, len(parts)), parts)
	if err != nil {
		return Result{}, err
	}
	return l.wait(ctx, false, func(maxDelay int64) (Result, error) {
		for i := range reqs {
			reqs[i].MaxDelay = maxDelay
		}
		return l.store.TakeAll(ctx, reqs)
	})
}

// Refund gives units back to key under lim, for work whose real cost turned
// out lower than what was taken (an LLM call's tokens). It never creates
// capacity beyond the burst. Only TokenBucket and GCRA can give units back;
// the others return an error wrapping algo.ErrNoRefund.
func (l *Limiter) Refund(ctx context.Context, key string, lim Limit, units int64) (Result, error) {
	p, err := lim.params()
	if err != nil {
		return Result{}, err
	}
	if key == "" {
		return Result{}, ErrEmptyKey
	}
	if units < 0 {
		return Result{}, fmt.Errorf("%w: refund of %d", ErrInvalidCost, units)
	}
	return l.store.Refund(ctx, Request{Key: key, Params: p, Cost: units, MaxDelay: algo.Never})
}

// Reset returns key to its fresh state.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if key == "" {
		return ErrEmptyKey
	}
	return l.store.Reset(ctx, key)
}
