package sluice

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
)

// Algorithm names the shape of a limit's budget. See docs/algorithms.md's
// table for when to reach for each.
type Algorithm uint8

// The algorithms of SEMANTICS.md.
const (
	// TokenBucket lets a saved-up burst of Burst units pass, then one unit per
	// Period/Rate.
	TokenBucket Algorithm = 1
	// GCRA makes exactly the token bucket's decisions from one timestamp.
	GCRA Algorithm = 2
	// LeakyBucket queues: an admitted request waits Result.Delay so units leave
	// one per Period/Rate; up to Burst units may wait, more are refused.
	LeakyBucket Algorithm = 3
	// FixedWindow admits Rate units per window of Period opened by the first
	// request; up to 2·Rate across a seam.
	FixedWindow Algorithm = 4
	// AlignedWindow admits Rate units per window of Period aligned to the
	// Unix epoch (a minute's window starts on the minute, a day's at UTC
	// midnight): what envoyproxy/ratelimit, Kong and limitador count. Up to
	// 2·Rate across a seam.
	AlignedWindow Algorithm = 7
	// SlidingWindow weighs the previous window's count by how much of it still
	// overlaps the trailing Period: cheap, and close to exact for even traffic.
	SlidingWindow Algorithm = 5
	// SlidingLog admits exactly Rate units per trailing Period, keeping one
	// entry per admitted microsecond.
	SlidingLog Algorithm = 6
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
		return 0, err // wraps algo.ErrInvalid, which is ErrInvalidLimit
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
	// Debt is how many units past empty Limiter.Charge may leave the key
	// (TokenBucket, GCRA, FixedWindow and AlignedWindow; 0 under the
	// others): takes are refused until the debt is paid. 0, the default,
	// empties the key and no further. Pass the same Debt to the takes:
	// a limit reads a key as owing at most its own.
	Debt int64
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

// WithAlgorithm returns l shaped by the algorithm a.
func (l Limit) WithAlgorithm(a Algorithm) Limit { l.Algorithm = a; return l }

// String returns the limit in the form ParseLimit reads back: rate and
// period, algorithm and burst, and a debt allowance unless it is 0:
// "10/1s token-bucket burst 50", "1000/1m0s token-bucket burst 1000 debt 5000".
func (l Limit) String() string {
	s := fmt.Sprintf("%d/%s %s burst %d", l.Rate, l.Period, l.Algorithm, l.Burst)
	if l.Debt != 0 {
		s += " debt " + strconv.FormatInt(l.Debt, 10)
	}
	return s
}

// ParseLimit reads the text form RATE/PERIOD, PERIOD in Go duration syntax:
// "10/1s", "20/100ms", "1/1m", "5/250us" ("10/s" is 10/1s), optionally
// followed by an algorithm, "burst N" and "debt N", as Limit.String writes
// them: "10/1s gcra burst 50", "1000/1m debt 5000". Without them it
// returns a token-bucket limit with a burst of rate and no debt allowance;
// WithBurst and WithAlgorithm set others too.
func ParseLimit(s string) (Limit, error) {
	l, words, err := parseRate(s)
	if err != nil {
		return Limit{}, err
	}
	for i := 0; i < len(words); i++ {
		if words[i] == "burst" || words[i] == "debt" {
			if i+1 == len(words) {
				return Limit{}, fmt.Errorf("%w: %q: %s without a number", ErrInvalidLimit, s, words[i])
			}
			n, err := strconv.ParseInt(words[i+1], 10, 64)
			if err != nil {
				return Limit{}, fmt.Errorf("%w: %s %q in %q is not a whole number", ErrInvalidLimit, words[i], words[i+1], s)
			}
			if words[i] == "burst" {
				l.Burst = n
			} else {
				l.Debt = n
			}
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
// microseconds, its debt allowance is negative or given to an algorithm
// that cannot carry a debt, or its arithmetic could leave the exact range.
func (l Limit) Validate() error {
	_, err := l.params()
	return err
}

// Capacity returns the largest cost that can pass at once on a fresh key:
// Burst for TokenBucket and GCRA, Burst+1 for LeakyBucket (the units that
// may wait and the one leaving), Rate for the windows. A larger cost is an
// error (ErrCostExceedsCapacity), never a refusal. A limit that does not
// validate has no capacity: 0.
func (l Limit) Capacity() int64 {
	p, err := l.params()
	if err != nil {
		return 0
	}
	return p.Capacity()
}

// Refill returns the time in which a budget spent to nothing comes back to
// Capacity with no traffic: for the buckets, Capacity units at one per
// Period/Rate, rounded up to the microsecond; for the windows, Period. It
// is the w of the RateLimit-Policy header (in whole seconds, rounded up)
// that httplimit and grpclimit send. A limit that does not validate
// refills in 0.
func (l Limit) Refill() time.Duration {
	p, err := l.params()
	if err != nil {
		return 0
	}
	return time.Duration(p.Refill()) * time.Microsecond // Validate keeps it below 2^50µs
}

// same reports whether l and m are the same limit, field by field (see
// Limiter.params: == on a Limit compares it through memory).
func (l *Limit) same(m *Limit) bool {
	return l.Rate == m.Rate && l.Period == m.Period && l.Burst == m.Burst && l.Algorithm == m.Algorithm && l.Debt == m.Debt
}

// params returns the limit in the form the algorithms and stores take.
func (l Limit) params() (algo.Params, error) {
	return storelink.Params(l)
}

// Errors that callers can test for with errors.Is. Every error of a Limiter
// or of a store of this module that is about one of these wraps it.
var (
	// ErrInvalidLimit: the limit cannot be used (see Limit.Validate), its
	// algorithm is unknown, or a composite has no part.
	ErrInvalidLimit = storelink.ErrInvalidLimit
	// ErrCostExceedsCapacity: the cost could never pass, even on a fresh key.
	// Nothing is spent.
	ErrCostExceedsCapacity = storelink.ErrCostExceedsCapacity
	// ErrInvalidCost: the cost is negative.
	ErrInvalidCost = storelink.ErrInvalidCost
	// ErrEmptyKey: the key is empty.
	ErrEmptyKey = storelink.ErrEmptyKey
	// ErrInvalidTime: a store's clock reads a time outside [0, 2^52] µs since
	// the epoch.
	ErrInvalidTime = storelink.ErrInvalidTime
	// ErrNoRefund: Refund, Charge or Settle under an algorithm that cannot
	// give units back or carry a debt (only TokenBucket, GCRA, FixedWindow
	// and AlignedWindow can).
	ErrNoRefund = storelink.ErrNoRefund
	// ErrDuplicateKey: a composite request names the same key twice.
	ErrDuplicateKey = storelink.ErrDuplicateKey
	// ErrStoreUnavailable: the store could not make the decision (a Redis that
	// is gone, a deadline passed). Nothing is known to be spent.
	ErrStoreUnavailable = storelink.ErrStoreUnavailable
	// ErrDeadline: Wait could not admit the request (or, for LeakyBucket,
	// let it proceed) before the context's deadline. It also matches
	// context.DeadlineExceeded. Nothing was spent.
	ErrDeadline = errors.New("sluice: would wait past the context's deadline")
)
