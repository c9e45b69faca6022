package algo

// The fixed and aligned windows carry a debt the same way (SEMANTICS.md,
// "Charges and debt"). A window counts c units and, once full, owes o more,
// at most Debt: units charged past its rate. When it ends, the next window
// counts what was owed, up to its rate, and owes the rest, and so on: the
// units past a window's rate are counted in the windows after it, so that
// no span admits more than its windows' rates plus Debt.

// carry is the count and debt of the j-th window (j ≥ 1) after one that
// owed o under rate: 0, 0 once the debt is paid.
func carry(o, j, rate int64) (c, left int64) {
	if j > ceilDiv(o, rate) {
		return 0, 0
	}
	o -= (j - 1) * rate
	c = min(o, rate)
	return c, o - c
}

// fillWindow makes a window read under p whole: units owed fill a rate
// raised above the count first, and no more than p.Debt stay owed.
func fillWindow(p *Params, c, o int64) (int64, int64) {
	if o > 0 && c < p.Rate {
		m := min(o, p.Rate-c)
		c, o = c+m, o-m
	}
	return c, min(o, p.Debt)
}

// chargeCount counts units in a window holding c and owing o: up to the
// rate, then as a debt up to p.Debt. It reports whether they all counted.
func chargeCount(p *Params, c, o, units int64) (int64, int64, bool) {
	fill := min(units, max(0, p.Rate-c))
	owe := min(units-fill, p.Debt-o)
	return c + fill, o + owe, fill+owe == units
}

// retryWindow is the wait until cost units pass in the window ending at e
// that owes o, or in one after it: the first whose count, what is still
// owed then, leaves room.
func retryWindow(p *Params, o, e, now, cost int64) int64 {
	return e + ceilDiv(max(0, o+cost-p.Rate), p.Rate)*p.Period - now
}

// windowFigures writes the figures of a window counting c and owing o, that
// ends at e: Remaining, negative in debt; ResetAfter until every window the
// debt reaches has ended; Window; FreshAt.
func windowFigures(p *Params, c, o, e, now int64, d *Decision) {
	d.Remaining = max(0, p.Rate-c) - o
	if c > 0 {
		d.ResetAfter = e + ceilDiv(o, p.Rate)*p.Period - now
	}
	d.Window, d.FreshAt = e, now+d.ResetAfter
}
