package algo

// Combine folds the decision d of one limit of a composite request into acc,
// the decision so far (start from the first limit's decision), as
// SEMANTICS.md's "Composite limits" says for an admitted request: Remaining
// the smallest, ResetAfter, Delay and FreshAt the largest, RetryAfter 0, and
// no Window (a window is one part's). A refused composite spends nothing;
// its decision is Refused's.
func Combine(acc *Decision, d Decision) {
	acc.Window = 0
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

// Refused turns the decision of a refused composite, folded by Combine from
// its parts' decisions, into what SEMANTICS.md reports: nothing was spent, so
// Remaining and ResetAfter come from looks (cost 0) at every part — looks[i]
// is part i's look — Delay is 0 and RetryAfter stays the largest of the
// refusing parts'. FreshAt is the largest of the looks'; Window is 0.
func Refused(acc *Decision, looks []Decision) {
	acc.Allowed, acc.Delay, acc.Window = false, 0, 0
	for i, l := range looks {
		if i == 0 {
			acc.Remaining, acc.ResetAfter, acc.FreshAt = l.Remaining, l.ResetAfter, l.FreshAt
			continue
		}
		acc.Remaining = min(acc.Remaining, l.Remaining)
		acc.ResetAfter = max(acc.ResetAfter, l.ResetAfter)
		acc.FreshAt = max(acc.FreshAt, l.FreshAt)
	}
}

// RefusedPart turns *d, one part's decision in a composite that was refused,
// into what SEMANTICS.md says that part reports: nothing was spent, so its
// Remaining, ResetAfter and FreshAt are look's (the part's look, cost 0, at
// the same instant; look may be d itself when d's figures are a look's
// already, as a refusal's are) and Delay is 0; Allowed stays whether the part
// alone would have granted, and RetryAfter is the part's own when it would
// not, else 0.
func RefusedPart(d, look *Decision) {
	retry := d.RetryAfter
	if d.Allowed {
		retry = 0
	}
	*d = Decision{Allowed: d.Allowed, Remaining: look.Remaining, RetryAfter: retry, ResetAfter: look.ResetAfter, FreshAt: look.FreshAt}
}
