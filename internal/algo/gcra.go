package algo

// gcra keeps the theoretical arrival time TAT = A + B/Rate µs (B in [0, Rate)):
// the instant the bucket is full again. Its backlog TAT−now, scaled by Rate,
// equals the token bucket's level scaled by Period, so the two give the same
// decisions, debt included (a TAT past now + Burst·T). C is the latest time
// the key was seen: the decisions need only the TAT, but a clock that went
// back is read at C, as the token bucket reads it at its last update, so
// neither refills nor penalises.
func gcra(p *Params, s *State, now, cost int64, d *Decision) {
	full := p.Burst * p.Period
	tu, tr, bs, now := gcraLevel(p, s, now)
	if bs+cost*p.Period <= full || cost == 0 { // a query passes, even in debt
		d.Allowed = true
		tu, tr = addTime(tu, tr, cost*p.Period, p.Rate)
		bs += cost * p.Period
	} else {
		d.RetryAfter = ceilDiv(bs+cost*p.Period-full, p.Rate)
	}
	bucketFigures(p, full-bs, now, d)
	if cost > 0 {
		s.set(p, tu, tr, now)
	}
}

// gcraCharge moves the TAT on by units·T, at most to now + (Burst+Debt)·T
// (see Charge).
func gcraCharge(p *Params, s *State, now, units int64, d *Decision) {
	_, _, bs, at := gcraLevel(p, s, now)
	bs, d.Allowed = chargeLevel(p, bs, units)
	bucketFigures(p, p.Burst*p.Period-bs, at, d)
	s.set(p, at+bs/p.Rate, bs%p.Rate, at)
}

// gcraLevel is the TAT as (whole µs, remainder over Rate), its backlog
// scaled by Rate (at most (Burst+Debt)·Period), and the time it is read at.
func gcraLevel(p *Params, s *State, now int64) (tu, tr, bs, at int64) {
	if s.same(p) {
		at = max(now, s.C)
		tu, tr, bs = backlog(s.A, s.B, at, p.Rate, (p.Burst+p.Debt)*p.Period)
		return tu, tr, bs, at
	}
	bs, at = bucketLevel(p, s, now, p.Burst+p.Debt)
	return at + bs/p.Rate, bs % p.Rate, bs, at
}

// backlog clamps the timestamp u + r/rate into [now, now + limit/rate] and
// returns it with its distance from now scaled by rate. The upper clamp only
// acts after a shrunk burst or debt allowance.
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
