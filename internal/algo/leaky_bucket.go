package algo

// leakyBucket keeps D = A + B/Rate µs, the time the queue is empty again, and
// the latest time the key was seen (C), at which a clock that went back is
// read. Its backlog D − now, in units of T, is the level the other buckets
// keep: a leaky meter is the token bucket's machine.
func leakyBucket(p *Params, s *State, now, cost, maxDelay int64, d *Decision) {
	qs := p.Burst * p.Period // Q·T, scaled by Rate
	var du, dr, bs int64
	if s.same(p) {
		now = max(now, s.C)
		du, dr, bs = backlog(s.A, s.B, now, p.Rate, qs+p.Period)
	} else {
		bs, now = bucketLevel(p, s, now, p.Burst+1)
		du, dr = now+bs/p.Rate, bs%p.Rate
	}
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
		s.set(p, du, dr, now)
	}
}
