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
