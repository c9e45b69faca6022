package algo

// fixedWindow keeps the count A, the window's end B and the units it owes
// past its rate C (a debt, see window.go). A clock that went back is read at
// the window's start at the earliest. A changed period keeps an open window's
// start, count and debt and moves its end; a changed rate keeps them.
func fixedWindow(p *Params, s *State, now, cost int64, d *Decision) {
	c, o, e, now := fixedOpen(p, s, now)
	if e == 0 {
		if cost == 0 { // a query opens no window
			d.Allowed, d.Remaining, d.FreshAt = true, p.Rate, now
			return
		}
		e = now + p.Period
	}
	if cost == 0 || c+cost <= p.Rate { // a query passes, even over a lowered rate
		d.Allowed = true
		c += cost
	} else {
		d.RetryAfter = retryWindow(p, o, e, now, cost)
	}
	windowFigures(p, c, o, e, now, d)
	if cost > 0 {
		s.set(p, c, e, o)
	}
}

// fixedWindowCharge counts units in the window open at now, or one it
// opens, past its rate as a debt (see Charge).
func fixedWindowCharge(p *Params, s *State, now, units int64, d *Decision) {
	c, o, e, now := fixedOpen(p, s, now)
	if e == 0 {
		e = now + p.Period
	}
	c, o, d.Allowed = chargeCount(p, c, o, units)
	windowFigures(p, c, o, e, now, d)
	s.set(p, c, e, o)
}

// fixedOpen reads s as a fixed window of p at now: the count, debt and end
// of the window open then (e 0: none), and the time it is read at. Its own
// state is read under the limit that wrote it, its debt carried through the
// windows that have ended; another algorithm's units are spent in a window
// opened now.
func fixedOpen(p *Params, s *State, now int64) (c, o, e, at int64) {
	switch {
	case s.Kind == FixedWindow:
		now = max(now, s.B-s.Period)
		c, o, e = rollFixed(s.A, s.C, s.B, now, s.Rate, s.Period)
		if s.Period != p.Period && e != 0 {
			c, o, e = rollFixed(c, o, e-s.Period+p.Period, now, p.Rate, p.Period)
		}
	case s.Kind != 0:
		if o, now = held(s, now); o > 0 {
			e = now + p.Period
		}
	}
	c, o = fillWindow(p, c, o)
	return c, o, e, now
}

// rollFixed is the fixed window (count c, debt o, end e) of rate units per
// period at now: itself while open, else the window its debt carries into
// (c 0 and e 0 when it owed too little to reach now).
func rollFixed(c, o, e, now, rate, period int64) (int64, int64, int64) {
	if now < e {
		return c, o, e
	}
	j := (now-e)/period + 1
	if c, o = carry(o, j, rate); c == 0 {
		return 0, 0, 0
	}
	return c, o, e + j*period
}
