package storelink

import (
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/store"
)

// AlgoParams is l in the steps' form.
func AlgoParams(l *store.Limit) algo.Params {
	return algo.Params{Kind: algo.Kind(l.Algorithm), Rate: l.Rate, Period: l.Period, Burst: l.Burst, Debt: l.Debt}
}

// SetParams sets *p to l in the steps' form, field by field: on a hot
// path, where a Params built and then copied (five fields are past what
// the compiler keeps in registers) stalls the CPU, which cannot forward
// the narrow stores that built it into the wide loads of the copy.
func SetParams(p *algo.Params, l *store.Limit) {
	p.Kind, p.Rate, p.Period, p.Burst, p.Debt = algo.Kind(l.Algorithm), l.Rate, l.Period, l.Burst, l.Debt
}

// LimitOf is p in the contract's form.
func LimitOf(p *algo.Params) store.Limit {
	return store.Limit{Algorithm: uint8(p.Kind), Rate: p.Rate, Period: p.Period, Burst: p.Burst, Debt: p.Debt}
}

// SetLimit sets *l to p in the contract's form, field by field (see
// SetParams).
func SetLimit(l *store.Limit, p *algo.Params) {
	l.Algorithm, l.Rate, l.Period, l.Burst, l.Debt = uint8(p.Kind), p.Rate, p.Period, p.Burst, p.Debt
}

// DecisionOf is d in the contract's form.
func DecisionOf(d *algo.Decision) store.Decision {
	return store.Decision{
		Allowed: d.Allowed, Remaining: d.Remaining, RetryAfter: d.RetryAfter,
		ResetAfter: d.ResetAfter, Delay: d.Delay, Window: d.Window,
	}
}

// SetDecision writes d into dst field by field: a store.Decision built
// and then copied would be read back, whole, from stores still on their
// way to memory, which stalls the hot path.
func SetDecision(dst *store.Decision, d *algo.Decision) {
	dst.Allowed, dst.Remaining, dst.RetryAfter = d.Allowed, d.Remaining, d.RetryAfter
	dst.ResetAfter, dst.Delay, dst.Window, dst.Degraded = d.ResetAfter, d.Delay, d.Window, false
}

// AlgoDecision is d in the steps' form (FreshAt 0).
func AlgoDecision(d *store.Decision) algo.Decision {
	return algo.Decision{
		Allowed: d.Allowed, Remaining: d.Remaining, RetryAfter: d.RetryAfter,
		ResetAfter: d.ResetAfter, Delay: d.Delay, Window: d.Window,
	}
}

// HoldOpOf is the steps' number of a hold operation's kind.
func HoldOpOf(k store.Kind) int64 {
	switch k {
	case store.Acquire:
		return algo.OpAcquire
	case store.Release:
		return algo.OpRelease
	case store.Extend:
		return algo.OpExtend
	}
	return 0
}
