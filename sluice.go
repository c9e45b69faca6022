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

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
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
	// Window names, under FixedWindow and AlignedWindow, the window the
	// decision counted in: its end, in µs since the Unix epoch by the
	// store's clock. RefundTake gives units back only while the key is
	// still in that window: units spent in a window that has ended are not
	// given to the next. It is 0 under the other algorithms, where no
	// window is open, and in a composite's summary of more than one part
	// (TakeEach reports each part's).
	Window int64
}

// Request is one decision as a Limiter hands it to a Store, already
// checked: Limit is valid and its Algorithm is never the zero value (the
// token bucket is spelled TokenBucket), Key is not empty, and Cost is from 0
// to the limit's capacity (for Refund: at least 0, under TokenBucket, GCRA,
// FixedWindow or AlignedWindow). A composite names distinct keys.
type Request struct {
	Key   string
	Limit Limit
	Cost  int64
	// MaxDelay bounds a LeakyBucket admission's Delay: a request whose turn
	// would come later is refused, spending nothing, with a RetryAfter of
	// math.MaxInt64. It is math.MaxInt64 (no bound) from Take; Wait sets it
	// to the time left before the context's deadline.
	MaxDelay time.Duration
	// Window is, for Refund under FixedWindow or AlignedWindow, the
	// Result.Window of the take whose units are given back: the store gives
	// them back only while the key is in that window. 0 gives them back to
	// the window the key is in.
	Window int64
}

// Store keeps limiter state and makes each decision atomically. The stores
// of this module are memstore (in process) and redisstore (Redis and
// Valkey); a Limiter reaches them by a faster path of their own.
//
// To write another, keep an algo.State per key and apply algo.Step to it
// atomically, under the limit the request carries:
//
//	p := algo.Params{Kind: algo.Kind(req.Limit.Algorithm), Rate: req.Limit.Rate,
//		Period: req.Limit.Period.Microseconds(), Burst: req.Limit.Burst}
//
// at the store's time in µs since the epoch (algo.CheckTime bounds it),
// with req.MaxDelay in µs (algo.Never for math.MaxInt64), and return the
// decision's fields as a Result's durations. A Limiter checks every request
// before a Store sees it.
type Store interface {
	// Take makes one decision for req and stores the resulting state.
	Take(ctx context.Context, req Request) (Result, error)
	// TakeAll makes one decision for a composite request, atomically: it
	// passes only if every part grants, and a refusal changes no part (see
	// Limiter.TakeAll for the Result). Limiter.TakeEach calls it, then Take
	// with cost 0 on each part for the parts' figures.
	TakeAll(ctx context.Context, reqs []Request) (Result, error)
	// Refund gives req.Cost units back to req.Key (see algo.Refund).
	Refund(ctx context.Context, req Request) (Result, error)
	// Reset returns key to its fresh state.
	Reset(ctx context.Context, key string) error
}

// outside is the Decider of a Store from outside this module: it hands the
// requests over in the Store's terms.
type outside struct{ s Store }

var _ storelink.Decider = outside{}

func publicRequest(r *storelink.Request) Request {
	return Request{Key: r.Key, Limit: limitOf(&r.Params), Cost: r.Cost, MaxDelay: storelink.Duration(r.MaxDelay)}
}

func (o outside) Take(ctx context.Context, req storelink.Request) (storelink.Result, error) {
	r, err := o.s.Take(ctx, publicRequest(&req))
	return storelink.Result(r), err
}

// TakeAll hands the parts over; a part with a reserve is ErrNoReserve,
// since a Request carries none.
func (o outside) TakeAll(ctx context.Context, reqs []storelink.Request) (storelink.Result, error) {
	pub := make([]Request, len(reqs))
	for i := range reqs {
		if reqs[i].Reserve != 0 {
			return storelink.Result{}, ErrNoReserve
		}
		pub[i] = publicRequest(&reqs[i])
	}
	r, err := o.s.TakeAll(ctx, pub)
	return storelink.Result(r), err
}

// TakeEach decides through the Store's TakeAll, which reports only the
// summary, and then looks (cost 0, one Take each) at every part for its
// figures: another instant than the decision's, a call each (see
// Limiter.TakeEach).
func (o outside) TakeEach(ctx context.Context, reqs []storelink.Request, each []storelink.Result) (storelink.Result, error) {
	r, err := o.TakeAll(ctx, reqs)
	if err != nil {
		return storelink.Result{}, err
	}
	o.looks(ctx, reqs, r, each)
	return r, nil
}

// looks writes into each the figures of every part of reqs after the
// decision r, by a look at each (see TakeEach).
func (o outside) looks(ctx context.Context, reqs []storelink.Request, r storelink.Result, each []storelink.Result) {
	refusing := false
	for i := range reqs {
		look := publicRequest(&reqs[i])
		look.Cost = 0
		pe, err := o.s.Take(ctx, look)
		e := storelink.Result(pe)
		if err != nil {
			e = r // the summary stands in for a part that could not be looked at
		}
		e.Allowed = r.Allowed || e.Remaining >= reqs[i].Cost
		e.RetryAfter, e.Delay, e.Degraded = 0, 0, r.Degraded
		if !e.Allowed {
			e.RetryAfter, refusing = r.RetryAfter, true
		}
		each[i] = e
	}
	if !r.Allowed && !refusing {
		// The looks came after traffic or time that let every part grant:
		// the parts that spend are reported as the refusal's.
		for i := range reqs {
			if reqs[i].Cost > 0 {
				each[i].Allowed, each[i].RetryAfter = false, r.RetryAfter
			}
		}
	}
}

func (o outside) Refund(ctx context.Context, req storelink.Request, window int64) (storelink.Result, error) {
	pr := publicRequest(&req)
	pr.Window = window
	r, err := o.s.Refund(ctx, pr)
	return storelink.Result(r), err
}

func (o outside) Reset(ctx context.Context, key string) error { return o.s.Reset(ctx, key) }

func (outside) Clock() storelink.Clock { return nil }

// Clock is the time a Limiter and the stores of this module read and wait
// by. Every package that reads time takes one through its own WithClock;
// tests pass a fake one to the store (memstore.WithClock), and a Limiter
// then waits by its store's clock.
type Clock interface {
	Now() time.Time
	// Sleep waits for d or until ctx is done, whichever comes first, and
	// returns ctx's error in the second case.
	Sleep(ctx context.Context, d time.Duration) error
}

// Limiter makes decisions over a Store. Make one with New: the zero
// Limiter has no store, and its methods return an error wrapping
// ErrStoreUnavailable.
type Limiter struct {
	eng   storelink.Decider
	local storelink.Local // eng, when it is one (memstore's)
	// holder is eng, when its store holds concurrency limits.
	holder    storelink.Holder
	holdLocal storelink.HoldLocal // holder, when it is one (memstore's)
	clock     Clock
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
func (l *Limiter) slot(lim Limit) *atomic.Pointer[validLimit] {
	h := (uint64(lim.Rate)*0x9E3779B97F4A7C15 ^ uint64(lim.Period) ^ uint64(lim.Burst)<<17 ^ uint64(lim.Algorithm)<<40) * 0xBF58476D1CE4E5B9
	return &l.valid[h>>61]
}

// params is lim.params, remembered.
func (l *Limiter) params(lim Limit) (algo.Params, error) {
	slot := l.slot(lim)
	if v := slot.Load(); v != nil && v.lim == lim {
		return v.p, nil
	}
	p, err := lim.params()
	if err == nil {
		slot.Store(&validLimit{lim, p})
	}
	return p, err
}

// partParams is params for the parts of a composite, which name several
// limits at once: a limit that finds its slot taken by another is checked
// afresh instead of taking the slot, so that two limits of one composite
// never evict each other (and allocate) on every call.
func (l *Limiter) partParams(lim Limit) (algo.Params, error) {
	slot := l.slot(lim)
	v := slot.Load()
	if v != nil && v.lim == lim {
		return v.p, nil
	}
	p, err := lim.params()
	if err == nil && v == nil {
		slot.CompareAndSwap(nil, &validLimit{lim, p})
	}
	return p, err
}

// check checks one request: the limit, the key and the cost.
func (l *Limiter) check(key string, lim Limit, cost int64) (algo.Params, error) {
	p, err := l.params(lim)
	if err == nil {
		err = storelink.Check(key, p, cost)
	}
	return p, err
}

// Option configures a Limiter.
type Option func(*Limiter)

// WithClock sets the clock Wait reads deadlines and sleeps by. The default
// is the clock of a store of this module that was given one (as by
// memstore.WithClock), so that a test sets its fake clock once, on the
// store; otherwise it is the system clock.
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

// New returns a Limiter over store. Over a nil store, its methods return an
// error wrapping ErrStoreUnavailable.
func New(store Store, opts ...Option) *Limiter {
	l := &Limiter{}
	if s, ok := store.(storelink.Linked); ok {
		if e := s.Engine(); e != nil && e.Store() == store {
			l.eng = e
		}
	}
	if l.eng == nil && store != nil {
		l.eng = outside{store}
	}
	l.local, _ = l.eng.(storelink.Local)
	l.holder, _ = l.eng.(storelink.Holder)
	l.holdLocal, _ = l.eng.(storelink.HoldLocal)
	for _, o := range opts {
		o(l)
	}
	if l.clock == nil && l.eng != nil {
		if c := l.eng.Clock(); c != nil {
			l.clock = c
		}
	}
	if l.clock == nil {
		l.clock = storelink.SystemClock{}
	}
	return l
}

// Take asks whether cost units for key may pass now under lim, and spends them
// if so. Cost 0 only looks. A cost that could never pass is an error
// (ErrCostExceedsCapacity), not a denial.
func (l *Limiter) Take(ctx context.Context, key string, lim Limit, cost int64) (Result, error) {
	p, err := l.params(lim)
	if err == nil {
		err = storelink.Check(key, p, cost)
	}
	if err != nil {
		return Result{}, err
	}
	if l.local != nil {
		remaining, retry, reset, delay, window, err := l.local.TakeLocal(key, p, cost)
		if err != nil {
			return Result{}, err // never Allowed with an error
		}
		return Result{
			Allowed:    retry == 0,
			Remaining:  remaining,
			RetryAfter: storelink.Duration(retry),
			ResetAfter: storelink.Duration(reset),
			Delay:      storelink.Duration(delay),
			Window:     window,
		}, nil
	}
	if l.eng == nil {
		return Result{}, errNoStore
	}
	r, err := l.eng.Take(ctx, storelink.Request{Key: key, Params: p, Cost: cost, MaxDelay: algo.Never})
	return Result(r), err
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
	p, err := l.check(key, lim, cost)
	if err != nil {
		return Result{}, err
	}
	if l.eng == nil {
		return Result{}, errNoStore
	}
	return l.wait(ctx, true, func(maxDelay int64) (Result, error) {
		r, err := l.eng.Take(ctx, storelink.Request{Key: key, Params: p, Cost: cost, MaxDelay: maxDelay})
		return Result(r), err
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
//
// Reserve makes the part a lower class's, as TakeReserving does for one
// limit: the part passes only if Cost + Reserve units could pass, and
// spends only Cost; its Remaining is the class's (less Reserve, at least
// 0). Cost + Reserve over the limit's capacity is an error
// (ErrCostExceedsCapacity); 0 is no reserve. A store from outside this
// module cannot keep one (ErrNoReserve).
type Part struct {
	Key     string
	Limit   Limit
	Cost    int64
	Reserve int64
}

// appendRequests checks the parts of a composite request and appends their
// requests (MaxDelay algo.Never) to dst. The error says which part is wrong,
// or that two parts name one key (ErrDuplicateKey).
func (l *Limiter) appendRequests(dst []storelink.Request, parts []Part) ([]storelink.Request, error) {
	n := len(dst)
	for i := range parts {
		pt := &parts[i]
		p, err := l.checkPart(i, pt)
		if err != nil {
			return dst[:n], err
		}
		dst = append(dst, storelink.Request{}) // set the fields: copying a Request costs more
		r := &dst[len(dst)-1]
		r.Key, r.Params, r.Cost, r.MaxDelay, r.Reserve = pt.Key, p, pt.Cost, algo.Never, pt.Reserve
	}
	if err := distinct(parts); err != nil {
		return dst[:n], err
	}
	return dst, nil
}

// checkPart checks part i of a composite and returns its limit's params;
// the error says which part is wrong.
func (l *Limiter) checkPart(i int, pt *Part) (algo.Params, error) {
	p, err := l.partParams(pt.Limit)
	if err == nil {
		err = storelink.Check(pt.Key, p, pt.Cost)
	}
	if err == nil && pt.Reserve != 0 {
		err = storelink.CheckReserve(&p, pt.Cost, pt.Reserve)
	}
	if err != nil {
		return p, storelink.PartError(i, pt.Key, err)
	}
	return p, nil
}

// distinct is storelink.CheckComposite for parts.
func distinct(parts []Part) error {
	return storelink.CheckComposite(parts, func(p *Part) string { return p.Key })
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
	if l.local != nil && len(parts) <= storelink.MaxLocalParts {
		// The requests are built here, on the stack, and handed over by
		// value: a slice passed through the interface would escape.
		var buf [storelink.MaxLocalParts]storelink.Request
		if _, err := l.appendRequests(buf[:0], parts); err != nil {
			return Result{}, err
		}
		r, err := l.local.TakeAllLocal(buf, len(parts))
		return Result(r), err
	}
	if l.eng == nil {
		return Result{}, errNoStore
	}
	reqs, err := l.appendRequests(make([]storelink.Request, 0, len(parts)), parts)
	if err != nil {
		return Result{}, err
	}
	r, err := l.eng.TakeAll(ctx, reqs)
	return Result(r), err
}

// TakeEach is TakeAll that also reports each part's own result, taken at
// the decision's instant in the same store call, in each[i] (part i's):
// len(each) must be len(parts). It makes the same decision as TakeAll and
// returns the same summary, which is the fold of each: Allowed when all
// are, the smallest Remaining, the largest RetryAfter, ResetAfter and
// Delay.
//
// Admitted, each[i] is part i's result after spending its cost: Allowed,
// its own Remaining, ResetAfter and Delay. Refused, nothing was spent, so
// each[i] describes part i as it is (its Remaining and ResetAfter, Delay 0),
// and each[i].Allowed reports whether part i alone would have granted its
// cost at that instant: the parts that would not (at least one) carry
// their own RetryAfter, the others 0. So the parts whose Allowed is false
// are the ones that refused.
//
// On the error's side, each is zeroed. A Limiter over memstore makes
// composites of up to 4 parts without allocating. Two cases have no single
// instant, documented in SEMANTICS.md: a Redis Cluster composite whose keys
// are in different slots (taken in turn and given back; the parts after a
// refusing one are looked at afterwards and report Allowed), and a Store
// from outside this module, whose TakeAll reports only the summary: each
// part is then looked at (cost 0) after the decision, one Take a part, and
// a refused part is one whose look's Remaining is below its cost (when the
// looks show none, every part that spends), with the summary's RetryAfter.
func (l *Limiter) TakeEach(ctx context.Context, parts []Part, each []Result) (Result, error) {
	if len(each) != len(parts) {
		return Result{}, fmt.Errorf("%w: TakeEach needs one Result for each part: %d parts, %d results", ErrInvalidLimit, len(parts), len(each))
	}
	if l.local != nil && len(parts) <= storelink.MaxLocalParts {
		var buf [storelink.MaxLocalParts]storelink.Request // see TakeAll
		_, err := l.appendRequests(buf[:0], parts)
		if err == nil {
			var r storelink.Result
			var all [storelink.MaxLocalParts]storelink.Result
			if r, all, err = l.local.TakeEachLocal(buf, len(parts)); err == nil {
				for i := range each {
					each[i] = Result(all[i])
				}
				return Result(r), nil
			}
		}
		clear(each)
		return Result{}, err
	}
	clear(each)
	if l.eng == nil {
		return Result{}, errNoStore
	}
	reqs, err := l.appendRequests(make([]storelink.Request, 0, len(parts)), parts)
	if err != nil {
		return Result{}, err
	}
	// The engine writes into a slice of its own, so that each, which
	// passing through the interface would move to the heap, stays where
	// the caller made it.
	out := make([]storelink.Result, len(parts))
	r, err := l.eng.TakeEach(ctx, reqs, out)
	if err == nil {
		for i := range each {
			each[i] = Result(out[i])
		}
	}
	return Result(r), err
}

// WaitAll is Wait for a composite request: it blocks until every part grants
// at once, and returns at once with ErrDeadline, spending nothing, when that
// cannot happen before the context's deadline.
func (l *Limiter) WaitAll(ctx context.Context, parts []Part) (Result, error) {
	return l.waitParts(ctx, parts, func(reqs []storelink.Request) (storelink.Result, error) {
		return l.eng.TakeAll(ctx, reqs)
	})
}

// WaitEach is WaitAll that also writes part i's result into each[i]
// (len(each) == len(parts)), as TakeEach does, from the last decision made:
// the one that admitted the request, or the last one that refused it (when
// WaitEach returns ErrDeadline, or the context's error while it waited
// after a refusal), whose parts with Allowed false are the ones that
// refused. each is zeroed when no decision was made (the deadline had
// passed, an invalid part, a store error). Over a Store from outside this
// module, each part is looked at (cost 0) once, after the last decision.
func (l *Limiter) WaitEach(ctx context.Context, parts []Part, each []Result) (Result, error) {
	if len(each) != len(parts) {
		return Result{}, fmt.Errorf("%w: WaitEach needs one Result for each part: %d parts, %d results", ErrInvalidLimit, len(parts), len(each))
	}
	clear(each)
	out := make([]storelink.Result, len(parts)) // see TakeEach
	o, isOutside := l.eng.(outside)
	var decided []storelink.Request // the last decision's requests, once one was made
	r, err := l.waitParts(ctx, parts, func(reqs []storelink.Request) (r storelink.Result, err error) {
		if isOutside {
			r, err = o.TakeAll(ctx, reqs)
		} else {
			r, err = l.eng.TakeEach(ctx, reqs, out)
		}
		decided = nil
		if err == nil {
			decided = reqs
		}
		return r, err
	})
	if decided == nil {
		return r, err
	}
	if isOutside {
		o.looks(ctx, decided, storelink.Result(r), out)
	}
	for i := range each {
		each[i] = Result(out[i])
	}
	return r, err
}

// waitParts checks parts and waits until decide, which makes one decision
// on their requests (MaxDelay set to the time left), admits them (see
// wait). r is the last decision's whenever one was made.
func (l *Limiter) waitParts(ctx context.Context, parts []Part, decide func(reqs []storelink.Request) (storelink.Result, error)) (r Result, err error) {
	if l.eng == nil {
		return Result{}, errNoStore
	}
	reqs, err := l.appendRequests(make([]storelink.Request, 0, len(parts)), parts)
	if err != nil {
		return Result{}, err
	}
	return l.wait(ctx, false, func(maxDelay int64) (Result, error) {
		for i := range reqs {
			reqs[i].MaxDelay = maxDelay
		}
		r, err := decide(reqs)
		return Result(r), err
	})
}

// Refund gives units back to key under lim, for work whose real cost turned
// out lower than what was taken (an LLM call's tokens). It never creates
// capacity beyond the burst. TokenBucket and GCRA lower the bucket's level;
// FixedWindow and AlignedWindow lower the count of the window the key is in
// now, never below 0 (a window that has ended has nothing to give back, and
// a count brought to 0 leaves the key fresh); the others return an error
// wrapping ErrNoRefund.
//
// To give back units of a take that may have been spent in an earlier
// window, use RefundTake: Refund would give them to the current one.
func (l *Limiter) Refund(ctx context.Context, key string, lim Limit, units int64) (Result, error) {
	return l.refund(ctx, key, lim, units, 0)
}

// RefundTake is Refund for units that the take whose Result is take spent:
// under FixedWindow and AlignedWindow they are given back only while the key
// is still in the window take counted in (take.Window), so that units spent
// in a window that has ended never become room in the next. Under the
// bucket algorithms it is Refund.
func (l *Limiter) RefundTake(ctx context.Context, key string, lim Limit, units int64, take Result) (Result, error) {
	return l.refund(ctx, key, lim, units, take.Window)
}

func (l *Limiter) refund(ctx context.Context, key string, lim Limit, units, window int64) (Result, error) {
	p, err := l.params(lim)
	if err == nil {
		err = storelink.CheckRefund(key, &p, units)
	}
	if err != nil {
		return Result{}, err
	}
	if l.eng == nil {
		return Result{}, errNoStore
	}
	r, err := l.eng.Refund(ctx, storelink.Request{Key: key, Params: p, Cost: units, MaxDelay: algo.Never}, window)
	return Result(r), err
}

// Reset returns key to its fresh state.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if key == "" {
		return ErrEmptyKey
	}
	if l.eng == nil {
		return errNoStore
	}
	return l.eng.Reset(ctx, key)
}
