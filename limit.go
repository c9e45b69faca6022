package sluice

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-go/sluice/algo"
)

// Algorithm names the shape of a limit's budget. See the README's trade-off
// table for when to reach for each.
type Algorithm uint8

// The algorithms of SEMANTICS.md.
const (
	// TokenBucket lets a saved-up burst of Burst units pass, then one unit per
	// Period/Rate.
	TokenBucket = Algorithm(algo.TokenBucket)
	// GCRA makes exactly the token bucket's decisions from one timestamp.
	GCRA = Algorithm(algo.GCRA)
	// LeakyBucket queues: an admitted request waits Result.Delay so units leave
	// one per Period/Rate; up to Burst units may wait, more are refused.
	LeakyBucket = Algorithm(algo.LeakyBucket)
	// FixedWindow admits Rate units per window of Period opened by the first
	// request; up to 2·Rate across a seam.
	FixedWindow = Algorithm(algo.FixedWindow)
	// AlignedWindow admits Rate units per window of Period aligned to the
	// Unix epoch (a minute's window starts on the minute, a day's at UTC
	// midnight): what envoyproxy/ratelimit, Kong and limitador count. Up to
	// 2·Rate across a seam.
	AlignedWindow = Algorithm(algo.AlignedWindow)
	// SlidingWindow weighs the previous window's count by how much of it still
	// overlaps the trailing Period: cheap, and close to exact for even traffic.
	SlidingWindow = Algorithm(algo.SlidingWindow)
	// SlidingLog admits exactly Rate units per trailing Period, keeping one
	// entry per admitted microsecond.
	SlidingLog = Algorithm(algo.SlidingLog)
)

// String returns the algorithm's name: "token-bucket", "gcra", "leaky-bucket",
// "fixed-window", "aligned-window", "sliding-window" or "sliding-log".
func (a Algorithm) String() string { return a.kind().String() }

// kind is the algorithm's step: the zero Algorithm is the token bucket.
func (a Algorithm) kind() algo.Kind {
	if a == 0 {
		return algo.TokenBucket
	}
	return algo.Kind(a)
}

// ParseAlgorithm returns the algorithm that String names s.
func ParseAlgorithm(s string) (Algorithm, error) {
	k, err := algo.ParseKind(s)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrInvalidLimit, err)
	}
	return Algorithm(k), nil
}

// Limit is a budget: Rate units per Period, shaped by Algorithm (the zero
// Algorithm is TokenBucket), with Burst (the bucket's capacity for
// TokenBucket and GCRA, the units that may wait for LeakyBucket, unused by
// the windows). String and ParseLimit convert it to and from text.
//
// A Limit travels with every call instead of being stored with the key, so a
// changed limit needs no migration: the key's state is kept and read under the
// new limit, another algorithm included, as SEMANTICS.md's "Changed limits"
// says: spent units are never forgotten.
type Limit struct {
	Algorithm Algorithm
	Rate      int64
	Period    time.Duration // a whole number of microseconds
	Burst     int64
}

// Per returns a token-bucket limit of rate units per period with a burst of
// rate.
func Per(rate int64, period time.Duration) Limit {
	return Limit{Algorithm: TokenBucket, Rate: rate, Period: period, Burst: rate}
}

// PerSecond returns a token-bucket limit of rate units per second with a burst
// of rate.
func PerSecond(rate int64) Limit { return Per(rate, time.Second) }

// PerMinute returns a token-bucket limit of rate units per minute with a burst
// of rate.
func PerMinute(rate int64) Limit { return Per(rate, time.Minute) }

// PerHour returns a token-bucket limit of rate units per hour with a burst of
// rate.
func PerHour(rate int64) Limit { return Per(rate, time.Hour) }

// WithBurst returns l with Burst set to burst.
func (l Limit) WithBurst(burst int64) Limit { l.Burst = burst; return l }

// Using returns l shaped by the algorithm a.
func (l Limit) Using(a Algorithm) Limit { l.Algorithm = a; return l }

// String returns the limit in the form ParseLimit reads back: rate and
// period, algorithm and burst, "10/1s token-bucket burst 50".
func (l Limit) String() string {
	return fmt.Sprintf("%d/%s %s burst %d", l.Rate, l.Period, l.Algorithm, l.Burst)
}

// ParseLimit reads the text form RATE/PERIOD, PERIOD in Go duration syntax:
// "10/1s", "20/100ms", "1/1m", "5/250us" ("10/s" is 10/1s), optionally
// followed by an algorithm and "burst N", as Limit.String writes them:
// "10/1s gcra burst 50". Without them it returns a token-bucket limit with a
// burst of rate; WithBurst and Using set others too.
func ParseLimit(s string) (Limit, error) {
	l, words, err := parseRate(s)
	if err != nil {
		return Limit{}, err
	}
	for i := 0; i < len(words); i++ {
		if words[i] == "burst" {
			if i+1 == len(words) {
				return Limit{}, fmt.Errorf("%w: %q: burst without a number", ErrInvalidLimit, s)
			}
			b, err := strconv.ParseInt(words[i+1], 10, 64)
			if err != nil {
				return Limit{}, fmt.Errorf("%w: burst %q in %q is not a whole number", ErrInvalidLimit, words[i+1], s)
			}
			l.Burst = b
			i++
			continue
		}
		a, err := ParseAlgorithm(words[i])
		if err != nil {
			return Limit{}, fmt.Errorf("%w (in %q)", err, s)
		}
		l.Algorithm = a
	}
	if err := l.Validate(); err != nil {
		return Limit{}, err
	}
	return l, nil
}

// parseRate reads RATE/PERIOD at the head of ParseLimit's text s and
// returns the words after it.
func parseRate(s string) (Limit, []string, error) {
	rs, ps, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return Limit{}, nil, fmt.Errorf("%w: %q is not RATE/PERIOD (like 10/1s)", ErrInvalidLimit, s)
	}
	rate, err := strconv.ParseInt(strings.TrimSpace(rs), 10, 64)
	if err != nil {
		return Limit{}, nil, fmt.Errorf("%w: rate %q in %q is not a whole number", ErrInvalidLimit, rs, s)
	}
	words := strings.Fields(ps)
	if len(words) == 0 {
		return Limit{}, nil, fmt.Errorf("%w: %q has no period after the / (like 10/1s)", ErrInvalidLimit, s)
	}
	ps = words[0]
	d := ps
	if d != "" && (d[0] < '0' || d[0] > '9') && d[0] != '.' && d[0] != '-' && d[0] != '+' {
		d = "1" + d // "10/s" is 10/1s
	}
	period, err := time.ParseDuration(d)
	if err != nil {
		return Limit{}, nil, fmt.Errorf("%w: period %q in %q is not a duration (like 1s, 100ms, 1m, 250us)", ErrInvalidLimit, ps, s)
	}
	if period <= 0 {
		return Limit{}, nil, fmt.Errorf("%w: period %q in %q must be positive (like 1s, 100ms, 1m, 250us)", ErrInvalidLimit, ps, s)
	}
	return Per(rate, period), words[1:], nil
}

// Validate reports why the limit cannot be used, or nil. A limit is refused when
// its rate or period is not positive, its period is not a whole number of
// microseconds, or its arithmetic could leave the exact range.
func (l Limit) Validate() error {
	_, err := l.params()
	return err
}

// Params returns the limit in the form the algorithms and stores take.
func (l Limit) Params() (algo.Params, error) { return l.params() }

func (l Limit) params() (algo.Params, error) {
	if l.Period < time.Microsecond || l.Period%time.Microsecond != 0 {
		return algo.Params{}, fmt.Errorf("%w: period %v is not a whole number of microseconds (at least 1µs)", ErrInvalidLimit, l.Period)
	}
	p := algo.Params{Kind: l.Algorithm.kind(), Rate: l.Rate, Period: l.Period.Microseconds(), Burst: l.Burst}
	if err := p.Validate(); err != nil {
		return algo.Params{}, err // wraps algo.ErrInvalid, which is ErrInvalidLimit
	}
	return p, nil
}

// Errors that callers can test for with errors.Is.
var (
	// ErrInvalidLimit: the limit cannot be used (see Limit.Validate).
	ErrInvalidLimit = algo.ErrInvalid
	// ErrCostExceedsCapacity: the cost could never pass, even on a fresh key.
	// Nothing is spent.
	ErrCostExceedsCapacity = errors.New("sluice: cost exceeds capacity")
	// ErrInvalidCost: the cost is negative.
	ErrInvalidCost = errors.New("sluice: invalid cost")
	// ErrEmptyKey: the key is empty.
	ErrEmptyKey = errors.New("sluice: empty key")
	// ErrInvalidTime: a time outside [0, 2^52] µs since the epoch.
	ErrInvalidTime = errors.New("sluice: invalid time")
	// ErrStoreUnavailable: the store could not make the decision (a Redis that
	// is gone, a deadline passed). Nothing is known to be spent.
	ErrStoreUnavailable = errors.New("sluice: store unavailable")
)

// Check validates one request before a store sees it: a non-empty key, a cost
// from 0 to the limit's capacity. Stores call it; it returns the limit's params.
func Check(key string, l Limit, cost int64) (algo.Params, error) {
	p, err := l.params()
	if err != nil {
		return p, err
	}
	return p, CheckParams(key, p, cost)
}

// CheckParams is Check for a limit already in its params form.
func CheckParams(key string, p algo.Params, cost int64) error {
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
