package sim

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"

	"github.com/sluice-go/sluice/internal/algo"
)

// The explanations below restate each step's arithmetic in exact rationals
// (the contract's terms: tokens, TAT, windows), from the state before and the
// state and decision algo.Step returned; they decide nothing. A walk keeps
// one limit and goes forward in time, so a state is either fresh or written
// by the same limit: the "Changed limits" reading never comes up.

func rat(n int64) *big.Rat        { return new(big.Rat).SetInt64(n) }
func frac(a, b int64) *big.Rat    { return new(big.Rat).SetFrac64(a, b) }
func radd(a, b *big.Rat) *big.Rat { return new(big.Rat).Add(a, b) }
func rsub(a, b *big.Rat) *big.Rat { return new(big.Rat).Sub(a, b) }
func rmul(a, b *big.Rat) *big.Rat { return new(big.Rat).Mul(a, b) }
func rmax(a, b *big.Rat) *big.Rat {
	if a.Cmp(b) >= 0 {
		return a
	}
	return b
}
func rmin(a, b *big.Rat) *big.Rat {
	if a.Cmp(b) <= 0 {
		return a
	}
	return b
}

// num formats an exact number: "2", "2.5", "7/3 (≈2.333)".
func num(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	s := strings.TrimRight(r.FloatString(3), "0")
	if f, _ := new(big.Rat).SetString(s); f != nil && f.Cmp(r) == 0 {
		return s
	}
	return r.RatString() + " (≈" + s + ")"
}

// rdur formats an exact duration in µs: "250ms", "1000000/3µs (≈333.333ms)".
func rdur(r *big.Rat) string {
	if r.IsInt() {
		return fmtDur(r.Num().Int64())
	}
	whole := new(big.Int).Quo(r.Num(), r.Denom())
	return r.RatString() + "µs (≈" + fmtDur(whole.Int64()) + ")"
}

// rat time formats the exact time u + r/rate µs relative to the start.
func (w *Walk) ratTime(u, r, rate int64) string {
	if r == 0 {
		return w.at(u)
	}
	return w.at(u) + " + " + frac(r, rate).RatString() + "µs"
}

// window formats the aligned window k of period p: "k=…: [t+0s, t+1s)".
func (w *Walk) window(k, p int64) string {
	return fmt.Sprintf("k = %d: [%s, %s)", k, w.at(k*p), w.at((k+1)*p))
}

// state formats s as p's algorithm keeps it.
func (w *Walk) state(s algo.State) []Field {
	p := w.Params
	if s.Kind == 0 {
		return []Field{{"state", "fresh: nothing stored"}}
	}
	switch s.Kind {
	case algo.TokenBucket:
		lvl := frac(s.A, p.Period)
		return []Field{
			{"level", num(lvl) + " (units spent, not yet refilled)"},
			{"tokens", num(rsub(rat(p.Burst), lvl))},
			{"last update", w.at(s.B)},
		}
	case algo.GCRA:
		return []Field{{"TAT", w.ratTime(s.A, s.B, p.Rate)}, {"last seen", w.at(s.C)}}
	case algo.LeakyBucket:
		return []Field{{"queue empty at", w.ratTime(s.A, s.B, p.Rate)}, {"last seen", w.at(s.C)}}
	case algo.FixedWindow:
		return owed([]Field{{"window", fmt.Sprintf("[%s, %s)", w.at(s.B-p.Period), w.at(s.B))}, {"count", strconv.FormatInt(s.A, 10)}}, s.C)
	case algo.AlignedWindow:
		return owed([]Field{{"window", w.window(s.A, p.Period)}, {"count", strconv.FormatInt(s.B, 10)}}, s.C)
	case algo.SlidingWindow:
		return []Field{
			{"window", w.window(s.A, p.Period)},
			{"previous window's count", strconv.FormatInt(s.B, 10)},
			{"this window's count", strconv.FormatInt(s.C, 10)},
		}
	default:
		units := int64(0)
		for _, e := range s.Log {
			units += e.N
		}
		return []Field{{"log", w.logEntries(s.Log)}, {"units in the log", strconv.FormatInt(units, 10)}}
	}
}

// owed adds a window's debt to its fields, when it owes any: units
// charged past its rate, which the windows after it count.
func owed(fs []Field, o int64) []Field {
	if o > 0 {
		fs = append(fs, Field{"owed", strconv.FormatInt(o, 10) + " (charged past the rate: the next windows count them)"})
	}
	return fs
}

// logShown is how many of a sliding log's entries a state shows one by
// one: past it, the oldest and the newest, and how many are between. A log
// holds up to its rate's entries, and a walk shows the state before and
// after every step: in full, a walk of 1,000 requests under 1000/2h made
// 21.7 MB of JSON.
const logShown = 3

// logEntries writes a sliding log's entries, "t+0s ×1, t+5s ×2", or
// past logShown of them "t+0s ×1, … 98 more …, t+10m ×1".
func (w *Walk) logEntries(log []algo.Entry) string {
	entry := func(e algo.Entry) string { return w.at(e.T) + " ×" + strconv.FormatInt(e.N, 10) }
	switch {
	case len(log) == 0:
		return "none"
	case len(log) > logShown:
		return entry(log[0]) + ", … " + strconv.Itoa(len(log)-2) + " more …, " + entry(log[len(log)-1])
	}
	parts := make([]string, len(log))
	for i, e := range log {
		parts[i] = entry(e)
	}
	return strings.Join(parts, ", ")
}

// explain restates the step of r from s (before), which decided d and
// left after.
func (w *Walk) explain(s algo.State, r Arrival, d algo.Decision, after algo.State) []string {
	now, cost := r.T, r.Cost
	if r.Charge && cost > 0 {
		return w.explainCharge(s, now, cost, d)
	}
	var lines []string
	switch w.Params.Kind {
	case algo.TokenBucket:
		lines = w.explainTokenBucket(s, now, cost, d)
	case algo.GCRA, algo.LeakyBucket:
		lines = w.explainTAT(s, now, cost, d)
	case algo.FixedWindow:
		lines = w.explainFixed(s, now, cost, d)
	case algo.AlignedWindow:
		lines = w.explainAligned(s, now, cost, d)
	case algo.SlidingWindow:
		lines = w.explainSliding(s, now, cost, d)
	default:
		lines = w.explainLog(s, now, cost, d, after)
	}
	switch {
	case cost == 0 && r.Charge:
		lines = append(lines, "a charge of 0 is a query: nothing is stored")
	case cost == 0:
		lines = append(lines, "cost 0 is a query: nothing is stored")
	}
	return lines
}

// explainCharge explains a charge of units > 0 (algo.Charge): never
// refused, it spends the units past what the key has, down to its debt
// allowance; the units past that are forgiven.
func (w *Walk) explainCharge(s algo.State, now, units int64, d algo.Decision) []string {
	p := w.Params
	var lines []string
	switch p.Kind {
	case algo.TokenBucket:
		var lvl *big.Rat
		lines, lvl = w.bucketLevel(s, now)
		tokens := rsub(rat(p.Burst), lvl)
		charged := rmin(rat(units), radd(tokens, rat(p.Debt)))
		lines = append(lines,
			fmt.Sprintf("tokens = burst − level = %d − %s = %s", p.Burst, num(lvl), num(tokens)),
			fmt.Sprintf("charged = min(units, tokens + debt) = min(%d, %s + %d) = %s", units, num(tokens), p.Debt, num(charged)))
		lvl = radd(lvl, charged)
		tokens = rsub(rat(p.Burst), lvl)
		lines = append(lines, fmt.Sprintf("tokens → %s%s", num(tokens), inDebt(tokens)))
		lines = append(lines, forgiven(d, units, charged),
			fmt.Sprintf("remaining = ⌊tokens⌋ = ⌊%s⌋ = %d", num(tokens), d.Remaining),
			fmt.Sprintf("reset after = ⌈level × T⌉ = ⌈%s × %s⌉ = %s", num(lvl), rdur(frac(p.Period, p.Rate)), dur(d.ResetAfter)))
	case algo.GCRA:
		t := frac(p.Period, p.Rate)
		var backlog *big.Rat
		lines, backlog = w.tatBacklog(s, now, "TAT", p.Burst+p.Debt)
		room := rsub(rat(p.Burst+p.Debt), new(big.Rat).Quo(backlog, t))
		charged := rmin(rat(units), room)
		backlog = radd(backlog, rmul(charged, t))
		tokens := rsub(rat(p.Burst), new(big.Rat).Quo(backlog, t))
		lines = append(lines,
			fmt.Sprintf("charged = min(units, burst + debt − backlog / T) = min(%d, %s) = %s", units, num(room), num(charged)),
			fmt.Sprintf("TAT moves on by charged × T = %s: backlog %s, tokens = burst − backlog / T = %s%s", rdur(rmul(charged, t)), rdur(backlog), num(tokens), inDebt(tokens)),
			forgiven(d, units, charged),
			fmt.Sprintf("remaining = ⌊(burst × T − backlog) / T⌋ = %d", d.Remaining),
			fmt.Sprintf("reset after = ⌈backlog⌉ = ⌈%s⌉ = %s", rdur(backlog), dur(d.ResetAfter)))
	default: // the fixed and aligned windows
		var c, o int64
		lines, c, o = w.windowOpen(s, now, true)
		fill := min(units, max(0, p.Rate-c))
		owe := min(units-fill, p.Debt-o)
		lines = append(lines,
			fmt.Sprintf("fill = min(units, max(0, rate − count)) = min(%d, max(0, %d − %d)) = %d", units, p.Rate, c, fill),
			fmt.Sprintf("owe = min(units − fill, debt − owed) = min(%d, %d − %d) = %d", units-fill, p.Debt, o, owe),
			fmt.Sprintf("count → %d, owed → %d", c+fill, o+owe),
			forgiven(d, units, rat(fill+owe)),
			fmt.Sprintf("remaining = max(0, rate − count) − owed = %d − %d = %d", max(0, p.Rate-c-fill), o+owe, d.Remaining),
			windowReset("reset after = window end − now", o+owe, d))
	}
	return lines
}

// inDebt says, for tokens below 0, what the key owes.
func inDebt(tokens *big.Rat) string {
	if tokens.Sign() >= 0 {
		return ""
	}
	return " (in debt: owes " + num(new(big.Rat).Neg(tokens)) + ")"
}

// forgiven is the line saying whether a charge of units counted them all
// (charged of them): the decision's allowed.
func forgiven(d algo.Decision, units int64, charged *big.Rat) string {
	if d.Allowed {
		return "every unit charged (a charge is never refused; takes are, while the key owes)"
	}
	return fmt.Sprintf("%s of %d units forgiven, past the debt allowance (a charge is never refused: the key owes all it may)", num(rsub(rat(units), charged)), units)
}

// verdict is the line saying whether need ≤ room let the request pass.
func verdict(d algo.Decision, need, room string) string {
	if d.Allowed {
		return fmt.Sprintf("%s ≤ %s: allowed", need, room)
	}
	return fmt.Sprintf("%s > %s: denied, nothing spent; retry after %s", need, room, dur(d.RetryAfter))
}

// bucketLevel reads a token bucket's state s at now: the lines saying so,
// and its level (units spent, not yet refilled; past the burst in debt).
func (w *Walk) bucketLevel(s algo.State, now int64) ([]string, *big.Rat) {
	p := w.Params
	if s.Kind == 0 {
		return []string{fmt.Sprintf("a fresh key: level 0, %d tokens", p.Burst)}, rat(0)
	}
	t := frac(p.Period, p.Rate)
	e := now - s.B
	refill := frac(e, 1)
	refill.Quo(refill, t)
	lvl := rmin(rmax(rsub(frac(s.A, p.Period), refill), rat(0)), rat(p.Burst+p.Debt))
	return []string{fmt.Sprintf("%s since the last update refill %s units (one per T = %s): level %s → %s",
		fmtDur(e), num(refill), rdur(t), num(frac(s.A, p.Period)), num(lvl))}, lvl
}

func (w *Walk) explainTokenBucket(s algo.State, now, cost int64, d algo.Decision) []string {
	p := w.Params
	t := frac(p.Period, p.Rate)
	b := rat(p.Burst)
	lines, lvl := w.bucketLevel(s, now)
	tokens := rsub(b, lvl)
	lines = append(lines, fmt.Sprintf("tokens = burst − level = %d − %s = %s", p.Burst, num(lvl), num(tokens)))
	lines = append(lines, verdict(d, fmt.Sprintf("cost %d", cost), "tokens "+num(tokens)))
	if d.Allowed {
		lvl = radd(lvl, rat(cost))
		tokens = rsub(b, lvl)
	}
	lines = append(lines,
		fmt.Sprintf("remaining = ⌊tokens⌋ = ⌊%s⌋ = %d", num(tokens), d.Remaining),
		fmt.Sprintf("reset after = ⌈level × T⌉ = ⌈%s × %s⌉ = %s", num(lvl), rdur(t), dur(d.ResetAfter)))
	return lines
}

// tatBacklog reads the timestamp name of a gcra or leaky-bucket state s
// at now, at most capUnits × T ahead: the lines saying so, and its backlog
// (µs).
func (w *Walk) tatBacklog(s algo.State, now int64, name string, capUnits int64) ([]string, *big.Rat) {
	p := w.Params
	if s.Kind == 0 {
		return []string{fmt.Sprintf("a fresh key: %s = now, backlog 0", name)}, rat(0)
	}
	t := frac(p.Period, p.Rate)
	ts := radd(rat(s.A-now), frac(s.B, p.Rate))
	backlog := rmin(rmax(ts, rat(0)), rmul(rat(capUnits), t))
	return []string{fmt.Sprintf("backlog = max(0, %s − now) = %s = %s × T (T = %s)", name, rdur(backlog), num(new(big.Rat).Quo(backlog, t)), rdur(t))}, backlog
}

// explainTAT explains gcra (whose timestamp is the TAT, when the bucket is
// full again) and leaky-bucket (whose timestamp D is when its queue is
// empty): both keep backlog = timestamp − now, in units of T the level.
func (w *Walk) explainTAT(s algo.State, now, cost int64, d algo.Decision) []string {
	p := w.Params
	t := frac(p.Period, p.Rate)
	name, capUnits := "TAT", p.Burst+p.Debt
	if p.Kind == algo.LeakyBucket {
		name, capUnits = "D", p.Burst+1
	}
	lines, backlog := w.tatBacklog(s, now, name, capUnits)
	ct := rmul(rat(cost), t)
	if p.Kind == algo.GCRA {
		room := rmul(rat(p.Burst), t)
		lines = append(lines, verdict(d, fmt.Sprintf("backlog + cost × T = %s + %s = %s", rdur(backlog), rdur(ct), rdur(radd(backlog, ct))), "burst × T = "+rdur(room)))
		if d.Allowed {
			backlog = radd(backlog, ct)
			lines = append(lines, fmt.Sprintf("TAT moves on by cost × T = %s", rdur(ct)))
		}
		lines = append(lines, fmt.Sprintf("remaining = ⌊(burst × T − backlog) / T⌋ = %d", d.Remaining))
	} else {
		room := rmul(rat(p.Burst), t)
		last := radd(backlog, rmul(rat(cost-1), t))
		if cost == 0 {
			lines = append(lines, "a query is allowed: it reports the delay a request would wait")
		} else {
			lines = append(lines, verdict(d, fmt.Sprintf("the last unit's wait, backlog + (cost − 1) × T = %s", rdur(last)), "burst × T = "+rdur(room)))
		}
		if d.Allowed {
			lines = append(lines, fmt.Sprintf("delay = ⌈backlog⌉ = %s; D moves on by cost × T = %s", dur(d.Delay), rdur(ct)))
			backlog = radd(backlog, ct)
		}
		lines = append(lines, fmt.Sprintf("remaining = ⌊((burst + 1) × T − backlog) / T⌋ = %d", d.Remaining))
	}
	lines = append(lines, fmt.Sprintf("reset after = ⌈backlog⌉ = ⌈%s⌉ = %s", rdur(backlog), dur(d.ResetAfter)))
	return lines
}

func (w *Walk) explainFixed(s algo.State, now, cost int64, d algo.Decision) []string {
	p := w.Params
	lines, c, o := w.windowOpen(s, now, cost > 0)
	if lines == nil {
		return []string{"no window is open and a query opens none", fmt.Sprintf("remaining = rate = %d", d.Remaining)}
	}
	return append(countLines(lines, p.Rate, c, o, cost, d), windowReset("reset after = window end − now", o, d))
}

// windowReset is a window's reset after line, plain when it owes nothing:
// a debt runs to the end of the last window it reaches.
func windowReset(plain string, o int64, d algo.Decision) string {
	if o > 0 {
		return fmt.Sprintf("reset after = window end + ⌈owed / rate⌉ × period − now = %s (to the end of the last window the debt reaches)", dur(d.ResetAfter))
	}
	return fmt.Sprintf("%s = %s", plain, dur(d.ResetAfter))
}

// windowOpen reads a fixed or aligned window's state s at now, as a take
// (or a charge: opens) of units would: the lines saying so, and the count
// and the debt of the window of now. A window that owes is followed by
// others back to back, each counting what is still owed up to the rate,
// until the debt is paid.
func (w *Walk) windowOpen(s algo.State, now int64, opens bool) (lines []string, c, o int64) {
	p := w.Params
	if p.Kind == algo.AlignedWindow {
		k := now / p.Period
		switch {
		case s.Kind == 0:
		case s.A == k:
			c, o = s.B, s.C
		case s.C > 0 && k-s.A <= ceilDiv(s.C, p.Rate):
			c, o = carried(s.C, k-s.A, p.Rate)
			return []string{fmt.Sprintf("now is in window %s, the %s after window %d, which owed %d: it counts %d of what is owed and owes %d",
				w.window(k, p.Period), nth(k-s.A), s.A, s.C, c, o)}, c, o
		default:
			line := fmt.Sprintf("now is in window %s, which counts 0 (the count of window %d is left behind)", w.window(k, p.Period), s.A)
			return []string{line}, 0, 0
		}
		return []string{fmt.Sprintf("now is in window %s, which counts %d%s", w.window(k, p.Period), c, owing(o))}, c, o
	}
	end := int64(0)
	if s.Kind != 0 {
		c, end, o = s.A, s.B, s.C
	}
	switch {
	case now < end:
		lines = append(lines, fmt.Sprintf("now is in the open window [%s, %s), which counts %d%s", w.at(end-p.Period), w.at(end), c, owing(o)))
	case o > 0 && (now-end)/p.Period+1 <= ceilDiv(o, p.Rate):
		j := (now-end)/p.Period + 1
		c, o = carried(o, j, p.Rate)
		e := end + j*p.Period
		lines = append(lines, fmt.Sprintf("the window that ended at %s owed %d: the windows after it follow back to back while anything is owed; now is in the %s, [%s, %s), which counts %d of what is owed and owes %d",
			w.at(end), s.C, nth(j), w.at(e-p.Period), w.at(e), c, o))
	case opens:
		c, o = 0, 0
		lines = append(lines, fmt.Sprintf("no window is open: the request opens [%s, %s), count 0", w.at(now), w.at(now+p.Period)))
	}
	return lines, c, o
}

// carried is the count and debt of the j-th window after one that owed o
// under rate (j within the ⌈o/rate⌉ windows the debt reaches).
func carried(o, j, rate int64) (c, left int64) {
	o -= (j - 1) * rate
	c = min(o, rate)
	return c, o - c
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// nth names the j-th window after one: "next", "2nd", "3rd", "4th".
func nth(j int64) string {
	switch {
	case j == 1:
		return "next"
	case j%10 == 2 && j%100 != 12:
		return fmt.Sprintf("%dnd", j)
	case j%10 == 3 && j%100 != 13:
		return fmt.Sprintf("%drd", j)
	case j%10 == 1 && j%100 != 11:
		return fmt.Sprintf("%dst", j)
	}
	return fmt.Sprintf("%dth", j)
}

// owing is ", and owes o" for a window that owes, else "".
func owing(o int64) string {
	if o == 0 {
		return ""
	}
	return fmt.Sprintf(", and owes %d", o)
}

// countLines adds a window counter's verdict (count c owing o, cost asked,
// out of rate) and what remains after it to lines.
func countLines(lines []string, rate, c, o, cost int64, d algo.Decision) []string {
	lines = append(lines, verdict(d, fmt.Sprintf("count + cost = %d + %d = %d", c, cost, c+cost), fmt.Sprintf("rate %d", rate)))
	if d.Allowed {
		c += cost
	}
	if o > 0 {
		return append(lines, fmt.Sprintf("remaining = max(0, rate − count) − owed = %d − %d = %d", max(0, rate-c), o, d.Remaining))
	}
	return append(lines, fmt.Sprintf("remaining = rate − count = %d − %d = %d", rate, c, d.Remaining))
}

func (w *Walk) explainAligned(s algo.State, now, cost int64, d algo.Decision) []string {
	lines, c, o := w.windowOpen(s, now, true)
	if o > 0 {
		return append(countLines(lines, w.Params.Rate, c, o, cost, d), windowReset("", o, d))
	}
	return append(countLines(lines, w.Params.Rate, c, o, cost, d), fmt.Sprintf("reset after = %s (the window's end − now, while it counts anything)", dur(d.ResetAfter)))
}

func (w *Walk) explainSliding(s algo.State, now, cost int64, d algo.Decision) []string {
	p := w.Params
	k := now / p.Period
	prev, cur := int64(0), int64(0)
	if s.Kind != 0 {
		switch k - s.A {
		case 0:
			prev, cur = s.B, s.C
		case 1:
			prev = s.C
		}
	}
	x := now - k*p.Period
	share := frac(p.Period-x, p.Period)
	est := radd(rmul(rat(prev), share), rat(cur))
	lines := []string{
		fmt.Sprintf("now is %s into window %s: the previous window counts %d, this one %d", fmtDur(x), w.window(k, p.Period), prev, cur),
		fmt.Sprintf("estimate = previous × (window − elapsed)/window + this = %d × %s + %d = %s", prev, num(share), cur, num(est)),
		verdict(d, fmt.Sprintf("estimate + cost = %s", num(radd(est, rat(cost)))), fmt.Sprintf("rate %d", p.Rate)),
	}
	if d.Allowed {
		est = radd(est, rat(cost))
	}
	return append(lines,
		fmt.Sprintf("remaining = ⌊rate − estimate⌋ = ⌊%d − %s⌋ = %d", p.Rate, num(est), d.Remaining),
		fmt.Sprintf("reset after = %s (until no window that counts anything is in the estimate)", dur(d.ResetAfter)))
}

func (w *Walk) explainLog(s algo.State, now, cost int64, d algo.Decision, after algo.State) []string {
	p := w.Params
	used, gone := int64(0), 0
	for _, e := range s.Log {
		if e.T <= now-p.Period {
			gone++
			continue
		}
		used += e.N
	}
	lines := []string{fmt.Sprintf("the trailing period (%s, %s] holds %d units in %d entries", w.at(now-p.Period), w.at(now), used, len(s.Log)-gone)}
	if gone > 0 && cost > 0 {
		lines[0] += fmt.Sprintf("; %d older entries are dropped", gone)
	}
	lines = append(lines, verdict(d, fmt.Sprintf("used + cost = %d + %d = %d", used, cost, used+cost), fmt.Sprintf("rate %d", p.Rate)))
	if d.Allowed {
		used += cost
		if cost > 0 {
			lines = append(lines, fmt.Sprintf("the log records %s ×%d", w.at(now), after.Log[len(after.Log)-1].N))
		}
	} else {
		left := used
		for _, e := range s.Log {
			if e.T <= now-p.Period {
				continue
			}
			if left -= e.N; left+cost <= p.Rate {
				lines = append(lines, fmt.Sprintf("room for cost %d once the entries up to %s ×%d have left: at %s + period, retry after %s", cost, w.at(e.T), e.N, w.at(e.T), dur(d.RetryAfter)))
				break
			}
		}
	}
	return append(lines,
		fmt.Sprintf("remaining = rate − used = %d − %d = %d", p.Rate, used, d.Remaining),
		fmt.Sprintf("reset after = newest entry + period − now = %s", dur(d.ResetAfter)))
}
