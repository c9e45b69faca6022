package algo

// slidingLog keeps the admitted requests of the trailing period, oldest
// first. Its entries are absolute times, so a changed rate or period reads
// them as they are, but for those that had left the period of the limit
// that wrote them.
func slidingLog(p *Params, s *State, now, cost int64, d *Decision) {
	var log []Entry
	switch s.Kind {
	case SlidingLog:
		log = s.Log
	case 0:
	default:
		var u int64
		if u, now = held(s, now); u > 0 {
			log = []Entry{{T: now, N: min(u, p.Rate)}}
		}
	}
	if n := len(log); n > 0 {
		now = max(now, log[n-1].T)
	}
	// What has left the window (t − W, t], or had left the period of the
	// limit that wrote the log; a query drops nothing.
	w := p.Period
	if s.Kind == SlidingLog {
		w = min(w, s.Period)
	}
	i := 0
	for i < len(log) && log[i].T <= now-w {
		i++
	}
	live := log[i:]
	used := int64(0)
	for _, e := range live {
		used += e.N
	}
	if cost == 0 || used+cost <= p.Rate {
		d.Allowed = true
		used += cost
	} else {
		left := used
		for _, e := range live {
			left -= e.N
			if left+cost <= p.Rate {
				d.RetryAfter = e.T + p.Period - now
				break
			}
		}
	}
	d.Remaining = max(0, p.Rate-used)
	newest := int64(-1)
	if n := len(live); n > 0 {
		newest = live[n-1].T
	}
	if d.Allowed && cost > 0 {
		newest = now
	}
	if newest >= 0 {
		d.ResetAfter = newest + p.Period - now
	}
	d.FreshAt = now + d.ResetAfter
	if cost == 0 {
		return
	}
	if i > 0 && s.Kind == SlidingLog {
		log = log[:copy(log, log[i:])]
	} else {
		log = live
	}
	if d.Allowed {
		if n := len(log); n > 0 && log[n-1].T == now {
			log[n-1].N += cost
		} else {
			log = append(log, Entry{T: now, N: cost})
		}
	}
	s.Kind, s.A, s.B, s.C, s.Rate, s.Period, s.Log = SlidingLog, 0, 0, 0, p.Rate, p.Period, log
}
