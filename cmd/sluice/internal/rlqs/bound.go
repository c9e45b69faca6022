package rlqs

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// This file is the exact model of SEMANTICS.md's "RLQS": what the
// clients of one budget enforced, and what they admitted, checked
// against the bound, in integers.

// A Limiter is one token bucket a client enforced for a budget, from
// Start until End (µs, End excluded): Tokens per the budget's fill
// interval, a capacity of Burst (at most what it held when installed).
// A new limiter is one the client installed (a new assignment's
// parameters, or its fallback); an assignment resent with identical
// parameters extends it. Fallback marks a limiter of the client's own
// configuration (expired_assignment_behavior's fallback_rate_limit),
// whose rate no lease covers.
type Limiter struct {
	Start, End    int64
	Tokens, Burst int64
	Fallback      bool
}

// A Violation is a window that admitted more than the bound allows.
type Violation struct {
	From, To int64 // the window [From, To], µs
	Admitted int64
	// Excess is by how much the admissions pass the bound, in tokens
	// (rounded up).
	Excess int64
}

func (v *Violation) Error() string {
	return fmt.Sprintf("rlqs: %d admitted in [%d, %d]µs, %d over the bound", v.Admitted, v.From, v.To, v.Excess)
}

// maxExact bounds every product Check forms, so that int64 holds them.
const maxExact = 1 << 62

// Check checks admissions (µs instants, in any order) against the bound
// of a budget of rate tokens per fill (µs): in every window [a, b],
//
//	admitted ≤ rate·(b−a)/fill + Σ Burst of the limiters in force at some
//	           instant of [a, b] + Σ of each fallback limiter's
//	           Tokens·|its span ∩ [a, b]|/fill
//
// (limiters that replace one another in [a, b] each count their burst).
// It returns the worst window over it, nil when none; and an error when
// the trace does not fit its exact arithmetic. Sweeping the instants
// where something happens is exact: between them the right side only
// grows, so the worst windows start just before an event and end just
// after one.
func Check(rate, fill int64, limiters []Limiter, admissions []int64) (*Violation, error) {
	if rate < 0 || fill <= 0 {
		return nil, fmt.Errorf("rlqs: Check: rate %d, fill %d: want rate ≥ 0, fill > 0", rate, fill)
	}
	ev := events(limiters, admissions)
	if len(ev) == 0 {
		return nil, nil
	}
	last := ev[len(ev)-1].t
	if last >= maxExact/max(rate, 1) || int64(len(admissions)) >= maxExact/fill {
		return nil, fmt.Errorf("rlqs: Check: trace too long for exact arithmetic (last instant %dµs, %d admissions, rate %d per %dµs)", last, len(admissions), rate, fill)
	}
	// g(t) = N(t)·fill − rate·t − I(t)·fill − FB(t): admissions so far,
	// less the rate's allowance, the bursts of the limiters started so
	// far, and the fallback limiters' refill; a window [a, b] is within
	// the bound when g(b+) − g(a−) ≤ L(a−)·fill, L the bursts of the
	// limiters in force just before a.
	type point struct {
		t           int64
		before      int64 // g(t−) + L(t−)·fill
		after       int64 // g(t+)
		admittedBef int64 // N(t−)
		admittedAft int64 // N(t+)
	}
	pts := make([]point, 0, len(ev))
	var g, n, live, slope int64 // slope: fallback tokens in force
	t0 := ev[0].t
	prev := t0
	for i := 0; i < len(ev); {
		t := ev[i].t
		g -= (rate + slope) * (t - prev)
		if g < -maxExact || g > maxExact {
			return nil, fmt.Errorf("rlqs: Check: trace too long for exact arithmetic")
		}
		p := point{t: t, before: g + live*fill, admittedBef: n}
		for ; i < len(ev) && ev[i].t == t; i++ {
			e := ev[i]
			switch e.kind {
			case evAdmit:
				n++
				g += fill
			case evStart:
				g -= e.l.Burst * fill
				live += e.l.Burst
				if e.l.Fallback {
					slope += e.l.Tokens
				}
			case evEnd:
				live -= e.l.Burst
				if e.l.Fallback {
					slope -= e.l.Tokens
				}
			}
		}
		p.after, p.admittedAft = g, n
		pts = append(pts, p)
		prev = t
	}
	// The worst end for each start: the largest g(b+) at or after it.
	var best int64
	var worst *Violation
	sufMax, sufAt := int64(math.MinInt64), len(pts)-1
	for k := len(pts) - 1; k >= 0; k-- {
		if pts[k].after > sufMax {
			sufMax, sufAt = pts[k].after, k
		}
		if excess := sufMax - pts[k].before; excess > best {
			best = excess
			worst = &Violation{From: pts[k].t, To: pts[sufAt].t,
				Admitted: pts[sufAt].admittedAft - pts[k].admittedBef, Excess: ceilDiv(excess, fill)}
		}
	}
	return worst, nil
}

// CheckRates checks the leases as the clients enforced them: at every
// instant the leased limiters in force (all but the fallbacks) add up to
// at most rate tokens per fill. It returns the first instant where they
// do not, and their sum there; ok when none.
func CheckRates(rate int64, limiters []Limiter) (at, sum int64, ok bool) {
	ev := events(limiters, nil)
	for i := 0; i < len(ev); {
		t := ev[i].t
		for ; i < len(ev) && ev[i].t == t; i++ {
			if e := ev[i]; !e.l.Fallback {
				if e.kind == evStart {
					sum += e.l.Tokens
				} else {
					sum -= e.l.Tokens
				}
			}
		}
		if sum > rate {
			return t, sum, false
		}
	}
	return 0, 0, true
}

const (
	evEnd = iota // ends before starts at one instant: [Start, End)
	evStart
	evAdmit
)

type event struct {
	t    int64
	kind int
	l    *Limiter
}

// events are the limiters' starts and ends and the admissions, in time
// order.
func events(limiters []Limiter, admissions []int64) []event {
	ev := make([]event, 0, 2*len(limiters)+len(admissions))
	for i := range limiters {
		l := &limiters[i]
		if l.End <= l.Start {
			continue
		}
		ev = append(ev, event{l.Start, evStart, l}, event{l.End, evEnd, l})
	}
	for _, t := range admissions {
		ev = append(ev, event{t: t, kind: evAdmit})
	}
	slices.SortFunc(ev, func(a, b event) int {
		if c := cmp.Compare(a.t, b.t); c != 0 {
			return c
		}
		return cmp.Compare(a.kind, b.kind)
	})
	return ev
}
