package algo

// fixedWindow keeps the count A and the window's end B. A clock that went
// back is read at the window's start at the earliest. A changed period keeps
// an open window's start and count and moves its end; a changed rate keeps
// both.
func fixedWindow(p *Params, s *State, now, cost int64, d *Decision) {
	c, e := int64(0), int64(0)
	switch {
	case s.Kind == FixedWindow:
		c, e = s.A, s.B
		start := e - s.Period
		now = max(now, start)
		if s.Period != p.Period && now < e {
			e = start + p.Period
		}
	case s.Kind != 0:
		// Another algorithm's units, as if spent now in a window opened now.
		var u int64
		if u, now = held(s, now); u > 0 {
			c, e = min(u, p.Rate), now+p.Period
		}
	}
	if now >= e {
		if cost == 0 { // a query opens no window
			d.Allowed, d.Remaining, d.FreshAt = true, p.Rate, now
			return
		}
		c, e = 0, now+p.Period
	}
	if cost == 0 || c+cost <= p.Rate { // a query passes, even over a lowered rate
		d.Allowed = true
		c += cost
	} else {
		d.RetryAfter = e - now
	}
	d.Remaining = max(0, p.Rate-c)
	d.ResetAfter = e - now
	d.Window, d.FreshAt = e, e
	if cost > 0 {
		s.set(p, c, e, 0)
	}
}
