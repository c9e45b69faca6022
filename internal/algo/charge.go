package algo

// Charge spends units of the state s at time now under p whatever the key
// has, for work already done whose cost is known only afterwards
// (SEMANTICS.md, "Charges and debt"). It is never refused: the units are
// spent past what the key has, leaving it in debt, up to p.Debt units past
// empty; the units past that are forgiven, and the decision is then not
// Allowed. Takes are refused while the key is in debt, with the RetryAfter
// at which the debt is paid and they can pass.
//
// The decision is what a query sees afterwards (Remaining negative in debt:
// −Remaining is the debt, rounded up to whole units), but for Allowed,
// which reports whether every unit was charged. Units 0 is a query. Like
// Step it updates *s in place and writes the decision into *d, which must
// be zero.
//
// Preconditions: p is valid and Chargeable(p.Kind), units ≥ 0 (any size:
// what does not fit is forgiven), now passes CheckTime.
func Charge(p *Params, s *State, now, units int64, d *Decision) {
	if units == 0 {
		StepTo(p, s, now, 0, Never, d)
		return
	}
	switch p.Kind {
	case TokenBucket:
		tokenBucketCharge(p, s, now, units, d)
	case GCRA:
		gcraCharge(p, s, now, units, d)
	case FixedWindow:
		fixedWindowCharge(p, s, now, units, d)
	case AlignedWindow:
		alignedWindowCharge(p, s, now, units, d)
	default:
		panic("algo: Charge under an algorithm that cannot carry a debt; check Chargeable first")
	}
}
