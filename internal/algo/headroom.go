package algo

import "slices"

// StepHeadroom is StepTo for a request of a class that must leave headroom
// units for higher classes (SEMANTICS.md, "Headroom"): it passes only if the same
// request with cost + headroom would pass at now, and then spends only
// cost. Refused, it reports that larger request's refusal (its RetryAfter
// is the wait until this class could pass) and leaves *s as it was.
// Remaining is the class's: what the step reports, less headroom, at least
// 0 (a debt, negative, stays as it is). Preconditions: Step's, with 0 ≤
// cost + headroom ≤ p.Capacity() and headroom ≥ 0; a query (cost 0) and
// headroom 0 are Step's.
func StepHeadroom(p *Params, s *State, now, cost, headroom, maxDelay int64, d *Decision) {
	if headroom == 0 || cost == 0 {
		StepTo(p, s, now, cost, maxDelay, d)
		d.Remaining = ClassRemaining(d.Remaining, headroom)
		return
	}
	probe := *s
	if s.Log != nil {
		probe.Log = slices.Clone(s.Log) // the probe's step would reuse the array
	}
	StepTo(p, &probe, now, cost+headroom, maxDelay, d)
	if d.Allowed {
		*d = Decision{}
		StepTo(p, s, now, cost, maxDelay, d)
	} else {
		d.FreshAt = 0 // *s stands: its own FreshAt does
	}
	d.Remaining = ClassRemaining(d.Remaining, headroom)
}

// ClassRemaining is what a class leaving headroom units may still spend of
// remaining: less headroom, at least 0; a debt (remaining < 0) is the
// key's, whatever the class.
func ClassRemaining(remaining, headroom int64) int64 {
	if remaining < 0 {
		return remaining
	}
	return max(0, remaining-headroom)
}
