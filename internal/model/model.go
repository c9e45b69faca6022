// Package model is an exact, deliberately plain model of the limiter contract
// (SEMANTICS.md), for tests only.
//
// It is written from the contract's text, not from package algo: every
// quantity is an exact rational (math/big.Rat), the emission interval
// T = period/rate is kept as a fraction, each algorithm keeps the state the
// contract names (tokens and last update, a TAT, the queue's end D, a window's
// count and end, per-window counts, a log of admitted requests), and searches
// that the contract defines as "the smallest d such that …" are done by
// searching over d rather than by solving for it. Only the reported integers
// are rounded: durations up (ceil), remaining down (floor).
//
// Tests run one trace through algo.Step and through a Model and require
// identical decisions. The model covers what the contract fixes for a single
// unchanging limit: it does not model clocks that go backwards (a key's time
// must not decrease), changed limits, or leaky-bucket's maxDelay. It panics
// on a cost outside [0, capacity] and on a time that goes back.
package model

import (
	"fmt"
	"math/big"

	"github.com/sluice-go/sluice/algo"
)

// Model is the contract's answer for one limit, over any number of keys. The
// zero Model is not usable; call New. A Model is not safe for concurrent use.
type Model struct {
	kind                algo.Kind
	rate, period, burst int64
	t                   *big.Rat // the emission interval T = period/rate, µs
	keys                map[string]*keyState
}

// keyState is one key's state. Only the fields of the model's kind are used; a
// key missing from the map is fresh.
type keyState struct {
	last int64 // the key's latest time, to refuse a clock that goes back

	// token-bucket: tokens x at time l; x == nil is fresh (full).
	x *big.Rat
	l int64

	// gcra: the theoretical arrival time; nil is fresh.
	tat *big.Rat

	// leaky-bucket: D, the time the queue is empty again; nil is fresh.
	d *big.Rat

	// fixed-window: whether a window was ever opened, its count and end.
	open bool
	c, e int64

	// sliding-window: admitted units per epoch-aligned window index.
	counts map[int64]int64

	// sliding-log: every admitted request, one entry each, oldest first.
	log []entry
}

type entry struct{ t, cost int64 }

// New returns the model of the limit: rate units per periodUS microseconds,
// with burst meaning what the contract says for kind. It panics on a limit the
// contract does not define (rate or period not positive, a negative burst, a
// token-bucket or gcra burst of 0, an unknown kind).
func New(kind algo.Kind, rate, periodUS, burst int64) *Model {
	switch kind {
	case algo.TokenBucket, algo.GCRA, algo.LeakyBucket, algo.FixedWindow, algo.SlidingWindow, algo.SlidingLog:
	default:
		panic(fmt.Sprintf("model: unknown kind %d", kind))
	}
	if rate <= 0 || periodUS <= 0 || burst < 0 {
		panic(fmt.Sprintf("model: bad limit rate=%d period=%d burst=%d", rate, periodUS, burst))
	}
	if (kind == algo.TokenBucket || kind == algo.GCRA) && burst < 1 {
		panic(fmt.Sprintf("model: %v needs burst ≥ 1", kind))
	}
	return &Model{
		kind:   kind,
		rate:   rate,
		period: periodUS,
		burst:  burst,
		t:      big.NewRat(periodUS, rate),
		keys:   make(map[string]*keyState),
	}
}

// Capacity is the largest cost the contract lets pass on a fresh key: B for
// token-bucket and gcra, Q+1 for leaky-bucket, rate for the windows and the log.
func (m *Model) Capacity() int64 {
	switch m.kind {
	case algo.TokenBucket, algo.GCRA:
		return m.burst
	case algo.LeakyBucket:
		return m.burst + 1
	}
	return m.rate
}

// Take decides a request of cost units for key at time now (µs) and updates
// the key's state. It fills Allowed, Remaining, RetryAfter, ResetAfter and
// Delay; FreshAt is left zero. It panics when cost is outside [0, Capacity()]
// (the contract's error, which leaves the state unchanged) or when now is
// before the key's previous time.
func (m *Model) Take(key string, now, cost int64) algo.Decision {
	if cost < 0 || cost > m.Capacity() {
		panic(fmt.Sprintf("model: cost %d outside [0, %d]", cost, m.Capacity()))
	}
	st, ok := m.keys[key]
	if !ok {
		st = &keyState{last: now}
		m.keys[key] = st
	}
	if now < st.last {
		panic(fmt.Sprintf("model: key %q: time %d before %d (backward clocks are not modelled)", key, now, st.last))
	}
	st.last = now

	var d algo.Decision
	switch m.kind {
	case algo.TokenBucket:
		d = m.tokenBucket(st, now, cost)
	case algo.GCRA:
		d = m.gcra(st, now, cost)
	case algo.LeakyBucket:
		d = m.leakyBucket(st, now, cost)
	case algo.FixedWindow:
		d = m.fixedWindow(st, now, cost)
	case algo.SlidingWindow:
		d = m.slidingWindow(st, now, cost)
	case algo.SlidingLog:
		d = m.slidingLog(st, now, cost)
	}
	if cost == 0 && (!d.Allowed || d.RetryAfter != 0) {
		panic("model: a query was denied") // the contract's own promise
	}
	return d
}

// tokenBucket:
//
//	x ← min(B, x + (t − l)/T);  l ← t
//	if x ≥ cost: allowed, x ← x − cost
//	else:        denied,  retry_after = ceil((cost − x)·T)
//	remaining = floor(x);  reset_after = ceil((B − x)·T)
func (m *Model) tokenBucket(st *keyState, now, cost int64) algo.Decision {
	b := rat(m.burst)
	x := b // fresh: full
	if st.x != nil {
		x = minRat(b, add(st.x, quo(rat(now-st.l), m.t)))
	}
	var d algo.Decision
	if x.Cmp(rat(cost)) >= 0 {
		d.Allowed = true
		x = sub(x, rat(cost))
	} else {
		d.RetryAfter = ceil(mul(sub(rat(cost), x), m.t))
	}
	d.Remaining = floor(x)
	d.ResetAfter = ceil(mul(sub(b, x), m.t))
	if cost > 0 {
		st.x, st.l = x, now
	}
	return d
}

// gcra keeps TAT = t + (B − x)·T, the instant the bucket is full again:
//
//	TAT ← max(TAT, t)
//	x = B − (TAT − t)/T ≥ cost  ⇔  TAT + cost·T − t ≤ B·T:  allowed, TAT ← TAT + cost·T
//	else denied, retry_after = ceil(TAT + cost·T − t − B·T)
//	remaining = floor(B − (TAT − t)/T);  reset_after = ceil(TAT − t)
func (m *Model) gcra(st *keyState, now, cost int64) algo.Decision {
	t := rat(now)
	bt := mul(rat(m.burst), m.t)
	tat := t // fresh: full, TAT at or before now
	if st.tat != nil {
		tat = maxRat(st.tat, t)
	}
	next := add(tat, mul(rat(cost), m.t))
	var d algo.Decision
	if sub(next, t).Cmp(bt) <= 0 {
		d.Allowed = true
		tat = next
	} else {
		d.RetryAfter = ceil(sub(sub(next, t), bt))
	}
	backlog := sub(tat, t)
	d.Remaining = floor(sub(rat(m.burst), quo(backlog, m.t)))
	d.ResetAfter = ceil(backlog)
	if cost > 0 {
		st.tat = tat
	}
	return d
}

// leakyBucket:
//
//	s ← max(t, D)
//	last ← s + (cost − 1)·T − t
//	if last ≤ Q·T: allowed, delay = ceil(s − t), D ← s + cost·T
//	else:          denied,  retry_after = ceil(last − Q·T)
//	backlog = max(0, D − t)
//	remaining = max(0, floor(Q + 1 − backlog/T));  reset_after = ceil(backlog)
//
// A query (cost 0) is allowed and reports delay = ceil(s − t); it keeps D.
func (m *Model) leakyBucket(st *keyState, now, cost int64) algo.Decision {
	t := rat(now)
	dq := t // fresh: the queue is empty
	if st.d != nil {
		dq = st.d
	}
	s := maxRat(t, dq)
	last := sub(add(s, mul(rat(cost-1), m.t)), t)
	qt := mul(rat(m.burst), m.t)
	var d algo.Decision
	if cost == 0 || last.Cmp(qt) <= 0 {
		d.Allowed = true
		d.Delay = ceil(sub(s, t))
		if cost > 0 {
			dq = add(s, mul(rat(cost), m.t))
		}
	} else {
		d.RetryAfter = ceil(sub(last, qt))
	}
	backlog := maxRat(rat(0), sub(dq, t))
	d.Remaining = max(0, floor(sub(rat(m.burst+1), quo(backlog, m.t))))
	d.ResetAfter = ceil(backlog)
	if cost > 0 {
		st.d = dq
	}
	return d
}

// fixedWindow:
//
//	if no window or t ≥ e:  c ← 0, e ← t + period      (cost 0 opens no window)
//	if c + cost ≤ rate: allowed, c ← c + cost
//	else: denied, retry_after = e − t
//	remaining = rate − c;  reset_after = e − t
func (m *Model) fixedWindow(st *keyState, now, cost int64) algo.Decision {
	c, e := st.c, st.e
	if !st.open || now >= e {
		if cost == 0 { // nothing is open and a query opens nothing: fresh
			return algo.Decision{Allowed: true, Remaining: m.rate}
		}
		c, e = 0, now+m.period
	}
	var d algo.Decision
	if c+cost <= m.rate {
		d.Allowed = true
		c += cost
	} else {
		d.RetryAfter = e - now
	}
	d.Remaining = m.rate - c
	d.ResetAfter = e - now
	if cost > 0 {
		st.open, st.c, st.e = true, c, e
	}
	return d
}

// window returns the index k of the epoch-aligned window of length W holding
// time t, and the offset of t in it.
func (m *Model) window(t int64) (k, x int64) {
	k = t / m.period // times are ≥ 0
	return k, t - k*m.period
}

// estimate is the contract's prev·(W − x)/W + cur at time t, read from the
// per-window counts as they stand (no traffic after them). It is built over
// the common denominator W, (prev·(W − x) + cur·W)/W, because the searches
// call it often and each big.Rat operation reduces its result.
func (m *Model) estimate(counts map[int64]int64, t int64) *big.Rat {
	k, x := m.window(t)
	w := big.NewInt(m.period)
	num := new(big.Int).Mul(big.NewInt(counts[k-1]), big.NewInt(m.period-x))
	num.Add(num, new(big.Int).Mul(big.NewInt(counts[k]), w))
	return new(big.Rat).SetFrac(num, w)
}

// slidingWindow:
//
//	estimate = prev·(W − x)/W + cur
//	if estimate + cost ≤ rate: allowed, cur ← cur + cost
//	else: denied, retry_after = smallest whole d with estimate(t+d) + cost ≤ rate
//	remaining = max(0, floor(rate − estimate))
//	reset_after = end of window k+1 − t if cur > 0, else end of window k − t if prev > 0, else 0
//
// The search for d runs over [1, 2W+1]: the estimate does not increase with
// d when nothing is admitted, and is 0 two windows on.
func (m *Model) slidingWindow(st *keyState, now, cost int64) algo.Decision {
	if st.counts == nil {
		st.counts = make(map[int64]int64)
	}
	counts := st.counts
	k, _ := m.window(now)
	for w := range counts { // windows before k−1 no longer count
		if w < k-1 {
			delete(counts, w)
		}
	}
	room := rat(m.rate - cost) // estimate + cost ≤ rate  ⇔  estimate ≤ rate − cost
	fits := func(t int64) bool { return m.estimate(counts, t).Cmp(room) <= 0 }
	var d algo.Decision
	if fits(now) {
		d.Allowed = true
		if cost > 0 {
			counts[k] += cost
		}
	} else {
		d.RetryAfter = search(1, 2*m.period+1, func(d int64) bool { return fits(now + d) })
	}
	d.Remaining = max(0, floor(sub(rat(m.rate), m.estimate(counts, now))))
	switch {
	case counts[k] > 0:
		d.ResetAfter = (k+2)*m.period - now
	case counts[k-1] > 0:
		d.ResetAfter = (k+1)*m.period - now
	}
	for w, n := range counts { // reading a missing window added nothing, but keep the map tidy
		if n == 0 {
			delete(counts, w)
		}
	}
	return d
}

// slidingLog:
//
//	used = sum of cost over the log (entries in (t − W, t])
//	if used + cost ≤ rate: allowed, append (t, cost)   (cost 0 appends nothing)
//	else: denied, retry_after = smallest d such that entries with time > t + d − W, plus cost, fit
//	remaining = rate − used;  reset_after = newest entry's time + W − t (0 when empty)
//
// remaining is read after the decision, as the contract's table defines it:
// an admitted request counts in used.
func (m *Model) slidingLog(st *keyState, now, cost int64) algo.Decision {
	w := m.period
	kept := st.log[:0:0]
	for _, e := range st.log {
		if e.t > now-w {
			kept = append(kept, e)
		}
	}
	st.log = kept
	usedAfter := func(t int64) int64 { // the log's sum over (t − W, t], with no traffic
		n := int64(0)
		for _, e := range st.log {
			if e.t > t-w {
				n += e.cost
			}
		}
		return n
	}
	used := usedAfter(now)
	var d algo.Decision
	if used+cost <= m.rate {
		d.Allowed = true
		if cost > 0 {
			st.log = append(st.log, entry{now, cost})
			used += cost
		}
	} else {
		// At d = W every entry (all at times ≤ t) has left, and cost ≤ rate fits.
		d.RetryAfter = search(1, w, func(d int64) bool { return usedAfter(now+d)+cost <= m.rate })
	}
	d.Remaining = m.rate - used
	if n := len(st.log); n > 0 {
		d.ResetAfter = st.log[n-1].t + w - now
	}
	return d
}

// search returns the smallest d in [lo, hi] with ok(d), for ok false then true
// as d grows. It panics if ok(hi) is false: the contract says an answer
// exists there.
func search(lo, hi int64, ok func(int64) bool) int64 {
	if !ok(hi) {
		panic(fmt.Sprintf("model: no answer in [%d, %d]", lo, hi))
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		if ok(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

func rat(n int64) *big.Rat       { return new(big.Rat).SetInt64(n) }
func add(a, b *big.Rat) *big.Rat { return new(big.Rat).Add(a, b) }
func sub(a, b *big.Rat) *big.Rat { return new(big.Rat).Sub(a, b) }
func mul(a, b *big.Rat) *big.Rat { return new(big.Rat).Mul(a, b) }
func quo(a, b *big.Rat) *big.Rat { return new(big.Rat).Quo(a, b) }
func minRat(a, b *big.Rat) *big.Rat {
	if a.Cmp(b) <= 0 {
		return a
	}
	return b
}
func maxRat(a, b *big.Rat) *big.Rat {
	if a.Cmp(b) >= 0 {
		return a
	}
	return b
}

// floor is ⌊r⌋. big.Int.Div is Euclidean, which is floor for the positive
// denominator a Rat always has.
func floor(r *big.Rat) int64 {
	q := new(big.Int).Div(r.Num(), r.Denom())
	if !q.IsInt64() {
		panic(fmt.Sprintf("model: %v out of int64 range", r))
	}
	return q.Int64()
}

// ceil is ⌈r⌉ = −⌊−r⌋.
func ceil(r *big.Rat) int64 {
	return -floor(new(big.Rat).Neg(r))
}
