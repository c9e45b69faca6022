package rlqs

// TokenBucket is a token bucket in integers: Tokens per Fill (µs)
// refilled continuously up to Burst. It is the bucket an assignment's
// parameters describe, exactly (Envoy's refill in floating point), which
// the tests' clients enforce, and what paces a stream's reports.
type TokenBucket struct {
	Tokens, Burst, Fill int64
	level               int64 // tokens·Fill: a token is Fill units
	at                  int64 // µs
}

// NewTokenBucket is a full bucket of tokens per fill (µs) and burst at
// t (µs).
func NewTokenBucket(tokens, burst, fill, t int64) *TokenBucket {
	return &TokenBucket{Tokens: tokens, Burst: burst, Fill: fill, level: burst * fill, at: t}
}

// Take takes n tokens at t (µs; an earlier t than the last call's reads
// as that one's) and reports whether there were n; when not, it takes
// none.
func (b *TokenBucket) Take(t, n int64) bool {
	if t > b.at {
		full := b.Burst * b.Fill
		if b.Tokens > 0 && t-b.at >= (full-b.level+b.Tokens-1)/b.Tokens {
			b.level = full
		} else {
			b.level += b.Tokens * (t - b.at)
		}
		b.at = t
	}
	if n > b.Burst || b.level < n*b.Fill {
		return false
	}
	b.level -= n * b.Fill
	return true
}
