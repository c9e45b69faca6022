package algo

import "errors"

// Combine folds the decision d of one limit of a composite request into acc,
// the decision so far (start from the first limit's decision). A composite
// passes only if every limit grants; its RetryAfter is the largest of the
// refusals', Remaining the smallest, ResetAfter, Delay and FreshAt the
// largest.
func Combine(acc *Decision, d Decision) {
	acc.Allowed = acc.Allowed && d.Allowed
	acc.Remaining = min(acc.Remaining, d.Remaining)
	acc.ResetAfter = max(acc.ResetAfter, d.ResetAfter)
	acc.Delay = max(acc.Delay, d.Delay)
	acc.FreshAt = max(acc.FreshAt, d.FreshAt)
	acc.RetryAfter = max(acc.RetryAfter, d.RetryAfter)
	if acc.Allowed {
		acc.RetryAfter = 0
	}
}

// ErrNoRefund is returned by Refund for an algorithm that cannot give units
// back without risking admitting more than its limit: the windows would have
// to know which window the units were spent in, and a leaky bucket has
// already handed out the later turns.
var ErrNoRefund = errors.New("only token-bucket and gcra can give units back")

// Refund gives units back to the state s at time now, as if that many fewer
// had been spent, but never beyond the bucket's capacity: a refund cannot
// create capacity. It serves work whose real cost is known only afterwards,
// and undoing one limit of a composite that another refused. Like Step it
// updates *s in place; it returns what a query sees afterwards.
func Refund(p *Params, s *State, now, units int64) (Decision, error) {
	units = min(max(units, 0), p.Burst)
	switch p.Kind {
	case TokenBucket:
		if s.Kind == TokenBucket {
			xs, l := bucketAt(p, s, now)
			*s = State{Kind: TokenBucket, A: min(p.Burst*p.Period, xs+units*p.Period), B: l, Scale: p.Period}
		}
	case GCRA:
		if s.Kind == GCRA {
			now = seen(s, GCRA, now)
			_, _, bs := gcraAt(p, s, now)
			bs = max(0, bs-units*p.Period)
			*s = State{Kind: GCRA, A: now + bs/p.Rate, B: bs % p.Rate, C: now, Scale: p.Rate}
		}
	default:
		return Decision{}, ErrNoRefund
	}
	return Step(p, s, now, 0, Never), nil
}
