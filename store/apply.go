package store

import (
	"errors"
	"fmt"
	"slices"

	"github.com/sluice-go/sluice/internal/algo"
)

// Apply decides op at now over states, the States of Keys(op) in that
// order (a zero State for a key the store does not hold), exactly as the
// stores of this module do: it writes op's answer (its Decision, each
// part's, its Expiry, or its Err) and updates states in place. Unless
// op.Err is set, the store then saves, in the same transaction, each State
// that Changed, and deletes those whose FreshAt is at or before now. (A
// failed op changed no state's meaning, though it may have rewritten a
// hold set in place: a store that keeps States in memory, not as bytes,
// puts them all back.)
//
// now is op.At, or the store's clock when op.At is 0 (µs since the epoch);
// outside [0, 2^52] it is an Err wrapping ErrInvalidTime. Apply trusts op
// to be checked as a Limiter checks it, but for its limits (an Err
// wrapping sluice.ErrInvalidLimit). It does not read Degraded.
func Apply(op *Op, now int64, states []State) {
	op.Decision, op.Expiry = Decision{}, 0
	for i := range op.Parts {
		op.Parts[i].Decision = Decision{}
	}
	for i := range states {
		states[i].changed = false
	}
	op.Err = apply(op, now, states)
}

// apply is Apply, returning the op's error. An error comes before any
// answer is written.
func apply(op *Op, now int64, states []State) error {
	if err := algo.CheckTime(now); err != nil {
		return err
	}
	if err := check(op, states); err != nil {
		return err
	}
	switch op.Kind {
	case Take:
		if len(op.Parts) > 0 {
			acc, _ := takeAll(op.Parts, op.MaxDelay, now, states, false)
			op.Decision = decision(&acc)
			return nil
		}
		take(op, now, &states[0])
	case Refund:
		return refund(op, now, &states[0])
	case Reset:
		states[0], states[1] = State{changed: true}, State{changed: true}
	case Charge:
		if len(op.Parts) == 0 {
			d := charge(&op.Limit, op.Cost, now, &states[0])
			op.Decision = decision(&d)
			return nil
		}
		var acc algo.Decision
		for i := range op.Parts {
			d := charge(&op.Parts[i].Limit, op.Parts[i].Cost, now, &states[i])
			op.Parts[i].Decision = decision(&d)
			if i == 0 {
				acc = d
			} else {
				algo.Combine(&acc, d)
			}
		}
		op.Decision = decision(&acc)
	default:
		return hold(op, now, states)
	}
	return nil
}

// check returns why Apply cannot decide op over states: an op of no known
// kind, states that are not those of Keys(op), or an invalid limit.
func check(op *Op, states []State) error {
	keys := Keys(op)
	switch {
	case keys == nil:
		return fmt.Errorf("store: op kind %d: %w", op.Kind, errors.ErrUnsupported)
	case len(states) != len(keys):
		return fmt.Errorf("store: %d states for the %d keys of the op", len(states), len(keys))
	}
	for i, k := range keys {
		if st := &states[i]; k.Holds && st.rate.Kind != 0 || !k.Holds && st.holds.Len() != 0 {
			return fmt.Errorf("%w: state %d, of %s, is another kind's", ErrMalformedState, i, k)
		}
	}
	switch {
	case op.Kind == Reset:
		return nil
	case op.Kind == Refund || op.Kind == Take && len(op.Parts) == 0:
		return params(&op.Limit).Validate()
	case op.Kind == Charge && len(op.Parts) == 0:
		return checkCharge(&op.Limit)
	case op.Kind != Take && op.Kind != Charge:
		c := concurrency(&op.Concurrency)
		if err := c.Validate(); err != nil {
			return err
		}
	}
	for i := range op.Parts {
		err := params(&op.Parts[i].Limit).Validate()
		if err == nil && op.Kind == Charge {
			err = checkCharge(&op.Parts[i].Limit)
		}
		if err != nil {
			return fmt.Errorf("part %d (%q): %w", i, op.Parts[i].Key, err)
		}
	}
	return nil
}

// checkCharge returns why a Charge cannot be made under l: an invalid
// limit, or an algorithm that cannot carry a debt (ErrNoRefund).
func checkCharge(l *Limit) error {
	p := params(l)
	if err := p.Validate(); err != nil {
		return err
	}
	if !algo.Chargeable(p.Kind) {
		return fmt.Errorf("store: charge under %s: %w", p.Kind, ErrNoRefund)
	}
	return nil
}

// take decides a Take of one limit on its state st (memstore's decide, and
// decideHeadroom with Headroom).
func take(op *Op, now int64, st *State) {
	p := params(&op.Limit)
	var d algo.Decision
	algo.StepHeadroom(&p, &st.rate, now, op.Cost, op.Headroom, op.MaxDelay, &d)
	if op.Cost > 0 && d.FreshAt != 0 { // 0: a refusal that left the state
		st.wrote(d.FreshAt)
	}
	op.Decision = decision(&d)
}

// refund gives op.Cost units back to the state st (memstore's refund). A
// refund that left the state as it was (a window's on a state holding
// nothing) keeps its FreshAt, as a query does.
func refund(op *Op, now int64, st *State) error {
	p := params(&op.Limit)
	before := st.rate
	d, err := algo.Refund(&p, &st.rate, now, op.Cost, op.Window)
	if err != nil {
		return fmt.Errorf("store: refund under %s: %w", p.Kind, err)
	}
	if !sameRate(&before, &st.rate) {
		st.wrote(d.FreshAt)
	}
	op.Decision = decision(&d)
	return nil
}

// charge charges cost units under l on the state st (memstore's
// runCharge and chargeAll), and returns its decision.
func charge(l *Limit, cost, now int64, st *State) algo.Decision {
	p := params(l)
	var d algo.Decision
	algo.Charge(&p, &st.rate, now, cost, &d)
	if cost > 0 {
		st.wrote(d.FreshAt)
	}
	return d
}

// sameRate reports whether a and b hold the same fields, a sliding log's
// entries compared by their array and length.
func sameRate(a, b *algo.State) bool {
	return a.Kind == b.Kind && a.A == b.A && a.B == b.B && a.C == b.C && a.Rate == b.Rate && a.Period == b.Period &&
		len(a.Log) == len(b.Log) && (len(a.Log) == 0 || &a.Log[0] == &b.Log[0])
}

// takeAll decides the composite of parts, part i on states[i], at now
// (memstore's takeAllUnless): every part steps on a copy of its state,
// kept only if every part grants and veto (a hold that did not fit) is
// not set. It writes each part's Decision and returns the summary and the
// parts' decisions.
func takeAll(parts []Part, maxDelay, now int64, states []State, veto bool) (acc algo.Decision, each []algo.Decision) {
	each = make([]algo.Decision, len(parts))
	steps := make([]algo.State, len(parts))
	for i := range parts {
		p := params(&parts[i].Limit)
		steps[i] = states[i].rate
		steps[i].Log = slices.Clone(steps[i].Log) // the step would reuse the array
		algo.StepHeadroom(&p, &steps[i], now, parts[i].Cost, parts[i].Headroom, maxDelay, &each[i])
		if i == 0 {
			acc = each[i]
		} else {
			algo.Combine(&acc, each[i])
		}
	}
	if veto {
		acc.Allowed = false
	}
	if acc.Allowed {
		for i := range parts {
			if parts[i].Cost > 0 {
				states[i].rate = steps[i]
				states[i].wrote(each[i].FreshAt)
			}
		}
	} else {
		refused(parts, maxDelay, now, states, &acc, each)
	}
	for i := range parts {
		parts[i].Decision = decision(&each[i])
	}
	return acc, each
}

// refused turns the decisions of a refused composite into what it
// reports: nothing was spent, so each part reports a look (algo.RefusedPart)
// and the summary the looks' figures (algo.Refused).
func refused(parts []Part, maxDelay, now int64, states []State, acc *algo.Decision, each []algo.Decision) {
	looks := make([]algo.Decision, len(parts))
	for i := range parts {
		p := params(&parts[i].Limit)
		st := states[i].rate // a query leaves it as it is
		algo.StepHeadroom(&p, &st, now, 0, parts[i].Headroom, maxDelay, &looks[i])
		algo.RefusedPart(&each[i], &looks[i])
	}
	algo.Refused(acc, looks)
}

// holdOps are the hold steps of the hold ops.
var holdOps = map[Kind]int64{Acquire: algo.OpAcquire, Release: algo.OpRelease, Extend: algo.OpExtend}

// hold runs a hold op on its hold set, states[0], and a composite
// Acquire's parts on states[1:] (memstore's holdStep and holdAll).
func hold(op *Op, now int64, states []State) error {
	c := concurrency(&op.Concurrency)
	st := &states[0]
	kept := st.holds.Len()
	var d algo.Decision
	exp, err := algo.HoldStep(&c, &st.holds, holdOps[op.Kind], now, op.Cost, op.ID, &d)
	if err != nil {
		return fmt.Errorf("store: hold %d of %q: %w", op.ID, op.Key, err)
	}
	sum := d
	if len(op.Parts) > 0 && op.Kind == Acquire {
		exp, sum = acquireAll(op, &c, now, states, exp, &d)
	}
	if kept > 0 || st.holds.Len() > 0 {
		st.wrote(d.FreshAt)
	}
	op.Decision, op.Expiry = decision(&sum), exp
	return nil
}

// acquireAll decides a composite Acquire's parts once its hold has
// stepped (*d, held until exp when granted): they are refused outright
// when the hold did not fit; when they refuse, the hold is given back and
// reports a look (a query), allowed: it alone would have granted.
// It returns the hold's expiry and the summary: the fold of the hold's
// decision and the parts'.
func acquireAll(op *Op, c *algo.Concurrency, now int64, states []State, exp int64, d *algo.Decision) (int64, algo.Decision) {
	acc, each := takeAll(op.Parts, op.MaxDelay, now, states[1:], !d.Allowed)
	if !acc.Allowed && d.Allowed {
		held := &states[0].holds
		if exp > 0 {
			algo.HoldStep(c, held, algo.OpRelease, now, 0, op.ID, d)
		}
		*d = algo.Decision{}
		algo.HoldStep(c, held, algo.OpAcquire, now, 0, op.ID, d)
		exp = 0
	}
	sum := *d
	for i := range each {
		algo.Combine(&sum, each[i])
	}
	return exp, sum
}

// params is l in the form the steps take.
func params(l *Limit) algo.Params {
	return algo.Params{Kind: algo.Kind(l.Algorithm), Rate: l.Rate, Period: l.Period, Burst: l.Burst, Debt: l.Debt}
}

// concurrency is c in the form the steps take.
func concurrency(c *Concurrency) algo.Concurrency {
	return algo.Concurrency{Limit: c.Limit, Lifetime: c.Lifetime}
}

// decision is d as an Op reports it.
func decision(d *algo.Decision) Decision {
	return Decision{Allowed: d.Allowed, Remaining: d.Remaining, RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter, Delay: d.Delay, Window: d.Window}
}
