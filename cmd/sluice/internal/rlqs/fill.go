package rlqs

import (
	"math"
	"math/bits"
	"slices"
)

// scale is the fixed point of demands and shares: 1 token is scale units,
// so that a client asking 0.3 tokens per fill interval is not rounded to
// 0 or 1 before the shares are worked out. Tokens are at most 2^32 (a
// TokenBucket's uint32), so a scaled quantity stays below 2^48.
const scale = 1 << 16

// maxTokens is the largest tokens_per_fill or max_tokens a TokenBucket
// carries (uint32), and so the largest rate a Budget may have.
const maxTokens = math.MaxUint32

// waterfill shares capacity (scaled) among clients by weighted max-min:
// client i gets out[i] = min(caps[i], weights[i]·θ), θ the largest level
// with Σ out ≤ capacity. Every client gets at least min(caps[i],
// weights[i]·capacity/Σweights): no demand-proportional split guarantees
// that. Weights are positive; caps and capacity are not negative; order
// is scratch space of len(caps). Integer arithmetic: Σ out ≤ capacity
// exactly, and out[i] ≤ caps[i].
func waterfill(capacity int64, caps, weights, out []int64, order []int) {
	order = order[:0]
	var wsum uint64
	for i := range caps {
		order = append(order, i)
		wsum += uint64(weights[i])
	}
	// Ascending caps[i]/weights[i]: the clients whose demand binds first.
	slices.SortFunc(order, func(a, b int) int {
		return cmpProducts(uint64(caps[a]), uint64(weights[b]), uint64(caps[b]), uint64(weights[a]))
	})
	left := uint64(capacity)
	for k, i := range order {
		w := uint64(weights[i])
		// Does the cap bind below the level the others leave, that is
		// caps[i]/w ≤ left/wsum?
		if cmpProducts(uint64(caps[i]), wsum, left, w) <= 0 {
			out[i] = caps[i]
			left -= uint64(caps[i])
			wsum -= w
			continue
		}
		// From here every cap is above the level: each gets w·left/wsum,
		// floored, so their sum stays within left.
		for _, j := range order[k:] {
			out[j] = int64(mulDiv(uint64(weights[j]), left, wsum))
		}
		return
	}
}

// apportion turns scaled shares into whole tokens by largest remainder:
// each gets its floor, then the shares with the largest fractions one
// more, until the tokens sum to the floor of the shares' sum. So Σ out ≤
// Σ shares/scale, and no share moves by a token or more. order is scratch
// space of len(shares).
func apportion(shares, out []int64, order []int) {
	var sum, floors int64
	order = order[:0]
	for i, s := range shares {
		out[i] = s / scale
		floors += out[i]
		sum += s
		order = append(order, i)
	}
	extra := sum/scale - floors
	if extra <= 0 {
		return
	}
	// Largest fraction first; among equal fractions the lower index, so
	// that the result is the same on every run.
	slices.SortFunc(order, func(a, b int) int {
		fa, fb := shares[a]%scale, shares[b]%scale
		switch {
		case fa > fb:
			return -1
		case fa < fb:
			return 1
		}
		return a - b
	})
	for _, i := range order[:extra] {
		out[i]++
	}
}

// cmpProducts compares a·b with c·d, exactly (128 bits).
func cmpProducts(a, b, c, d uint64) int {
	h1, l1 := bits.Mul64(a, b)
	h2, l2 := bits.Mul64(c, d)
	switch {
	case h1 < h2 || h1 == h2 && l1 < l2:
		return -1
	case h1 == h2 && l1 == l2:
		return 0
	}
	return 1
}

// mulDiv is ⌊a·b/c⌋ for c > 0, saturating at math.MaxUint64 when it does
// not fit.
func mulDiv(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return math.MaxUint64
	}
	q, _ := bits.Div64(hi, lo, c)
	return q
}

// ceilDiv is ⌈a/b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
