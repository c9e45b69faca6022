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
// identical decisions. A Keys is a key space whose calls each name their
// limit, so a key may be read under another rate, period, burst or
// algorithm, as SEMANTICS.md's "Changed limits" says (carry); a Model is one
// limit over a key space. The model does not model clocks that go backwards
// (a key's time must not decrease) or leaky-bucket's maxDelay. It panics on
// a cost outside [0, capacity] and on a time that goes back.
//
// Leases (SEMANTICS.md, "Leases") are modelled in lease.go: LeaseTake is
// the lease script, a Process is one process's lease table over a shared
// Keys, and CheckBucketBound and CheckWindowBound check admissions against
// the bound.
package model

import (
	"fmt"
	"math/big"

	"github.com/sluice-go/sluice/internal/algo"
)

// Limit is a limit as the contract states it: rate units per period (µs),
// burst meaning what the contract says for kind, and the debt allowance D
// (SEMANTICS.md, "Charges and debt"; 0 under the algorithms that cannot
// carry a debt).
type Limit struct {
	Kind                algo.Kind
	Rate, Period, Burst int64
	Debt                int64
}

// Capacity is the largest cost the contract lets pass on a fresh key: B for
// token-bucket and gcra, Q+1 for leaky-bucket, rate for the windows and the log.
func (l Limit) Capacity() int64 {
	switch l.Kind {
	case algo.TokenBucket, algo.GCRA:
		return l.Burst
	case algo.LeakyBucket:
		return l.Burst + 1
	}
	return l.Rate
}

func (l Limit) check() {
	if !l.Kind.Valid() {
		panic(fmt.Sprintf("model: unknown kind %d", l.Kind))
	}
	if l.Rate <= 0 || l.Period <= 0 || l.Burst < 0 {
		panic(fmt.Sprintf("model: bad limit rate=%d period=%d burst=%d", l.Rate, l.Period, l.Burst))
	}
	if (l.Kind == algo.TokenBucket || l.Kind == algo.GCRA) && l.Burst < 1 {
		panic(fmt.Sprintf("model: %v needs burst ≥ 1", l.Kind))
	}
	if l.Debt < 0 || l.Debt > 0 && !l.chargeable() {
		panic(fmt.Sprintf("model: %v with a debt allowance of %d", l.Kind, l.Debt))
	}
}

// chargeable reports whether the limit's algorithm can carry a debt.
func (l Limit) chargeable() bool {
	switch l.Kind {
	case algo.TokenBucket, algo.GCRA, algo.FixedWindow, algo.AlignedWindow:
		return true
	}
	return false
}

// bucket reports whether the limit's algorithm keeps a level that refills.
func (l Limit) bucket() bool {
	return l.Kind == algo.TokenBucket || l.Kind == algo.GCRA || l.Kind == algo.LeakyBucket
}

// Keys is a key space: each key's state and the limit that wrote it. Every
// call names its own limit, as a Limiter's calls do, so one key may be read
// under another rate, period, burst or algorithm than the one that wrote it
// (SEMANTICS.md, "Changed limits"). The zero Keys is not usable; call
// NewKeys. Keys is not safe for concurrent use.
type Keys struct {
	keys map[string]*keyState
}

// NewKeys returns an empty key space.
func NewKeys() *Keys { return &Keys{keys: make(map[string]*keyState)} }

// Model is the contract's answer for one limit, over a key space of its own
// (New) or a shared one (On). A Model is not safe for concurrent use.
type Model struct {
	lim Limit
	ks  *Keys
	t   *big.Rat // the emission interval T = period/rate, µs
	// keys is ks.keys, for the composite's save and restore.
	keys map[string]*keyState
}

// keyState is one key's state, under lim, the limit that wrote it. Only
// the fields of lim's algorithm are used; a key missing from the map is
// fresh.
type keyState struct {
	lim  Limit
	last int64 // the key's latest time, to refuse a clock that goes back

	// token-bucket: tokens x at time l.
	x *big.Rat
	l int64

	// gcra: the theoretical arrival time.
	tat *big.Rat

	// leaky-bucket: D, the time the queue is empty again.
	d *big.Rat

	// fixed-window: whether a window is open, its count and end;
	// aligned-window: its count c in window k. Both: the units o the window
	// owes past its rate (a debt), counted in the windows after it.
	open    bool
	c, e, o int64
	k       int64

	// sliding-window: admitted units per epoch-aligned window index.
	counts map[int64]int64

	// sliding-log: every admitted request, one entry each, oldest first.
	log []entry
}

type entry struct{ t, cost int64 }

// New returns the model of the limit: rate units per periodUS microseconds,
// with burst meaning what the contract says for kind, over a key space of
// its own. It panics on a limit the contract does not define (rate or
// period not positive, a negative burst, a token-bucket or gcra burst of 0,
// an unknown kind).
func New(kind algo.Kind, rate, periodUS, burst int64) *Model {
	return NewKeys().Model(Limit{Kind: kind, Rate: rate, Period: periodUS, Burst: burst})
}

// Model returns the model of lim over the key space ks.
func (ks *Keys) Model(lim Limit) *Model {
	lim.check()
	return &Model{lim: lim, ks: ks, t: big.NewRat(lim.Period, lim.Rate), keys: ks.keys}
}

// Take decides cost units for key at now under lim (see Model.Take).
func (ks *Keys) Take(key string, lim Limit, now, cost int64) algo.Decision {
	return ks.Model(lim).Take(key, now, cost)
}

// Capacity is the limit's capacity (Limit.Capacity).
func (m *Model) Capacity() int64 { return m.lim.Capacity() }

// Take decides a request of cost units for key at time now (µs) and updates
// the key's state. It fills Allowed, Remaining, RetryAfter, ResetAfter,
// Delay and a window's Window (its end); FreshAt is left zero. It panics when cost is outside [0, Capacity()]
// (the contract's error, which leaves the state unchanged) or when now is
// before the key's previous time.
//
// A state another limit wrote is first read as "Changed limits" says
// (carry); then the algorithm decides on it. A request of cost > 0 stores
// the state its algorithm leaves, allowed or denied; a query stores nothing.
func (m *Model) Take(key string, now, cost int64) algo.Decision {
	if cost < 0 || cost > m.Capacity() {
		panic(fmt.Sprintf("model: cost %d outside [0, %d]", cost, m.Capacity()))
	}
	old, ok := m.keys[key]
	if ok && now < old.last {
		panic(fmt.Sprintf("model: key %q: time %d before %d (backward clocks are not modelled)", key, now, old.last))
	}
	st := m.carry(old, now)
	var d algo.Decision
	switch m.lim.Kind {
	case algo.TokenBucket:
		d = m.tokenBucket(st, now, cost)
	case algo.GCRA:
		d = m.gcra(st, now, cost)
	case algo.LeakyBucket:
		d = m.leakyBucket(st, now, cost)
	case algo.FixedWindow:
		d = m.fixedWindow(st, now, cost)
	case algo.AlignedWindow:
		d = m.alignedWindow(st, now, cost)
	case algo.SlidingWindow:
		d = m.slidingWindow(st, now, cost)
	case algo.SlidingLog:
		d = m.slidingLog(st, now, cost)
	}
	if cost == 0 && (!d.Allowed || d.RetryAfter != 0) {
		panic("model: a query was denied") // the contract's own promise
	}
	if cost > 0 {
		st.last = now
		m.keys[key] = st
	} else if ok {
		old.last = now
	}
	return d
}

// carry returns a copy of old (nil: fresh) as m's limit reads it at now
// (the model's times never go back, so now is also the contract's t*):
// the state itself when m's limit wrote it; otherwise, as SEMANTICS.md's
// "Changed limits" says, the state holding what old held under its own
// limit.
func (m *Model) carry(old *keyState, now int64) *keyState {
	st := &keyState{lim: m.lim}
	if old == nil {
		return st
	}
	if old.lim == m.lim {
		return old.clone()
	}
	l, o := m.lim, old.lim
	switch {
	case l.bucket() && o.bucket():
		// The level carries: exactly under the same period, else in whole
		// units rounded up; capped at the capacity and the debt allowance
		// (a bucket is at most D past empty).
		lv := old.level(now)
		if l.Period != o.Period {
			lv = rat(ceil(lv))
		}
		m.setLevel(st, now, minRat(lv, rat(l.Capacity()+l.Debt)))
		return st
	case l.Kind == algo.FixedWindow && o.Kind == algo.FixedWindow:
		// The window open at now under the old limit (its debt carried)
		// keeps its start, count and debt; it ends a new period after its
		// start. One that had ended, its debt paid, stays ended.
		if r := old.clone(); r.rollFixed(now) {
			st.open, st.c, st.o, st.e = true, r.c, r.o, r.e-o.Period+l.Period
		}
		return st
	case l.Kind == algo.SlidingLog && o.Kind == algo.SlidingLog:
		// The log's times are absolute: it is read as it is, but for the
		// entries that had left the old period.
		for _, e := range old.log {
			if e.t > now-o.Period {
				st.log = append(st.log, e)
			}
		}
		return st
	case l.Kind == algo.AlignedWindow && o.Kind == algo.AlignedWindow && l.Period == o.Period,
		l.Kind == algo.SlidingWindow && o.Kind == algo.SlidingWindow && l.Period == o.Period:
		// Counts kept as they are under a new rate: an aligned window's
		// those of the window of now, its debt carried under the old rate.
		c := old.clone()
		if o.Kind == algo.AlignedWindow {
			c.rollAligned(now)
		}
		c.lim = l
		return c
	}
	// Otherwise: the whole units old holds now, capped at the capacity and
	// the debt allowance, as if spent now on a fresh key.
	u := min(old.held(now), l.Capacity()+l.Debt)
	if u == 0 {
		return st
	}
	switch l.Kind {
	case algo.TokenBucket, algo.GCRA, algo.LeakyBucket:
		m.setLevel(st, now, rat(u))
	case algo.FixedWindow:
		st.open, st.o, st.e = true, u, now+l.Period // fillWindow counts them
	case algo.AlignedWindow:
		st.k, st.o = now/l.Period, u
	case algo.SlidingWindow:
		st.counts = map[int64]int64{now / l.Period: u}
	case algo.SlidingLog:
		st.log = []entry{{now, u}}
	}
	return st
}

// level is a bucket state's level at now under its own limit: the units
// spent and not yet refilled (B − x for the token bucket, the backlog over T
// for gcra and the leaky bucket), at least 0.
func (st *keyState) level(now int64) *big.Rat {
	t := big.NewRat(st.lim.Period, st.lim.Rate)
	var lv *big.Rat
	switch st.lim.Kind {
	case algo.TokenBucket:
		b := rat(st.lim.Burst)
		x := minRat(b, add(st.x, quo(rat(now-st.l), t)))
		lv = sub(b, x)
	case algo.GCRA:
		lv = quo(sub(st.tat, rat(now)), t)
	case algo.LeakyBucket:
		lv = quo(sub(st.d, rat(now)), t)
	}
	return maxRat(rat(0), lv)
}

// setLevel makes st, of m's bucket algorithm, hold the level lv at now.
func (m *Model) setLevel(st *keyState, now int64, lv *big.Rat) {
	switch m.lim.Kind {
	case algo.TokenBucket:
		st.x, st.l = sub(rat(m.lim.Burst), lv), now
	case algo.GCRA:
		st.tat = add(rat(now), mul(lv, m.t))
	case algo.LeakyBucket:
		st.d = add(rat(now), mul(lv, m.t))
	}
}

// held is the whole units a state holds at now under its own limit: a
// bucket's level rounded up (its debt included), the count and debt of the
// window a fixed or aligned window's debt carries into, a sliding window's
// estimate rounded up, the log's units in its trailing period.
func (st *keyState) held(now int64) int64 {
	l := st.lim
	switch l.Kind {
	case algo.TokenBucket, algo.GCRA, algo.LeakyBucket:
		return ceil(st.level(now))
	case algo.FixedWindow:
		if r := st.clone(); r.rollFixed(now) {
			return r.c + r.o
		}
	case algo.AlignedWindow:
		r := st.clone()
		r.rollAligned(now)
		return r.c + r.o
	case algo.SlidingWindow:
		old := &Model{lim: l}
		return ceil(old.estimate(st.counts, now))
	case algo.SlidingLog:
		n := int64(0)
		for _, e := range st.log {
			if e.t > now-l.Period {
				n += e.cost
			}
		}
		return n
	}
	return 0
}

// tokenBucket:
//
//	x ← min(B, x + (t − l)/T);  l ← t
//	if x ≥ cost: allowed, x ← x − cost
//	else:        denied,  retry_after = ceil((cost − x)·T)
//	remaining = floor(x);  reset_after = ceil((B − x)·T)
func (m *Model) tokenBucket(st *keyState, now, cost int64) algo.Decision {
	b := rat(m.lim.Burst)
	x := b // fresh: full
	if st.x != nil {
		x = minRat(b, add(st.x, quo(rat(now-st.l), m.t)))
	}
	var d algo.Decision
	if cost == 0 || x.Cmp(rat(cost)) >= 0 { // a query passes, even in debt
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
	bt := mul(rat(m.lim.Burst), m.t)
	tat := t // fresh: full, TAT at or before now
	if st.tat != nil {
		tat = maxRat(st.tat, t)
	}
	next := add(tat, mul(rat(cost), m.t))
	var d algo.Decision
	if cost == 0 || sub(next, t).Cmp(bt) <= 0 {
		d.Allowed = true
		tat = next
	} else {
		d.RetryAfter = ceil(sub(sub(next, t), bt))
	}
	backlog := sub(tat, t)
	d.Remaining = floor(sub(rat(m.lim.Burst), quo(backlog, m.t)))
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
	qt := mul(rat(m.lim.Burst), m.t)
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
	d.Remaining = max(0, floor(sub(rat(m.lim.Burst+1), quo(backlog, m.t))))
	d.ResetAfter = ceil(backlog)
	if cost > 0 {
		st.d = dq
	}
	return d
}

// fixedWindow:
//
//	the window's debt carried through the windows that ended (rollFixed);
//	owed units fill a raised rate's room; at most D owed (fillWindow)
//	if no window:  c ← 0, e ← t + period      (cost 0 opens no window)
//	if c + cost ≤ rate: allowed, c ← c + cost
//	else: denied, retry_after = smallest d at which it would pass, no other traffic
//	remaining = max(0, rate − c) − o;  reset_after = end of the last window the debt reaches − t
func (m *Model) fixedWindow(st *keyState, now, cost int64) algo.Decision {
	st.rollFixed(now)
	m.fillWindow(st)
	if !st.open {
		if cost == 0 { // nothing is open and a query opens nothing: fresh
			return algo.Decision{Allowed: true, Remaining: m.lim.Rate}
		}
		st.open, st.c, st.o, st.e = true, 0, 0, now+m.lim.Period
	}
	d := algo.Decision{Window: st.e}
	if cost == 0 || st.c+cost <= m.lim.Rate { // a query passes, even over a lowered rate
		d.Allowed = true
		st.c += cost
	} else {
		d.RetryAfter = m.searchRetry(st, now, cost)
	}
	m.windowFigures(st, now, st.e, &d)
	return d
}

// rollFixed carries a fixed window's debt through the windows that have
// ended by now, one window at a time: each counts what is owed, up to the
// rate of the limit that wrote it, and owes the rest. It reports whether a
// window is open at now.
func (st *keyState) rollFixed(now int64) bool {
	for st.open && now >= st.e {
		st.c = min(st.o, st.lim.Rate)
		st.o -= st.c
		st.e += st.lim.Period
		st.open = st.c > 0
	}
	return st.open
}

// rollAligned is rollFixed for an aligned window: it moves st to the window
// of now.
func (st *keyState) rollAligned(now int64) {
	k := now / st.lim.Period
	for ; st.k < k && st.c+st.o > 0; st.k++ {
		st.c = min(st.o, st.lim.Rate)
		st.o -= st.c
	}
	st.k = k // a window holding nothing is any window
}

// fillWindow makes a window read under m's limit whole: units owed fill a
// rate raised above the count, and at most D stay owed.
func (m *Model) fillWindow(st *keyState) {
	if m := min(st.o, max(0, m.lim.Rate-st.c)); m > 0 {
		st.c, st.o = st.c+m, st.o-m
	}
	st.o = min(st.o, m.lim.Debt)
}

// searchRetry is the smallest d ≥ 1 at which a request of cost would pass
// on the window st with no other traffic, searched over the windows its
// debt reaches.
func (m *Model) searchRetry(st *keyState, now, cost int64) int64 {
	hi := (m.lim.Debt/m.lim.Rate + 3) * m.lim.Period
	return search(1, hi, func(d int64) bool {
		r := st.clone()
		if m.lim.Kind == algo.FixedWindow {
			if !r.rollFixed(now + d) {
				return true // ended, its debt paid: a window opens
			}
		} else {
			r.rollAligned(now + d)
		}
		m.fillWindow(r)
		return r.c+cost <= m.lim.Rate
	})
}

// windowFigures writes a window's remaining and reset_after: the count
// and debt of st, in the window ending at e.
func (m *Model) windowFigures(st *keyState, now, e int64, d *algo.Decision) {
	d.Remaining = max(0, m.lim.Rate-st.c) - st.o
	if st.c > 0 {
		for o := st.o; o > 0; o -= min(o, m.lim.Rate) {
			e += m.lim.Period
		}
		d.ResetAfter = e - now
	}
}

// alignedWindow:
//
//	the window's debt carried through the windows that ended (rollAligned);
//	owed units fill a raised rate's room; at most D owed (fillWindow)
//	if c + cost ≤ rate: allowed, c ← c + cost
//	else: denied, retry_after = smallest d at which it would pass, no other traffic
//	remaining = max(0, rate − c) − o;  reset_after = end of the last window the debt reaches − t, 0 when c = 0
func (m *Model) alignedWindow(st *keyState, now, cost int64) algo.Decision {
	k, _ := m.window(now)
	e := (k + 1) * m.lim.Period
	st.rollAligned(now)
	m.fillWindow(st)
	d := algo.Decision{Window: e}
	if cost == 0 || st.c+cost <= m.lim.Rate {
		d.Allowed = true
		st.c += cost
	} else {
		d.RetryAfter = m.searchRetry(st, now, cost)
	}
	m.windowFigures(st, now, e, &d)
	return d
}

// window returns the index k of the epoch-aligned window of length W holding
// time t, and the offset of t in it.
func (m *Model) window(t int64) (k, x int64) {
	k = t / m.lim.Period // times are ≥ 0
	return k, t - k*m.lim.Period
}

// estimate is the contract's prev·(W − x)/W + cur at time t, read from the
// per-window counts as they stand (no traffic after them). It is built over
// the common denominator W, (prev·(W − x) + cur·W)/W, because the searches
// call it often and each big.Rat operation reduces its result.
func (m *Model) estimate(counts map[int64]int64, t int64) *big.Rat {
	k, x := m.window(t)
	w := big.NewInt(m.lim.Period)
	num := new(big.Int).Mul(big.NewInt(counts[k-1]), big.NewInt(m.lim.Period-x))
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
	room := rat(m.lim.Rate - cost) // estimate + cost ≤ rate  ⇔  estimate ≤ rate − cost
	fits := func(t int64) bool { return m.estimate(counts, t).Cmp(room) <= 0 }
	var d algo.Decision
	if cost == 0 || fits(now) {
		d.Allowed = true
		if cost > 0 {
			counts[k] += cost
		}
	} else {
		d.RetryAfter = search(1, 2*m.lim.Period+1, func(d int64) bool { return fits(now + d) })
	}
	d.Remaining = max(0, floor(sub(rat(m.lim.Rate), m.estimate(counts, now))))
	switch {
	case counts[k] > 0:
		d.ResetAfter = (k+2)*m.lim.Period - now
	case counts[k-1] > 0:
		d.ResetAfter = (k+1)*m.lim.Period - now
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
	w := m.lim.Period
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
	if cost == 0 || used+cost <= m.lim.Rate {
		d.Allowed = true
		if cost > 0 {
			st.log = append(st.log, entry{now, cost})
			used += cost
		}
	} else {
		// At d = W every entry (all at times ≤ t) has left, and cost ≤ rate fits.
		d.RetryAfter = search(1, w, func(d int64) bool { return usedAfter(now+d)+cost <= m.lim.Rate })
	}
	d.Remaining = max(0, m.lim.Rate-used)
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

// Refund gives units back to key at now under lim (see Model.Refund).
func (ks *Keys) Refund(key string, lim Limit, now, units, window int64) algo.Decision {
	return ks.Model(lim).Refund(key, now, units, window)
}

// Refund gives units back to key at time now (µs), as SEMANTICS.md's
// "Refunds" says, and returns what a query sees afterwards. The state is
// read as the limit reads it (carry); a bucket's level falls by the units,
// at least to 0 (a debt is paid first: it is part of the level); a fixed or
// aligned window's debt and then its count, in the window the key is in,
// fall by them, never below 0, and a window brought to 0 leaves the key
// fresh. A fresh key, a window that has ended, a window other than window
// (the end of the window the units were spent in; 0 for any), or another
// limit's state holding nothing is left as it is. It panics under the other
// algorithms, for units < 0, or when now is before the key's previous time.
func (m *Model) Refund(key string, now, units, window int64) algo.Decision {
	if units < 0 {
		panic(fmt.Sprintf("model: refund of %d", units))
	}
	if !m.lim.chargeable() {
		panic(fmt.Sprintf("model: %v cannot give units back", m.lim.Kind))
	}
	st, ok := m.read(key, now)
	if !ok {
		return m.Take(key, now, 0)
	}
	switch m.lim.Kind {
	case algo.TokenBucket, algo.GCRA:
		lv := rat(0) // carried from a state that holds nothing
		if st.x != nil || st.tat != nil {
			lv = st.level(now)
		}
		m.setLevel(st, now, maxRat(rat(0), sub(lv, rat(units))))
		m.store(key, st, now)
		return m.Take(key, now, 0)
	}
	if !m.openWindow(st, now) || st.c+st.o == 0 || (window != 0 && window != m.windowEnd(st, now)) {
		return m.Take(key, now, 0)
	}
	paid := min(units, st.o)
	st.o -= paid
	st.c = max(0, st.c-(units-paid))
	if st.c+st.o == 0 { // nothing left in the window: the key is fresh
		delete(m.keys, key)
	} else {
		m.store(key, st, now)
	}
	return m.Take(key, now, 0)
}

// read returns a copy of key's state as m's limit reads it at now (carry),
// and whether the key has one. It panics when now is before the key's
// previous time.
func (m *Model) read(key string, now int64) (*keyState, bool) {
	old, ok := m.keys[key]
	if ok && now < old.last {
		panic(fmt.Sprintf("model: key %q: time %d before %d (backward clocks are not modelled)", key, now, old.last))
	}
	return m.carry(old, now), ok
}

// store makes st key's state, last seen at now.
func (m *Model) store(key string, st *keyState, now int64) {
	st.last = now
	m.keys[key] = st
}

// openWindow reads a fixed or aligned window st at now as its step does:
// its debt carried through the windows that ended, a raised rate's room
// filled, at most D owed. It reports whether a fixed window is open (an
// aligned window always is).
func (m *Model) openWindow(st *keyState, now int64) bool {
	if m.lim.Kind == algo.FixedWindow {
		st.rollFixed(now)
	} else {
		st.rollAligned(now)
	}
	m.fillWindow(st)
	return m.lim.Kind == algo.AlignedWindow || st.open
}

// windowEnd is the end of the window st counts in at now: a fixed window's
// own, the aligned window of now's.
func (m *Model) windowEnd(st *keyState, now int64) int64 {
	if m.lim.Kind == algo.FixedWindow {
		return st.e
	}
	k, _ := m.window(now)
	return (k + 1) * m.lim.Period
}
