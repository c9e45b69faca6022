package algo

// tokenBucket keeps the bucket's level (the units spent and not yet refilled,
// B − x) scaled by the period (A = level·Period, in [0, Burst·Period]) and the
// time of the last update (B = l). Refill over e µs takes e·Rate off A: one
// whole unit per T = Period/Rate, exactly. Keeping the level rather than the
// tokens is what lets a changed burst keep what was spent.
func tokenBucket(p *Params, s *State, now, cost int64, d *Decision) {
	full := p.Burst * p.Period
	var ls, at int64
	if s.same(p) {
		at = max(now, s.B) // a clock that went back reads the state at l
		ls = min(drain(s.A, at-s.B, p.Rate), full)
	} else {
		ls, at = bucketLevel(p, s, now, p.Burst)
	}
	xs := full - ls
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
	d.FreshAt = at + d.ResetAfter
	if cost > 0 {
		s.set(p, full-xs, at, 0)
	}
}

// drain is the scaled level ls after e ≥ 0 µs of refill at rate: ls − e·rate,
// at least 0, without the product (which may not fit in 2^53) when it
// empties the level.
func drain(ls, e, rate int64) int64 {
	if e >= ceilDiv(ls, rate) {
		return 0
	}
	return ls - e*rate
}
