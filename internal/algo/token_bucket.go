package algo

// tokenBucket keeps the bucket's level (the units spent and not yet refilled,
// B − x) scaled by the period (A = level·Period, in [0, (Burst+Debt)·Period])
// and the time of the last update (B = l). Refill over e µs takes e·Rate off A: one
// whole unit per T = Period/Rate, exactly. Keeping the level rather than the
// tokens is what lets a changed burst keep what was spent. A level past
// Burst·Period is a debt (see Charge): x is negative, and every take is
// refused until it has refilled.
func tokenBucket(p *Params, s *State, now, cost int64, d *Decision) {
	full := p.Burst * p.Period
	var ls, at int64
	if s.same(p) { // tokenLevel, inline on the hot path (a call costs more than its arithmetic)
		at = max(now, s.B) // a clock that went back reads the state at l
		ls = min(drain(s.A, at-s.B, p.Rate), full+p.Debt*p.Period)
	} else {
		ls, at = bucketLevel(p, s, now, p.Burst+p.Debt)
	}
	xs := full - ls
	if cost*p.Period <= xs || cost == 0 { // a query passes, even in debt
		d.Allowed = true
		xs -= cost * p.Period
	} else {
		d.RetryAfter = ceilDiv(cost*p.Period-xs, p.Rate)
	}
	bucketFigures(p, xs, at, d)
	if cost > 0 {
		s.set(p, full-xs, at, 0)
	}
}

// tokenLevel is the token bucket's scaled level at now, at most
// (Burst+Debt)·Period, and the time it is read at (see bucketLevel).
func tokenLevel(p *Params, s *State, now int64) (ls, at int64) {
	if !s.same(p) {
		return bucketLevel(p, s, now, p.Burst+p.Debt)
	}
	at = max(now, s.B) // a clock that went back reads the state at l
	return min(drain(s.A, at-s.B, p.Rate), (p.Burst+p.Debt)*p.Period), at
}

// bucketFigures writes the figures of a token bucket or gcra holding xs =
// (Burst − level)·Period at at: Remaining ⌊xs/Period⌋, negative in debt;
// ResetAfter and FreshAt when the level has refilled.
func bucketFigures(p *Params, xs, at int64, d *Decision) {
	switch {
	case xs >= p.Period: // most refusals have less than a unit left: no division
		d.Remaining = xs / p.Period
	case xs < 0:
		d.Remaining = -ceilDiv(-xs, p.Period)
	}
	d.ResetAfter = ceilDiv(p.Burst*p.Period-xs, p.Rate)
	d.FreshAt = at + d.ResetAfter
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

// tokenBucketCharge adds units to the level, at most Burst+Debt past full
// (see Charge).
func tokenBucketCharge(p *Params, s *State, now, units int64, d *Decision) {
	ls, at := tokenLevel(p, s, now)
	ls, d.Allowed = chargeLevel(p, ls, units)
	bucketFigures(p, p.Burst*p.Period-ls, at, d)
	s.set(p, ls, at, 0)
}

// chargeLevel adds units to the scaled level ls of a token bucket or gcra,
// up to (Burst+Debt)·Period, and reports whether they all fit. Units past
// Burst+Debt+1 never fit: counting them would only leave the exact range.
func chargeLevel(p *Params, ls, units int64) (int64, bool) {
	top := (p.Burst + p.Debt) * p.Period
	if u := min(units, p.Burst+p.Debt+1); u*p.Period <= top-ls {
		return ls + u*p.Period, true
	}
	return top, false
}
