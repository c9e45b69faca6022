package algo

// alignedWindow keeps the index A of the window it counts in (windows of
// Period µs since the epoch: window k is [k·Period, (k+1)·Period)), its
// count B and the units it owes past its rate C (a debt, see window.go). A
// clock that went back is read at the window's start at the earliest. A
// changed rate keeps the count and debt; a changed period carries the units
// of a window still open into the new one holding now.
func alignedWindow(p *Params, s *State, now, cost int64, d *Decision) {
	c, o, k, now := alignedOpen(p, s, now)
	e := (k + 1) * p.Period
	if cost == 0 || c+cost <= p.Rate {
		d.Allowed = true
		c += cost
	} else {
		d.RetryAfter = retryWindow(p, o, e, now, cost)
	}
	windowFigures(p, c, o, e, now, d)
	if cost > 0 {
		s.set(p, k, c, o)
	}
}

// alignedWindowCharge counts units in the window of now, past its rate as
// a debt (see Charge).
func alignedWindowCharge(p *Params, s *State, now, units int64, d *Decision) {
	c, o, k, now := alignedOpen(p, s, now)
	c, o, d.Allowed = chargeCount(p, c, o, units)
	windowFigures(p, c, o, (k+1)*p.Period, now, d)
	s.set(p, k, c, o)
}

// alignedOpen reads s as an aligned window of p at now: the count and debt
// of the window k holding now, and the time it is read at. Its own state
// (same period) is read under the rate that wrote it, its debt carried
// through the windows that have ended; another's holds units spent now.
func alignedOpen(p *Params, s *State, now int64) (c, o, k, at int64) {
	w := p.Period
	if s.Kind == AlignedWindow && s.Period == w {
		now = max(now, s.A*w)
		c, o = s.B, s.C
		if j := now/w - s.A; j > 0 {
			c, o = carry(o, j, s.Rate)
		}
	} else if s.Kind != 0 {
		o, now = held(s, now)
	}
	c, o = fillWindow(p, c, o)
	return c, o, now / w, now
}
