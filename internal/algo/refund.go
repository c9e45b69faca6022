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
// nothing to give back, and a count brought to 0 leaves the key fresh.
// window names the window the units were spent in (the Decision.Window of
// their take): when it is not 0 and is not the window the key is in now,
// nothing is given back, since the units were spent in a window that has
// ended. 0 gives back to whatever window the key is in. Buckets ignore it.
func Refund(p *Params, s *State, now, units, window int64) (Decision, error) {
	if p.Kind == FixedWindow || p.Kind == AlignedWindow {
		if s.Kind != 0 {
			now = refundWindow(p, s, now, max(units, 0), window)
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
// window opened now). A window that has ended, one that is not window (when
// window is not 0), or a state holding nothing, is left as it is; a count
// brought to 0 leaves s fresh, as its window would be. It returns the time
// the state was read at.
func refundWindow(p *Params, s *State, now, units, window int64) int64 {
	w := *s // the copy shares s.Log, which a window step never writes
	d := Step(p, &w, now, 1, Never)
	one := int64(0) // the unit the copy took
	if d.Allowed {
		one = 1
	}
	at := d.Window - d.ResetAfter // the copy holds a unit or more: ResetAfter runs to the end
	c := w.A - one                // fixed: count, end
	if p.Kind == AlignedWindow {
		c = w.B - one // aligned: window index, count
	}
	switch {
	case c <= 0 || (window != 0 && window != d.Window):
	case c <= units:
		*s = State{}
	case p.Kind == FixedWindow:
		s.set(p, c-units, w.B, 0)
	default:
		s.set(p, w.A, c-units, 0)
	}
	return at
}
