package algo

import "errors"

// ErrNoRefund is returned by Refund for an algorithm that cannot give units
// back without risking admitting more than its limit: the windows would have
// to know which window the units were spent in, and a leaky bucket has
// already handed out the later turns.
var ErrNoRefund = errors.New("sluice: only token-bucket and gcra can give units back")

// Refund gives units back to the state s at time now, as if that many fewer
// had been spent, but never beyond the bucket's capacity: a refund cannot
// create capacity. It serves work whose real cost is known only afterwards,
// and undoing one limit of a composite that another refused. The state is
// read as p's algorithm reads it (a state another limit wrote included);
// a fresh state stays fresh. Like Step it updates *s in place; it returns
// what a query sees afterwards.
func Refund(p *Params, s *State, now, units int64) (Decision, error) {
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
