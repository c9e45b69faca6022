package model

import (
	"fmt"
	"math/big"

	"github.com/sluice-go/sluice/internal/algo"
)

// Charge decides a charge of units for key under lim at now (see
// Model.Charge).
func (ks *Keys) Charge(key string, lim Limit, now, units int64) (algo.Decision, *big.Rat) {
	return ks.Model(lim).Charge(key, now, units)
}

// Charge spends units of key at time now (µs) whatever the key has, as
// SEMANTICS.md's "Charges and debt" says, and returns the decision and the
// units it charged (fewer than units when the rest was forgiven; a
// fraction of a unit under a bucket). The state is read as the limit reads
// it (carry); then:
//
//	token-bucket:  x ← min(B, x + (t − l)/T);  charged = min(units, x + D);  x ← x − charged
//	gcra:          TAT ← max(TAT, t);  charged = min(units, (t + (B + D)·T − TAT)/T);  TAT ← TAT + charged·T
//	fixed-window, aligned-window: the window of t (a fixed window opened at t if none is open)
//	               counts up to its rate, then owes up to D:
//	               fill = min(units, max(0, rate − c));  owe = min(units − fill, D − o)
//	               c ← c + fill;  o ← o + owe;  charged = fill + owe
//
// The decision is a query's afterwards (Remaining negative in debt), but
// for Allowed: whether every unit was charged. Units 0 is a query. It
// panics under the other algorithms, for units < 0, or when now is before
// the key's previous time.
func (m *Model) Charge(key string, now, units int64) (algo.Decision, *big.Rat) {
	if units < 0 || !m.lim.chargeable() {
		panic(fmt.Sprintf("model: a charge of %d under %v", units, m.lim.Kind))
	}
	if units == 0 {
		return m.Take(key, now, 0), rat(0)
	}
	st, _ := m.read(key, now)
	var charged *big.Rat
	switch m.lim.Kind {
	case algo.TokenBucket, algo.GCRA:
		lv := rat(0)
		if st.x != nil || st.tat != nil {
			lv = st.level(now)
		}
		charged = minRat(rat(units), sub(rat(m.lim.Burst+m.lim.Debt), lv))
		m.setLevel(st, now, add(lv, charged))
	default:
		if !m.openWindow(st, now) {
			st.open, st.c, st.o, st.e = true, 0, 0, now+m.lim.Period
		}
		fill := min(units, max(0, m.lim.Rate-st.c))
		owe := min(units-fill, m.lim.Debt-st.o)
		st.c, st.o = st.c+fill, st.o+owe
		charged = rat(fill + owe)
	}
	m.store(key, st, now)
	d := m.Take(key, now, 0)
	d.Allowed = charged.Cmp(rat(units)) == 0
	return d, charged
}

// A Spend is units a key spent at T: admitted by a take or charged
// (Units > 0; a charge under a bucket may spend a fraction of a unit), or
// given back by a refund (Units < 0: the units the refund asked for).
type Spend struct {
	T     int64
	Units *big.Rat
}

// CheckDebtBound checks SEMANTICS.md's bound under debt for the spends of
// one key under lim: in every span [a, b], the units admitted plus charged
// never exceed what lim allows there without debt, plus lim.Debt, plus the
// units refunded in [a, b]. What lim allows is Burst + (b − a)/T for
// token-bucket and gcra, and Rate for every window [a, b] meets for
// fixed-window (at most ⌊(b − a)/Period⌋ + 2) and aligned-window. spends
// are in time order. It returns the first span that breaks the bound, or
// nil.
func CheckDebtBound(lim Limit, spends []Spend) error {
	lim.check()
	if !lim.chargeable() {
		return fmt.Errorf("model: %v carries no debt", lim.Kind)
	}
	// Every quantity is scaled by the period under the buckets, where a
	// charge spends whole fractions of a unit over T = period/rate:
	// integers, then.
	scale := int64(1)
	if lim.bucket() {
		scale = lim.Period
	}
	units := make([]int64, len(spends))
	for i, sp := range spends {
		u := mul(sp.Units, rat(scale))
		if !u.IsInt() {
			return fmt.Errorf("model: spend %d: %s units are not whole over the period", i, sp.Units.RatString())
		}
		units[i] = u.Num().Int64()
	}
	for i := range spends {
		if i > 0 && spends[i-1].T == spends[i].T {
			continue // a span starts before every spend of its first instant
		}
		var spent, back int64
		for j := i; j < len(spends); j++ {
			if units[j] > 0 {
				spent += units[j]
			} else {
				back -= units[j]
			}
			if j+1 < len(spends) && spends[j+1].T == spends[j].T {
				continue // and ends after every spend of its last
			}
			a, b := spends[i].T, spends[j].T
			if bound := allowed(lim, a, b) + lim.Debt*scale + back; spent > bound {
				return fmt.Errorf("%d/%d units admitted and charged in [%d, %d] (%d µs), bound %d/%d (%d/%d refunded)",
					spent, scale, a, b, b-a, bound, scale, back, scale)
			}
		}
	}
	return nil
}

// allowed is what lim admits in [a, b] without debt (CheckDebtBound),
// scaled by the period under the buckets.
func allowed(lim Limit, a, b int64) int64 {
	switch lim.Kind {
	case algo.TokenBucket, algo.GCRA:
		return lim.Burst*lim.Period + (b-a)*lim.Rate
	case algo.AlignedWindow:
		return lim.Rate * (b/lim.Period - a/lim.Period + 1)
	}
	return lim.Rate * ((b-a)/lim.Period + 2)
}

// ChargeEach is the contract's composite charge: models[i] charges
// costs[i] units to keys[i], every part, none refused, each as Charge
// states it, its decision in each[i] (each is as long as models). The
// summary is their fold: Allowed when every part charged every unit,
// Remaining the smallest, ResetAfter the largest, RetryAfter and Delay 0,
// and no Window when there is more than one part.
func ChargeEach(models []*Model, keys []string, costs []int64, now int64, each []algo.Decision) algo.Decision {
	for i, m := range models {
		each[i], _ = m.Charge(keys[i], now, costs[i])
	}
	return fold(each)
}
