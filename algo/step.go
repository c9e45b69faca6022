package algo

import "math/bits"

// Never stands for "no bound" where a step takes a maximum delay.
const Never = int64(1<<63 - 1)

// State is the stored state of one key. Its fields mean what the algorithm of
// Kind says (see each step); a State whose Kind differs from the limit's, the
// zero State among them, is the fresh state. Log holds sliding-log's entries.
//
// Fields that depend on the limit's scale carry the scale they were computed
// with (Scale), so a changed limit reinterprets the state instead of misreading
// it.
type State struct {
	Kind  Kind
	A, B  int64
	C     int64
	Scale int64
	Log   []Entry
}

// Entry is one admitted request of a sliding log: its time and cost. Requests in
// the same microsecond share an entry.
type Entry struct {
	T, N int64
}

// Decision is a step's answer. Durations are whole microseconds, rounded as
// SEMANTICS.md says.
type Decision struct {
	Allowed    bool
	Remaining  int64 // whole units that could still pass now, after this decision
	RetryAfter int64 // denied: smallest wait after which the same request would pass
	ResetAfter int64 // wait until the key is back to its fresh state
	Delay      int64 // leaky-bucket: how long the admitted request waits before it proceeds
	// FreshAt is the time (µs) from which the state returned with this
	// decision is equivalent to the fresh state: the earliest a store may drop
	// it (a Redis key's expiry).
	FreshAt int64
}

// Step applies one request of cost units at time now (µs) to the state s under
// the limit p: it updates *s in place and returns the decision.
//
// Preconditions, which the stores check before they call it: p is valid,
// 0 ≤ cost ≤ p.Capacity(), now passes CheckTime. maxDelay bounds the delay a
// leaky-bucket admission may carry: a request whose turn would come later is
// denied, spending nothing, with RetryAfter = Never, since asking again later
// does not bring its turn closer. Pass Never for no bound.
//
// Cost 0 is a query: it leaves *s as it was, but for a sliding log, which it
// may prune to an equivalent log. A sliding log's step reuses s.Log's backing
// array: a caller that needs the old state afterwards (to undo a step) must
// copy s.Log first.
func Step(p *Params, s *State, now, cost, maxDelay int64) (d Decision) {
	StepTo(p, s, now, cost, maxDelay, &d)
	return d
}

// StepTo is Step writing the decision into *d, which must be zero: stores'
// hot paths use it because copying a struct just built costs more there than
// the arithmetic (the CPU cannot forward the narrow stores into the wide
// loads of the copy).
func StepTo(p *Params, s *State, now, cost, maxDelay int64, d *Decision) {
	switch p.Kind {
	case TokenBucket:
		tokenBucket(p, s, now, cost, d)
	case GCRA:
		gcra(p, s, now, cost, d)
	case LeakyBucket:
		leakyBucket(p, s, now, cost, maxDelay, d)
	case FixedWindow:
		fixedWindow(p, s, now, cost, d)
	case SlidingWindow:
		slidingWindow(p, s, now, cost, d)
	case SlidingLog:
		slidingLog(p, s, now, cost, d)
	default:
		panic("algo: Step with invalid params; call Params.Validate first")
	}
}

// set stores a single-state algorithm's fields.
func (s *State) set(k Kind, a, b, c, scale int64) {
	s.Kind, s.A, s.B, s.C, s.Scale = k, a, b, c, scale
	if s.Log != nil {
		s.Log = nil
	}
}

// ceilDiv is ⌈a/b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 {
	return (a + b - 1) / b
}

// tokenBucket keeps tokens x scaled by the period (A = x·Period, an integer in
// [0, Burst·Period]) and the time of the last update (B = l). Refill over e µs
// adds e·Rate to A: one whole unit per T = Period/Rate, exactly.
func tokenBucket(p *Params, s *State, now, cost int64, d *Decision) {
	full := p.Burst * p.Period
	xs, l := bucketAt(p, s, now)
	now = max(now, l) // a clock that went back reads the state at l
	if cost*p.Period <= xs {
		d.Allowed = true
		xs -= cost * p.Period
	} else {
		d.RetryAfter = ceilDiv(cost*p.Period-xs, p.Rate)
	}
	if xs >= p.Period { // most refusals have less than a unit left: no division
		d.Remaining = xs / p.Period
	}
	d.ResetAfter = ceilDiv(full-xs, p.Rate)
	d.FreshAt = now + d.ResetAfter
	if cost > 0 {
		s.set(TokenBucket, xs, l, 0, p.Period)
	}
}

// bucketAt returns the token bucket's scaled tokens refilled to now, and the
// time of that update.
func bucketAt(p *Params, s *State, now int64) (xs, l int64) {
	full := p.Burst * p.Period
	if s.Kind != TokenBucket {
		return full, now
	}
	xs, l = s.A, s.B
	if s.Scale != p.Period { // the period changed: keep the whole tokens
		xs = xs / s.Scale * p.Period
	}
	xs = min(xs, full)
	if now > l {
		// (now−l)·Rate may not fit in 64 bits; it fits in 128.
		if hi, lo := bits.Mul64(uint64(now-l), uint64(p.Rate)); hi != 0 || lo >= uint64(full-xs) {
			xs = full
		} else {
			xs += int64(lo)
		}
		l = now
	}
	return xs, l
}

// gcra keeps the theoretical arrival time TAT = A + B/Rate µs (B in [0, Rate)):
// the instant the bucket is full again. Its backlog TAT−now, scaled by Rate,
// equals the token bucket's Burst·Period − A, so the two give the same
// decisions. C is the latest time the key was seen: the decisions need only
// the TAT, but a clock that went back is read at C, as the token bucket reads
// it at its last update, so neither refills nor penalises.
func gcra(p *Params, s *State, now, cost int64, d *Decision) {
	full := p.Burst * p.Period
	now = seen(s, GCRA, now)
	tu, tr, bs := gcraAt(p, s, now)
	if bs+cost*p.Period <= full {
		d.Allowed = true
		tu, tr = addTime(tu, tr, cost*p.Period, p.Rate)
		bs += cost * p.Period
	} else {
		d.RetryAfter = ceilDiv(bs+cost*p.Period-full, p.Rate)
	}
	d.Remaining = (full - bs) / p.Period
	d.ResetAfter = ceilDiv(bs, p.Rate)
	d.FreshAt = now + d.ResetAfter
	if cost > 0 {
		s.set(GCRA, tu, tr, now, p.Rate)
	}
}

// gcraAt returns the TAT read at now (at least now, at most a full bucket
// ahead) and its backlog scaled by Rate.
func gcraAt(p *Params, s *State, now int64) (tu, tr, bs int64) {
	tu, tr = now, 0
	if s.Kind == GCRA {
		tu, tr = rescaleTime(s, p.Rate)
	}
	return backlog(tu, tr, now, p.Rate, p.Burst*p.Period)
}

// seen returns now, or the latest time the state was seen (C) when that is
// later: a clock that went back is read at C.
func seen(s *State, k Kind, now int64) int64 {
	if s.Kind == k {
		return max(now, s.C)
	}
	return now
}

// leakyBucket keeps D = A + B/Rate µs, the time the queue is empty again, and
// the latest time the key was seen (C), at which a clock that went back is
// read.
func leakyBucket(p *Params, s *State, now, cost, maxDelay int64, d *Decision) {
	qs := p.Burst * p.Period // Q·T, scaled by Rate
	now = seen(s, LeakyBucket, now)
	du, dr := now, int64(0)
	if s.Kind == LeakyBucket {
		du, dr = rescaleTime(s, p.Rate)
	}
	du, dr, bs := backlog(du, dr, now, p.Rate, qs+p.Period)
	delay := ceilDiv(bs, p.Rate)
	last := bs + (cost-1)*p.Period // wait of the request's last unit, scaled by Rate
	switch {
	case cost == 0 || last <= qs && delay <= maxDelay:
		d.Allowed = true
		d.Delay = delay
		du, dr = addTime(du, dr, cost*p.Period, p.Rate)
		bs += cost * p.Period
	case delay > maxDelay:
		// Its turn comes at now+delay however long it waits to ask again.
		d.RetryAfter = Never
	default:
		d.RetryAfter = ceilDiv(last-qs, p.Rate)
	}
	d.Remaining = max(0, (qs+p.Period-bs)/p.Period)
	d.ResetAfter = ceilDiv(bs, p.Rate)
	d.FreshAt = now + d.ResetAfter
	if cost > 0 {
		s.set(LeakyBucket, du, dr, now, p.Rate)
	}
}

// rescaleTime returns the stored timestamp (A + B/Scale) in 1/rate µs. A changed
// rate rounds a fractional timestamp up to the next whole µs: never earlier.
func rescaleTime(s *State, rate int64) (int64, int64) {
	if s.Scale != rate && s.B != 0 {
		return s.A + 1, 0
	}
	return s.A, s.B
}

// backlog clamps the timestamp u + r/rate into [now, now + limit/rate] and
// returns it with its distance from now scaled by rate. The upper clamp only
// acts after a shrunk limit or a clock that went back.
func backlog(u, r, now, rate, limit int64) (int64, int64, int64) {
	if u < now || u == now && r == 0 {
		return now, 0, 0
	}
	if q := limit / rate; u-now > q || u-now == q && r > limit%rate {
		return now + q, limit % rate, limit
	}
	return u, r, (u-now)*rate + r
}

// addTime adds n/rate µs to the timestamp u + r/rate.
func addTime(u, r, n, rate int64) (int64, int64) {
	r += n
	return u + r/rate, r % rate
}

// fixedWindow keeps the count A and the window's end B. A clock that went back
// is read at the window's start at the earliest.
func fixedWindow(p *Params, s *State, now, cost int64, d *Decision) {
	c, e := int64(0), int64(0)
	if s.Kind == FixedWindow {
		c, e = s.A, s.B
		now = max(now, e-p.Period)
	}
	if now >= e {
		if cost == 0 { // a query opens no window
			d.Allowed, d.Remaining, d.FreshAt = true, p.Rate, now
			return
		}
		c, e = 0, now+p.Period
	}
	if c+cost <= p.Rate {
		d.Allowed = true
		c += cost
	} else {
		d.RetryAfter = e - now
	}
	d.Remaining = max(0, p.Rate-c)
	d.ResetAfter = e - now
	d.FreshAt = e
	if cost > 0 {
		s.set(FixedWindow, c, e, 0, 0)
	}
}

// slidingWindow keeps the index of the current window A (windows of Period µs
// since the epoch), the previous window's count B and the current one's C.
// A changed period starts the counts afresh: old windows do not line up.
func slidingWindow(p *Params, s *State, now, cost int64, d *Decision) {
	w := p.Period
	k := now / w
	prev, cur := int64(0), int64(0)
	if s.Kind == SlidingWindow && s.Scale == w {
		if k < s.A { // the clock went back across a window: read at its start
			k, now = s.A, s.A*w
		}
		switch k - s.A {
		case 0:
			prev, cur = s.B, s.C
		case 1:
			prev = s.C
		}
	}
	x := now - k*w
	es := prev*(w-x) + cur*w // the estimate, scaled by w
	if es+cost*w <= p.Rate*w {
		d.Allowed = true
		cur += cost
		es += cost * w
	} else {
		d.RetryAfter = slidingRetry(p.Rate, w, x, prev, cur, cost)
	}
	d.Remaining = max(0, p.Rate*w-es) / w
	switch {
	case cur > 0:
		d.ResetAfter = (k+2)*w - now
	case prev > 0:
		d.ResetAfter = (k+1)*w - now
	}
	d.FreshAt = now + d.ResetAfter
	if cost > 0 {
		s.set(SlidingWindow, k, prev, cur, w)
	}
}

// slidingRetry is the smallest whole d ≥ 1 with estimate(now+d) + cost ≤ rate
// for a denied request at offset x of its window. The estimate falls linearly
// within a window and is continuous across the seam, so the answer is either in
// this window or, with prev ← cur and cur ← 0, in the next.
func slidingRetry(rate, w, x, prev, cur, cost int64) int64 {
	if prev > 0 {
		// prev·(w − x − d) + cur·w + cost·w ≤ rate·w  ⇔  prev·(x + d) ≥ need
		need := (prev + cur + cost - rate) * w
		if xa := ceilDiv(need, prev); xa < w {
			return xa - x
		}
	}
	// In the next window: cur·(w − x2) + cost·w ≤ rate·w.
	x2 := int64(0)
	if need := (cur + cost - rate) * w; need > 0 {
		x2 = ceilDiv(need, cur)
	}
	return w - x + x2
}

// slidingLog keeps the admitted requests of the trailing period, oldest first.
func slidingLog(p *Params, s *State, now, cost int64, d *Decision) {
	var log []Entry
	if s.Kind == SlidingLog {
		log = s.Log
	}
	if n := len(log); n > 0 {
		now = max(now, log[n-1].T)
	}
	// Drop what has left the window (t − W, t], keeping the backing array.
	i := 0
	for i < len(log) && log[i].T <= now-p.Period {
		i++
	}
	if i > 0 {
		log = log[:copy(log, log[i:])]
	}
	used := int64(0)
	for _, e := range log {
		used += e.N
	}
	if used+cost <= p.Rate {
		d.Allowed = true
		if cost > 0 {
			if n := len(log); n > 0 && log[n-1].T == now {
				log[n-1].N += cost
			} else {
				log = append(log, Entry{T: now, N: cost})
			}
			used += cost
		}
	} else {
		left := used
		for _, e := range log {
			left -= e.N
			if left+cost <= p.Rate {
				d.RetryAfter = e.T + p.Period - now
				break
			}
		}
	}
	d.Remaining = max(0, p.Rate-used)
	if n := len(log); n > 0 {
		d.ResetAfter = log[n-1].T + p.Period - now
	}
	d.FreshAt = now + d.ResetAfter
	if cost > 0 || s.Kind == SlidingLog {
		s.Kind, s.Log = SlidingLog, log
	}
}
