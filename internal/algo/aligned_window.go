package algo

// alignedWindow keeps the index A of the window it counts in (windows of
// Period µs since the epoch: window k is [k·Period, (k+1)·Period)) and its
// count B. A clock that went back is read at the window's start at the
// earliest. A changed rate keeps the count; a changed period carries the
// units of a window still open into the new one holding now.
func alignedWindow(p *Params, s *State, now, cost int64, d *Decision) {
	w := p.Period
	c := int64(0)
	if s.Kind == AlignedWindow && s.Period == w {
		now = max(now, s.A*w)
		if now/w == s.A {
			c = s.B
		}
	} else if s.Kind != 0 {
		var u int64
		u, now = held(s, now)
		c = min(u, p.Rate)
	}
	k := now / w
	e := (k + 1) * w
	if cost == 0 || c+cost <= p.Rate {
		d.Allowed = true
		c += cost
	} else {
		d.RetryAfter = e - now
	}
	d.Remaining = max(0, p.Rate-c)
	if c > 0 {
		d.ResetAfter = e - now
	}
	d.Window, d.FreshAt = e, now+d.ResetAfter
	if cost > 0 {
		s.set(p, k, c, 0)
	}
}
