package policycore

import (
	"time"

	"github.com/sluice-go/sluice"
)

// Quota returns the draft-11 figures of a limit that do not change between
// requests: q, the largest cost a fresh key admits at once (its capacity,
// which a RateLimit r never exceeds), and w, the whole seconds (rounded
// up, at least 1) in which a budget spent to nothing comes back to q.
// l must be valid.
func Quota(l sluice.Limit) (q, w int64) {
	return l.Capacity(), max(Seconds(l.Refill()), 1)
}

// Seconds rounds d up to whole seconds, as every figure a client is told
// in seconds is (Retry-After, RateLimit's t, w): a client that waits that
// long finds what it was told. 0 for a d that is not positive.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d-1)/time.Second) + 1 // d + time.Second - 1 could overflow
}
