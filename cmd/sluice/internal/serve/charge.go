package serve

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
)

// A charge rule's descriptors (rlsconfig.Rule.Charge), and every limited
// descriptor of /v1/charge, are charged their hits whatever the answer
// (sluice.Limiter.Charge): a charge is never refused, and leaves the key in
// debt up to its limit's allowance. Such a descriptor is over the limit
// when its key could not have taken the hits, which the charge's own
// result tells: a take of h units passes when the key holds h (SEMANTICS.md,
// "Charges and debt"), so after a charge of h the key is below 0 (in debt,
// Remaining < 0) exactly when it held less than h, but when it could not
// owe them all: then some were forgiven (not Allowed). Hits of 0 charge
// nothing and are over exactly while the key is in debt: the check Envoy
// sends before a call whose cost it learns at the end.

// checkCharge checks descriptor i's part of a charge: an algorithm that
// can carry a debt, and hits within the units cap (o.Limits).
func (p *plan) checkCharge(i int, ds *descState, part sluice.Part, o *Options) error {
	if ds.rule.Limit.Rate > 0 && !canGiveBack(part.Limit) {
		return badRequest("descriptor %d: rule %q counts with %s, which cannot be charged (token-bucket, gcra, fixed-window and aligned-window can)",
			i, policyName(ds.rule), part.Limit.Algorithm)
	}
	return capped(o.Limits.Check(limits.Units, fmt.Sprintf("descriptor %d's hits (a charge)", i), part.Cost))
}

// decideCharges charges the call's charge parts, on each store in one
// ChargeAll (a Charge for one part), and leaves their answers in d. It
// reports whether a charge part not in shadow mode is over the limit, which
// refuses the call.
func (s *stores) decideCharges(ctx context.Context, p *plan, d *decision) (bool, error) {
	n := len(p.charges)
	d.chg, d.chgOver = grow(d.chg, n), grow(d.chgOver, n)
	d.chgComp = sluice.Result{Allowed: true, Remaining: math.MaxInt64}
	if n == 0 {
		return false, nil
	}
	var err error
	if s.lim2 == nil {
		err = s.chargeOn(ctx, s.lim, p.charges, d.chg)
	} else {
		err = s.chargeSplit(ctx, p.charges, d.chg)
	}
	if err != nil {
		return false, err
	}
	for i := range d.chg {
		r := &d.chg[i]
		d.chgOver[i] = chargeOver(r)
		d.chgComp.Allowed = d.chgComp.Allowed && r.Allowed
		d.chgComp.Remaining = min(d.chgComp.Remaining, r.Remaining)
		d.chgComp.ResetAfter = max(d.chgComp.ResetAfter, r.ResetAfter)
		d.chgComp.Degraded = d.chgComp.Degraded || r.Degraded
	}
	refuses := false
	for i := range p.desc {
		if ds := &p.desc[i]; ds.kind == kindCharge && !ds.zero && !ds.rule.Shadow && d.chgOver[ds.part] {
			refuses = true
			d.chgComp.RetryAfter = max(d.chgComp.RetryAfter, untilPaid(p.charges[ds.part].Limit, d.chg[ds.part]))
		}
	}
	return refuses, nil
}

// chargeOver reports whether a charge's hits did not fit: the key is in
// debt after it, or some were forgiven.
func chargeOver(r *sluice.Result) bool { return r.Remaining < 0 || !r.Allowed }

// chargeOn charges parts on lim, each part's result in res.
func (s *stores) chargeOn(ctx context.Context, lim *sluice.Limiter, parts []sluice.Part, res []sluice.Result) error {
	if len(parts) == 1 {
		r, err := lim.Charge(ctx, parts[0].Key, parts[0].Limit, parts[0].Cost)
		res[0] = r
		return err
	}
	_, err := lim.ChargeAll(ctx, parts, res)
	return err
}

// chargeSplit charges parts some of which may be per second (Options.
// PerSecondStore), each store's in one call: a charge is never refused,
// so the two need not agree.
func (s *stores) chargeSplit(ctx context.Context, parts []sluice.Part, res []sluice.Result) error {
	idx, group := splitPerSecond(parts)
	for g, lim := range [2]*sluice.Limiter{s.lim, s.lim2} {
		if len(group[g]) == 0 {
			continue
		}
		gres := make([]sluice.Result, len(group[g]))
		if err := s.chargeOn(ctx, lim, group[g], gres); err != nil {
			return err
		}
		for j, i := range idx[g] {
			res[i] = gres[j]
		}
	}
	return nil
}

// untilPaid is the wait until a key charged under l, which r describes,
// is out of debt (a check of 0 hits passes), with no other traffic; 0 when
// it is not in debt. A window in debt is full and owes −Remaining units,
// carried window after window: it is paid as the last window it reaches
// begins, a period before its ResetAfter. A bucket is paid when its level
// is back to its capacity, B·T before it is empty (its ResetAfter): a
// whole number of µs when the rate divides B·period, else the wait is
// rounded up, at most 1µs over.
func untilPaid(l sluice.Limit, r sluice.Result) time.Duration {
	if r.Remaining >= 0 {
		return 0
	}
	var d time.Duration
	switch l.Algorithm {
	case sluice.FixedWindow, sluice.AlignedWindow:
		d = r.ResetAfter - l.Period
	default:
		full := l.Burst * l.Period.Microseconds() / l.Rate // ⌊B·T⌋ µs
		d = r.ResetAfter - time.Duration(full)*time.Microsecond
	}
	return max(d, 0)
}
