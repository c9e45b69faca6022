package algo

import "errors"

// ErrNoRefund is returned by Refund for an algorithm that cannot give units
// back without risking admitting more than its limit: the sliding window and
// the sliding log would have to know when the units were spent, and a leaky
// bucket has already handed out the later turns.
var ErrNoRefund = errors.New("sluice: only token-bucket, gcra, fixed-window and aligned-window can give units back")

// Refund gives units back to the state s at time now, as if that many fewer
// had been spent, but never beyond the bucket's capacity: a refund cannot
// create capacity. It serves work whose real cost is known only afterwards,
// and undoing one limit of a composite that another refused. The state is
// read as p's algorithm reads it (a state another limit wrote included);
// a fresh state stays fresh. Like Step it updates *s in place; it returns
// what a query sees afterwards.
//
// A fixed or aligned window takes the units off the count of the window the
// key is in, never below 0 (see refundWindow); a window that has ended has
// nothing to give back.
func Refund(p *Params, s *State, now, units int64) (Decision, error) {
	if p.Kind == FixedWindow || p.Kind == AlignedWindow {
		if s.Kind != 0 {
			now = refundWindow(p, s, now, max(units, 0))
		}
		return Step(p, s, now, 0, Never), nil
	}
	if p.Kind != TokenBucket && p.Kind != GCRA {
		return Decision{}, ErrNoRefund
	}
	if s.Kind != 0 {
		units = min(max(units, 0), p.Burst)
		ls, at := bucketLevel(p, s, now, p.Burst)
		ls = max(0, ls-units*p.Period)
		if p.Kind == TokenBucket {
			s.set(p, ls, at, 0)
		} else {
			s.set(p, at+ls/p.Rate, ls%p.Rate, at)
		}
		now = at
	}
	return Step(p, s, now, 0, Never), nil
}

// refundWindow takes units off the count of the window s is in, never below
// 0. The window is read as its step reads it: a request of one unit, decided
// on a copy of s, carries the state into p's terms (its own window, its end
// moved by a changed period, or the units another limit's state holds, in a
// window opened now). A window that has ended, or a state holding nothing, is
// left as it is. It returns the time the state was read at.
func refundWindow(p *Params, s *State, now, units int64) int64 {
	w := *s // the copy shares s.Log, which a window step never writes
	d := Step(p, &w, now, 1, Never)
	one := int64(0) // the unit the copy took
	if d.Allowed {
		one = 1
	}
	if p.Kind == FixedWindow { // w: count, end
		if c := w.A - one; c > 0 {
			s.set(p, max(0, c-units), w.B, 0)
		}
		return w.B - d.ResetAfter
	}
	end := (w.A + 1) * p.Period // w: window index, count
	if c := w.B - one; c > 0 {
		s.set(p, w.A, max(0, c-units), 0)
	}
	if d.Allowed {
		return end - d.ResetAfter
	}
	return end - d.RetryAfter
}
