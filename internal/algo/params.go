// Package algo holds sluice's rate-limiting algorithms as pure steps over small
// integer state.
//
// Each algorithm of SEMANTICS.md is a function Step(params, state, now, cost)
// that returns the next state and the decision. There is no clock, no I/O and no
// floating point: time is an integer number of microseconds passed in by the
// caller, and every rational quantity of the contract (the emission interval
// T = Period/Rate is one) is kept as scaled integers. Params.Validate bounds
// every intermediate below 2^53, so the same arithmetic is exact in Go's int64
// and in Lua's doubles; that is what lets the memory store and the Redis store
// give identical decisions.
//
// A store keeps the State somewhere (a map, a Redis key) and makes the step
// atomic; it adds nothing to the decision. The package is public for whoever
// writes a store of their own: sluice.Store says how to call it. Users of a
// sluice.Limiter never need it.
package algo

import (
	"errors"
	"fmt"
	"math/bits"
)

// Kind names an algorithm.
type Kind uint8

// The algorithms. The zero Kind is no algorithm; a State of the zero Kind is the
// fresh state of every algorithm.
const (
	TokenBucket   Kind = iota + 1 // burst B passes, then one unit per T
	GCRA                          // token bucket kept as one timestamp (TAT)
	LeakyBucket                   // a queue: admitted units leave one per T, up to Burst wait
	FixedWindow                   // Rate units per window opened by the first request
	SlidingWindow                 // counter approximation over epoch-aligned windows
	SlidingLog                    // exact: Rate units per trailing Period
	AlignedWindow                 // Rate units per window of Period aligned to the epoch
)

var kindNames = [...]string{
	TokenBucket:   "token-bucket",
	GCRA:          "gcra",
	LeakyBucket:   "leaky-bucket",
	FixedWindow:   "fixed-window",
	SlidingWindow: "sliding-window",
	SlidingLog:    "sliding-log",
	AlignedWindow: "aligned-window",
}

// Kinds lists every algorithm, in a fixed order.
func Kinds() []Kind {
	return []Kind{TokenBucket, GCRA, LeakyBucket, FixedWindow, AlignedWindow, SlidingWindow, SlidingLog}
}

// String returns the algorithm's name as the command line spells it.
func (k Kind) String() string {
	if k.Valid() {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Valid reports whether k names an algorithm.
func (k Kind) Valid() bool { return k >= TokenBucket && k <= AlignedWindow }

// ParseKind returns the algorithm named s ("token-bucket", "gcra", ...), or
// an error wrapping ErrInvalid.
func ParseKind(s string) (Kind, error) {
	for _, k := range Kinds() {
		if kindNames[k] == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown algorithm %q (want one of token-bucket, gcra, leaky-bucket, fixed-window, aligned-window, sliding-window, sliding-log)", ErrInvalid, s)
}

// Bounds that keep every intermediate of every step below 2^53, the range in
// which both int64 and a Lua double are exact.
const (
	// MaxTime is the largest time (µs since the epoch) a step accepts: 2^52 µs,
	// about the year 2112.
	MaxTime = int64(1) << 52
	// MaxScaled bounds Rate and Period, and (Capacity+1)·Period for the
	// algorithms that scale units by time (the buckets, the sliding window
	// and the sliding log). The fixed and aligned windows only count units
	// and add periods to times, so they need no bound on the product: 100000
	// a day is a valid aligned window.
	MaxScaled = int64(1) << 50
)

// ErrInvalid is wrapped by every error Params.Validate returns. It is the
// root package's ErrInvalidLimit, so the errors need no rewording there.
var ErrInvalid = errors.New("sluice: invalid limit")

// Params is a validated limit: Rate units per Period microseconds, and Burst,
// whose meaning depends on Kind (the bucket's capacity for token-bucket and gcra,
// the units that may wait for leaky-bucket, unused by the windows). Debt is
// how far past empty a charge may leave the key (see Charge): 0 under the
// algorithms that cannot carry a debt.
type Params struct {
	Kind   Kind
	Rate   int64
	Period int64 // µs
	Burst  int64
	Debt   int64
}

// Chargeable reports whether k can carry a debt and give units back
// (SEMANTICS.md, "Charges and debt"): token-bucket, gcra, fixed-window and
// aligned-window. A sliding window or log forgets a unit a fixed time after
// it was spent, so a debt would not carry, and a leaky bucket's admissions
// are turns in a queue.
func Chargeable(k Kind) bool {
	return k == TokenBucket || k == GCRA || k == FixedWindow || k == AlignedWindow
}

// Capacity is the largest cost that can ever pass on a fresh key; a larger cost
// is an error, not a denial.
func (p Params) Capacity() int64 {
	switch p.Kind {
	case TokenBucket, GCRA:
		return p.Burst
	case LeakyBucket:
		return p.Burst + 1
	default:
		return p.Rate
	}
}

// Refill is the time, in µs, in which a budget spent to nothing comes back
// to Capacity with no traffic: ⌈Capacity·Period/Rate⌉ for the buckets (a unit
// per Period/Rate), Period for the windows. It is the "w" a client is told
// (the RateLimit-Policy field, gRPC metadata). p must be valid.
func (p Params) Refill() int64 {
	if p.Kind == TokenBucket || p.Kind == GCRA || p.Kind == LeakyBucket {
		return ceilDiv(p.Capacity()*p.Period, p.Rate)
	}
	return p.Period
}

// Validate reports why p cannot be used, or nil. The bounds are those that keep
// every step exact in int64 and in a Lua double.
func (p Params) Validate() error {
	if p.ok() {
		return nil
	}
	return p.why()
}

// ok is Validate's answer for the common case, in few branches: it runs on
// every decision.
func (p Params) ok() bool {
	if !p.Kind.Valid() || p.Rate <= 0 || p.Rate > MaxScaled || p.Period <= 0 || p.Period > MaxScaled || p.Burst < 0 {
		return false
	}
	c := p.Capacity()
	if p.Debt != 0 && !p.debtFits() {
		return false
	}
	if !p.Kind.scales() {
		return c > 0
	}
	hi, lo := bits.Mul64(uint64(c)+uint64(p.Debt)+1, uint64(p.Period))
	return c > 0 && hi == 0 && lo <= uint64(MaxScaled)
}

// debtFits reports whether p's debt allowance is one its algorithm can
// carry exactly: at most 2^50, and, for the windows, the windows it spans
// (⌈Debt/Rate⌉ periods) within 2^50 µs. (A bucket's bound is its level's,
// (Capacity+Debt+1)·Period, checked with the capacity.)
func (p Params) debtFits() bool {
	if p.Debt < 0 || p.Debt > MaxScaled || !Chargeable(p.Kind) {
		return false
	}
	hi, lo := bits.Mul64(uint64(ceilDiv(p.Debt, p.Rate)), uint64(p.Period))
	return hi == 0 && lo <= uint64(MaxScaled)
}

// scales reports whether k's steps multiply units by times, so that a limit
// of k must keep (Capacity+1)·Period within MaxScaled. A fixed or aligned
// window only compares counts and adds its period to a time: rate and period
// below 2^50 and times below 2^52 keep every sum below 2^53.
func (k Kind) scales() bool { return k != FixedWindow && k != AlignedWindow }

// why explains why p is not valid.
func (p Params) why() error {
	switch {
	case !p.Kind.Valid():
		return fmt.Errorf("%w: unknown algorithm %d", ErrInvalid, p.Kind)
	case p.Rate <= 0:
		return fmt.Errorf("%w: rate must be positive, got %d", ErrInvalid, p.Rate)
	case p.Period <= 0:
		return fmt.Errorf("%w: period must be at least 1µs, got %dµs", ErrInvalid, p.Period)
	case p.Burst < 0:
		return fmt.Errorf("%w: burst must not be negative, got %d", ErrInvalid, p.Burst)
	case (p.Kind == TokenBucket || p.Kind == GCRA) && p.Burst == 0:
		return fmt.Errorf("%w: %s needs a burst of at least 1", ErrInvalid, p.Kind)
	case p.Rate > MaxScaled:
		return fmt.Errorf("%w: rate %d is over the exact range (at most 2^50)", ErrInvalid, p.Rate)
	case p.Period > MaxScaled:
		return fmt.Errorf("%w: period %dµs is over the exact range (at most 2^50µs)", ErrInvalid, p.Period)
	case p.Debt < 0:
		return fmt.Errorf("%w: debt allowance must not be negative, got %d", ErrInvalid, p.Debt)
	case p.Debt != 0 && !Chargeable(p.Kind):
		return fmt.Errorf("%w: %s cannot carry a debt (debt allowance %d; only token-bucket, gcra, fixed-window and aligned-window can)", ErrInvalid, p.Kind, p.Debt)
	case p.Debt != 0 && !p.debtFits():
		return fmt.Errorf("%w: debt allowance %d over %d per %dµs could overflow exact arithmetic (at most 2^50, and ⌈debt/rate⌉·period at most 2^50µs)", ErrInvalid, p.Debt, p.Rate, p.Period)
	}
	c := p.Capacity()
	if !p.Kind.scales() {
		return nil
	}
	if hi, lo := bits.Mul64(uint64(c)+uint64(p.Debt)+1, uint64(p.Period)); hi != 0 || lo > uint64(MaxScaled) {
		return fmt.Errorf("%w: capacity %d and debt allowance %d over a period of %dµs could overflow exact arithmetic ((capacity+debt+1)·period must be at most 2^50)", ErrInvalid, c, p.Debt, p.Period)
	}
	return nil
}

// ErrInvalidTime is wrapped by every error CheckTime returns. It is the root
// package's ErrInvalidTime.
var ErrInvalidTime = errors.New("sluice: invalid time")

// CheckTime reports whether now (µs since the epoch) is in the range a step
// accepts: an error wrapping ErrInvalidTime, or nil.
func CheckTime(now int64) error {
	if now < 0 || now > MaxTime {
		return fmt.Errorf("%w: %dµs is outside [0, 2^52]", ErrInvalidTime, now)
	}
	return nil
}
