package algo

// A limit travels with each call, so a key's state may be read under a limit
// other than the one that wrote it: another rate, period or burst, or another
// algorithm (a rolling deploy). SEMANTICS.md's "Changed limits" fixes how;
// the rule is that spent units are never forgotten. The functions here read a
// state under the limit that wrote it (the Rate and Period it records) at the
// moment of the call; each step then carries what they read into its own
// terms.

// bucketLevel reads s for a bucket algorithm (token-bucket, gcra,
// leaky-bucket) under p, whose capacity is capUnits: it returns the level
// (units spent and not yet refilled) scaled by p.Period, at most
// capUnits·p.Period (the capacity and the debt allowance), and the time it
// was read at, now or the state's own time if the clock went back. Between
// the buckets the level carries over exactly when the period is unchanged
// and in whole units (rounded up) when it changed; another algorithm's
// state counts the units it holds.
func bucketLevel(p *Params, s *State, now, capUnits int64) (ls, at int64) {
	if s.Kind == 0 {
		return 0, now
	}
	if !s.Kind.bucket() {
		u, at := held(s, now)
		return min(u, capUnits) * p.Period, at
	}
	ls, at = ownLevel(s, now)
	if s.Period != p.Period {
		return min(ceilDiv(ls, s.Period), capUnits) * p.Period, at
	}
	return min(ls, capUnits*p.Period), at
}

// ownLevel is a bucket state's level at now under the limit that wrote it,
// scaled by s.Period, and the time it was read at.
func ownLevel(s *State, now int64) (ls, at int64) {
	if s.Kind == TokenBucket {
		at = max(now, s.B)
		return drain(s.A, at-s.B, s.Rate), at
	}
	// gcra's TAT, leaky-bucket's D: (u + r/Rate − at)·Rate, at least 0.
	at = max(now, s.C)
	if s.A < at || s.A == at && s.B == 0 {
		return 0, at
	}
	return (s.A-at)*s.Rate + s.B, at
}

// held is the whole number of units s holds at now under the limit that
// wrote it (a bucket's level rounded up, its debt included; the count and
// debt of the window a fixed or aligned window's debt has carried into, a
// sliding window's estimate rounded up, a log's units in its trailing
// period), and the time it was read at: now, or the state's own time if the
// clock went back.
func held(s *State, now int64) (u, at int64) {
	switch s.Kind {
	case TokenBucket, GCRA, LeakyBucket:
		ls, at := ownLevel(s, now)
		return ceilDiv(ls, s.Period), at
	case FixedWindow:
		at = max(now, s.B-s.Period)
		c, o, _ := rollFixed(s.A, s.C, s.B, at, s.Rate, s.Period)
		return c + o, at
	case AlignedWindow:
		at = max(now, s.A*s.Period)
		c, o := s.B, s.C
		if j := at/s.Period - s.A; j > 0 {
			c, o = carry(o, j, s.Rate)
		}
		return c + o, at
	case SlidingWindow:
		w := s.Period
		at = max(now, s.A*w)
		k := at / w
		x := at - k*w
		switch k - s.A {
		case 0:
			return ceilDiv(s.B*(w-x)+s.C*w, w), at
		case 1:
			return ceilDiv(s.C*(w-x), w), at
		}
		return 0, at
	case SlidingLog:
		at = now
		if n := len(s.Log); n > 0 {
			at = max(now, s.Log[n-1].T)
		}
		for _, e := range s.Log {
			if e.T > at-s.Period {
				u += e.N
			}
		}
		return u, at
	}
	return 0, now
}

// bucket reports whether k keeps a level that refills (token-bucket, gcra,
// leaky-bucket).
func (k Kind) bucket() bool { return k == TokenBucket || k == GCRA || k == LeakyBucket }
