package queue

import "github.com/sluice-go/sluice/internal/algo"

// schedule is a queue's timing state, kept exact like algo's leaky bucket:
// D = u + r/scale µs (0 ≤ r < scale), the next free slot, and last, the
// instant of the latest release (-1 for none). scripts/prelude.lua mirrors
// every function here line by line.
//
// It shares algo's representation of D and its one-unit advance (take's
// D += T is algo's addTime) but not algo's step, because a slot here is an
// instant promised to a job rather than a level: algo's leaky bucket clamps
// D to now + (Burst+1)·T (backlog) and converts a level counted under
// another limit in units (bucketLevel), so a smaller Burst or a new Period
// pulls D back and would give a slot a second time, where settle keeps D as
// an absolute instant and only rounds it up to the µs on a new rate; algo
// reads a clock that went back at the latest time it saw (State.C), where
// the queue needs no such time because D never moves back anyway; algo
// grants only within Burst·T and its products stay in range for that
// reason, where a forced redelivery (take's force) is never refused and may
// push D any distance ahead, so take splits its retry sum to stay exact
// there; and the queue adds last, the spacing between releases, which a
// limiter has no use for. Factoring the shared part out would export algo's
// two-line addTime and ceilDiv and leave both steps as they are.
type schedule struct {
	u, r, scale int64
	last        int64
}

func freshSchedule() schedule { return schedule{last: -1} }

// settle reads the schedule at now under p: D counted in another rate is
// rounded up to the next whole µs, never earlier (algo's rescaleTime), and a
// D in the past is now (the queue is empty by then).
//
// Unlike algo's leaky bucket it never moves D back, not even after a clock
// that went back or a smaller Burst: a slot once given is never given again.
func (s *schedule) settle(p *algo.Params, now int64) {
	if s.scale != p.Rate {
		if s.r != 0 {
			s.u, s.r = s.u+1, 0
		}
		s.scale = p.Rate
	}
	if s.u < now || s.u == now && s.r == 0 {
		s.u, s.r = now, 0
	}
}

// take is the leaky bucket's step for one unit at now: it gives the slot
// s = max(now, D), rounded up to the µs, and moves D to s + T, or refuses
// when the slot is more than Burst·T away and returns the wait after which
// it would not be, ⌈(s − now − Burst·T)⌉ µs. force gives the slot in any case
// (a redelivery is never refused).
func (s *schedule) take(p *algo.Params, now int64, force bool) (slot, retry int64) {
	s.settle(p, now)
	// ⌈((u − now)·rate + r − Burst·period) / rate⌉, split so that no product
	// can leave the exact range however far D has been forced ahead.
	retry = s.u - now + ceilDivSigned(s.r-p.Burst*p.Period, p.Rate)
	if retry > 0 && !force {
		return 0, retry
	}
	slot = s.u
	if s.r > 0 {
		slot++
	}
	s.r += p.Period
	s.u += s.r / p.Rate
	s.r %= p.Rate
	return slot, 0
}

// earliest is the first instant a job of the given slot may be released:
// its slot, and no sooner than T after the previous release (⌈T⌉ µs, as
// instants are whole µs).
func (s *schedule) earliest(p *algo.Params, slot int64) int64 {
	if s.last >= 0 {
		slot = max(slot, s.last+ceilDiv(p.Period, p.Rate))
	}
	return slot
}

// ceilDiv is ⌈a/b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// ceilDivSigned is ⌈a/b⌉ for any a, b > 0.
func ceilDivSigned(a, b int64) int64 {
	if a >= 0 {
		return ceilDiv(a, b)
	}
	return -(-a / b)
}
