package model_test

import (
	"testing"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/model"
)

// take is one request and the decision the contract gives it, worked out by
// hand from SEMANTICS.md.
type take struct {
	now, cost int64
	want      algo.Decision
}

func run(t *testing.T, m *model.Model, steps []take) {
	t.Helper()
	for i, s := range steps {
		if got := m.Take("k", s.now, s.cost); got != s.want {
			t.Fatalf("step %d (t=%d cost=%d): got %+v, want %+v", i, s.now, s.cost, got, s.want)
		}
	}
}

func TestTokenBucketByHand(t *testing.T) {
	// 3/s, burst 2: T = 333333⅓ µs.
	run(t, model.New(algo.TokenBucket, 3, 1_000_000, 2), []take{
		{0, 0, algo.Decision{Allowed: true, Remaining: 2}},
		{0, 2, algo.Decision{Allowed: true, Remaining: 0, ResetAfter: 666667}},
		{0, 1, algo.Decision{RetryAfter: 333334, ResetAfter: 666667}},
		{333333, 1, algo.Decision{RetryAfter: 1, ResetAfter: 333334}},
		// x = 1.000002 → 0.000002 left: (2 − x)·T = 666666 exactly.
		{333334, 1, algo.Decision{Allowed: true, ResetAfter: 666666}},
		// x = 0.000002 + 0.999999: the second unit passes at ⌈2T⌉ exactly.
		{666667, 1, algo.Decision{Allowed: true, ResetAfter: 666667}},
		// x = 0.000004: two units are (2 − x)·T = 666665⅓ µs away.
		{666668, 2, algo.Decision{RetryAfter: 666666, ResetAfter: 666666}},
		{5_000_000, 2, algo.Decision{Allowed: true, ResetAfter: 666667}},
	})
}

func TestGCRAMatchesTokenBucketByHand(t *testing.T) {
	tb := model.New(algo.TokenBucket, 7, 100_000, 3)
	gc := model.New(algo.GCRA, 7, 100_000, 3)
	now := int64(1_000_000)
	for i := range 200 {
		now += int64(i*7919) % 23_000
		cost := int64(i % 4)
		a, b := tb.Take("k", now, cost), gc.Take("k", now, cost)
		if a != b {
			t.Fatalf("step %d: token-bucket %+v, gcra %+v", i, a, b)
		}
	}
}

func TestLeakyBucketTenInstantRequests(t *testing.T) {
	// The contract's example: ten instant requests with Q = 4 give delays
	// 0, T, 2T, 3T, 4T and five drops. 3/s: T = 333333⅓ µs, rounded up.
	m := model.New(algo.LeakyBucket, 3, 1_000_000, 4)
	delays := []int64{0, 333334, 666667, 1_000_000, 1_333_334}
	for i := range 10 {
		d := m.Take("k", 0, 1)
		if i < 5 {
			if !d.Allowed || d.Delay != delays[i] || d.Remaining != int64(4-i) {
				t.Fatalf("request %d: %+v, want allowed with delay %d", i, d, delays[i])
			}
			continue
		}
		// The queue ends at 5T; the last unit would wait 5T > 4T: short by T.
		if want := (algo.Decision{RetryAfter: 333334, ResetAfter: 1_666_667}); d != want {
			t.Fatalf("request %d: %+v, want %+v", i, d, want)
		}
	}
	// A query reports the wait a unit would have, ceil(s − t).
	if d := m.Take("k", 1, 0); !d.Allowed || d.Delay != 1_666_666 || d.Remaining != 0 {
		t.Fatalf("query: %+v", d)
	}
}

func TestFixedWindowQueryOpensNoWindow(t *testing.T) {
	run(t, model.New(algo.FixedWindow, 2, 100, 0), []take{
		{10, 0, algo.Decision{Allowed: true, Remaining: 2}},
		{50, 2, algo.Decision{Allowed: true, Remaining: 0, ResetAfter: 100, Window: 150}},
		{60, 1, algo.Decision{RetryAfter: 90, ResetAfter: 90, Window: 150}},
		{149, 0, algo.Decision{Allowed: true, ResetAfter: 1, Window: 150}},
		{150, 0, algo.Decision{Allowed: true, Remaining: 2}},
		{151, 1, algo.Decision{Allowed: true, Remaining: 1, ResetAfter: 100, Window: 251}},
	})
}

func TestSlidingWindowByHand(t *testing.T) {
	// W = 10, rate 10. Window 0 fills; at t = 15 the estimate is 10·5/10 = 5.
	run(t, model.New(algo.SlidingWindow, 10, 10, 0), []take{
		{3, 10, algo.Decision{Allowed: true, ResetAfter: 17}},
		{9, 1, algo.Decision{RetryAfter: 2, ResetAfter: 11}}, // at 11: 10·9/10 + 1 ≤ 10
		{15, 5, algo.Decision{Allowed: true, Remaining: 0, ResetAfter: 15}},
		// estimate 10·4/10 + 5 = 9 at 16; cost 3 needs ≤ 7: prev·(10−x)/10 ≤ 2 at x = 8 (t = 18).
		{16, 3, algo.Decision{RetryAfter: 2, Remaining: 1, ResetAfter: 14}},
		// In window 2: 5·(10 − x)/10 + 10 ≤ 10 only at x = 10, the start of window 3.
		{16, 10, algo.Decision{RetryAfter: 14, Remaining: 1, ResetAfter: 14}},
		{30, 0, algo.Decision{Allowed: true, Remaining: 10}},
	})
}

func TestSlidingLogByHand(t *testing.T) {
	run(t, model.New(algo.SlidingLog, 3, 100, 0), []take{
		{5, 1, algo.Decision{Allowed: true, Remaining: 2, ResetAfter: 100}},
		{5, 1, algo.Decision{Allowed: true, Remaining: 1, ResetAfter: 100}}, // two entries, one µs
		{20, 1, algo.Decision{Allowed: true, Remaining: 0, ResetAfter: 100}},
		{30, 2, algo.Decision{RetryAfter: 75, ResetAfter: 90}}, // both entries at 5 leave at 105
		{105, 2, algo.Decision{Allowed: true, Remaining: 0, ResetAfter: 100}},
		{119, 0, algo.Decision{Allowed: true, Remaining: 0, ResetAfter: 86}},
		{120, 0, algo.Decision{Allowed: true, Remaining: 1, ResetAfter: 85}},
	})
}

func TestTakePanicsOnCostOverCapacity(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	model.New(algo.LeakyBucket, 1, 1, 2).Take("k", 0, 4)
}
