package rls

import (
	"math/bits"
	"time"
)

// subBits sets the histogram's precision: each power of two of nanoseconds
// is split into 1<<subBits buckets, so a bucket is at most 1/64 (1.6%) of
// the values it holds.
const subBits = 6

const (
	subCount = 1 << subBits
	// histSize covers every uint64: the largest index is (64-subBits)*subCount + 2*subCount - 1.
	histSize = (64 - subBits + 1) * subCount
)

// Hist is a latency histogram with log-linear buckets: exact below 128 ns,
// then 64 buckets per power of two. Recording does not allocate. The zero
// value is empty and ready to use; it is not safe for concurrent use (each
// caller goroutine has its own, and Merge adds them up).
type Hist struct {
	counts [histSize]uint64
	n      uint64
}

func bucket(d uint64) int {
	if d < 2*subCount {
		return int(d)
	}
	s := bits.Len64(d) - subBits - 1
	return s*subCount + int(d>>s)
}

// bucketMid returns the middle of the values bucket i holds.
func bucketMid(i int) uint64 {
	if i < 2*subCount {
		return uint64(i)
	}
	s := i/subCount - 1
	mant := uint64(i - s*subCount)
	return mant<<s + (uint64(1)<<s)/2
}

// Record adds one latency; a negative one counts as 0.
func (h *Hist) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucket(uint64(d))]++
	h.n++
}

// Count returns the number of latencies recorded.
func (h *Hist) Count() uint64 { return h.n }

// Merge adds o's latencies to h.
func (h *Hist) Merge(o *Hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// Quantile returns the latency below or at which a fraction q (0 < q ≤ 1) of
// the recorded ones lie, to the histogram's precision (the middle of the
// bucket that holds it), or 0 if none was recorded.
func (h *Hist) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q * float64(h.n))
	if float64(rank) < q*float64(h.n) {
		rank++
	}
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(bucketMid(i))
		}
	}
	return time.Duration(bucketMid(histSize - 1))
}
