package algo

// slidingWindow keeps the index of the current window A (windows of Period µs
// since the epoch), the previous window's count B and the current one's C.
// A changed rate keeps the counts; a changed period, whose windows do not
// line up with the old ones, carries the estimate (rounded up) into the
// current window.
func slidingWindow(p *Params, s *State, now, cost int64, d *Decision) {
	w := p.Period
	prev, cur := int64(0), int64(0)
	k := now / w
	switch {
	case s.Kind == SlidingWindow && s.Period == w:
		if k < s.A { // the clock went back across a window: read at its start
			k, now = s.A, s.A*w
		}
		switch k - s.A {
		case 0:
			prev, cur = s.B, s.C
		case 1:
			prev = s.C
		}
	case s.Kind != 0:
		var u int64
		u, now = held(s, now)
		k, cur = now/w, min(u, p.Rate)
	}
	x := now - k*w
	es := prev*(w-x) + cur*w // the estimate, scaled by w
	if cost == 0 || es+cost*w <= p.Rate*w {
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
		s.set(p, k, prev, cur)
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
