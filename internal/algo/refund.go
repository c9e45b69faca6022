package algo

import "errors"

// ErrNoRefund is returned by Refund for an algorithm that cannot give units
// back without risking admitting more than its limit: the sliding window and
// the sliding log would have to know when the units were spent, and a leaky
// bucket has already handed out the later turns. Stores answer it for a
// charge under such an algorithm too (see Chargeable).
var ErrNoRefund = errors.New("sluice: only token-bucket, gcra, fixed-window and aligned-window can give units back or charge them")

// Refund gives units back to the state s at time now, as if that many fewer
// had been spent, but never beyond the bucket's capacity: a refund cannot
// create capacity. It serves work whose real cost is known only afterwards,
// and undoing one limit of a composite that another refused. A key in debt
// (see Charge) pays its debt first. The state is read as p's algorithm
// reads it (a state another limit wrote included); a fresh state stays
// fresh. Like Step it updates *s in place; it returns what a query sees
// afterwards.
//
// A fixed or aligned window takes the units off the debt and then the count
// of the window the key is in, never below 0 (see refundWindow); a window
// that has ended has nothing to give back, and a window brought to 0 leaves
// the key fresh. window names the window the units were spent in (the
// Decision.Window of their take): when it is not 0 and is not the window
// the key is in now, nothing is given back, since the units were spent in
// a window that has ended. 0 gives back to whatever window the key is in.
// Buckets ignore it.
func Refund(p *Params, s *State, now, units, window int64) (Decision, error) {
	if !Chargeable(p.Kind) {
		return Decision{}, ErrNoRefund
	}
	if s.Kind != 0 {
		units = max(units, 0)
		switch p.Kind {
		case FixedWindow, AlignedWindow:
			now = refundWindow(p, s, now, units, window)
		default:
			now = refundBucket(p, s, now, units)
		}
	}
	return Step(p, s, now, 0, Never), nil
}

// refundBucket lowers a token bucket's or gcra's level by units, at least
// to 0, and returns the time it was read at.
func refundBucket(p *Params, s *State, now, units int64) int64 {
	ls, at := bucketLevel(p, s, now, p.Burst+p.Debt)
	ls = max(0, ls-min(units, p.Burst+p.Debt)*p.Period)
	if p.Kind == TokenBucket {
		s.set(p, ls, at, 0)
	} else {
		s.set(p, at+ls/p.Rate, ls%p.Rate, at)
	}
	return at
}

// refundWindow takes units off the debt, then the count, of the window s is
// in, never below 0, read as its step reads it (its own window, its debt
// carried, its end moved by a changed period, or the units another limit's
// state holds, in a window opened now). A window that has ended, one that
// is not window (when window is not 0), or a state holding nothing, is left
// as it is; a window brought to 0 leaves s fresh. It returns the time the
// state was read at.
func refundWindow(p *Params, s *State, now, units, window int64) int64 {
	var c, o, e, k int64
	if p.Kind == FixedWindow {
		c, o, e, now = fixedOpen(p, s, now)
	} else {
		c, o, k, now = alignedOpen(p, s, now)
		e = (k + 1) * p.Period
	}
	if c+o == 0 || window != 0 && window != e {
		return now
	}
	paid := min(units, o)
	c, o = max(0, c-(units-paid)), o-paid
	switch {
	case c+o == 0:
		*s = State{}
	case p.Kind == FixedWindow:
		s.set(p, c, e, o)
	default:
		s.set(p, k, c, o)
	}
	return now
}
