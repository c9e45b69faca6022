package storelink

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/store"
)

// Request is one checked decision as a store of this module receives it:
// its Params are valid, its Key is not empty, 0 ≤ Cost ≤ Params.Capacity()
// (a refund's Cost is only ≥ 0, and its algorithm can give units back).
type Request struct {
	Key    string
	Params algo.Params
	Cost   int64
	// MaxDelay bounds a LeakyBucket admission's delay, in µs (algo.Never for
	// none).
	MaxDelay int64
	// Reserve is what the request leaves for higher classes
	// (algo.StepHeadroom, SEMANTICS.md's "Headroom"): 0 ≤
	// Cost + Reserve ≤ Params.Capacity(); an op's or a part's Headroom.
	Reserve int64
}

// The errors of the root package, defined here so that the checks below and
// every store wrap the same ones.
var (
	ErrInvalidLimit        = algo.ErrInvalid
	ErrInvalidTime         = algo.ErrInvalidTime
	ErrNoRefund            = algo.ErrNoRefund
	ErrCostExceedsCapacity = errors.New("sluice: cost exceeds capacity")
	ErrInvalidCost         = errors.New("sluice: invalid cost")
	ErrEmptyKey            = errors.New("sluice: empty key")
	ErrStoreUnavailable    = store.ErrStoreUnavailable
	ErrDuplicateKey        = errors.New("sluice: a composite names a key twice")
)

// params checks a limit given by its fields (the root package's Limit's: alg
// 0 is the token bucket) and returns it in the form the steps take, or an
// error wrapping ErrInvalidLimit.
func params(alg uint8, rate int64, period time.Duration, burst, debt int64) (algo.Params, error) {
	if period < time.Microsecond || period%time.Microsecond != 0 {
		return algo.Params{}, fmt.Errorf("%w: period %v is not a whole number of microseconds (at least 1µs)", ErrInvalidLimit, period)
	}
	k := algo.Kind(alg)
	if k == 0 {
		k = algo.TokenBucket
	}
	p := algo.Params{Kind: k, Rate: rate, Period: period.Microseconds(), Burst: burst, Debt: debt}
	if err := p.Validate(); err != nil {
		return algo.Params{}, err // wraps algo.ErrInvalid, which is ErrInvalidLimit
	}
	return p, nil
}

// Check checks one decision under valid params: a non-empty key, a cost from
// 0 to the limit's capacity. It takes p by address: a Params (five fields)
// is copied through memory, which on the hot path costs more than the
// check.
func Check(key string, p *algo.Params, cost int64) error {
	switch {
	case key == "":
		return ErrEmptyKey
	case cost < 0:
		return fmt.Errorf("%w: %d is negative", ErrInvalidCost, cost)
	case cost > p.Capacity():
		return fmt.Errorf("%w: cost %d, capacity %d", ErrCostExceedsCapacity, cost, p.Capacity())
	}
	return nil
}

// CheckHeadroom checks a reserve under valid params and a checked cost: not
// negative, and cost + reserve within the capacity.
func CheckHeadroom(p *algo.Params, cost, reserve int64) error {
	switch {
	case reserve < 0:
		return fmt.Errorf("%w: reserve %d is negative", ErrInvalidCost, reserve)
	case cost+reserve > p.Capacity():
		return fmt.Errorf("%w: cost %d with a reserve of %d, capacity %d", ErrCostExceedsCapacity, cost, reserve, p.Capacity())
	}
	return nil
}

// CheckRefund checks a refund under valid params: a non-empty key, units
// not negative, an algorithm that can give units back.
func CheckRefund(key string, p *algo.Params, units int64) error {
	switch {
	case key == "":
		return ErrEmptyKey
	case units < 0:
		return fmt.Errorf("%w: refund of %d", ErrInvalidCost, units)
	case !Refundable(p.Kind):
		return fmt.Errorf("%w (refund on %s)", ErrNoRefund, p.Kind)
	}
	return nil
}

// Refundable reports whether units taken under an algorithm can be given
// back, or charged (CheckRefund and CheckCharge accept it): token-bucket,
// gcra, fixed-window and aligned-window.
func Refundable(k algo.Kind) bool { return algo.Chargeable(k) }

// CheckCharge checks a charge under valid params: a non-empty key, units
// not negative (any number: what the key cannot owe is forgiven), an
// algorithm that can carry a debt.
func CheckCharge(key string, p *algo.Params, units int64) error {
	switch {
	case key == "":
		return ErrEmptyKey
	case units < 0:
		return fmt.Errorf("%w: charge of %d", ErrInvalidCost, units)
	case !algo.Chargeable(p.Kind):
		return fmt.Errorf("%w (charge on %s)", ErrNoRefund, p.Kind)
	}
	return nil
}

// CheckComposite checks what a composite adds to its parts' own checks: at
// least one part, no key twice. key returns a part's key.
func CheckComposite[P any](parts []P, key func(*P) string) error {
	if len(parts) == 0 {
		return fmt.Errorf("%w: a composite needs at least one part", ErrInvalidLimit)
	}
	for i := range parts {
		for j := range i {
			if key(&parts[j]) == key(&parts[i]) {
				return fmt.Errorf("%w: %q", ErrDuplicateKey, key(&parts[i]))
			}
		}
	}
	return nil
}

// PartError says which part of a composite err is about.
func PartError(i int, key string, err error) error {
	return fmt.Errorf("part %d (%q): %w", i, key, err)
}

// Duration converts a step's microseconds into a Duration, saturating where
// algo.Never would overflow.
func Duration(us int64) time.Duration {
	if us >= math.MaxInt64/int64(time.Microsecond) {
		return math.MaxInt64
	}
	return time.Duration(us) * time.Microsecond
}

// MaxDelay converts a Request's MaxDelay into µs: math.MaxInt64 (no bound)
// is algo.Never, a negative one an error wrapping ErrInvalidLimit.
func MaxDelay(d time.Duration) (int64, error) {
	switch {
	case d < 0:
		return 0, fmt.Errorf("%w: max delay %v is negative", ErrInvalidLimit, d)
	case d == math.MaxInt64:
		return algo.Never, nil
	}
	return d.Microseconds(), nil
}
