package policycore_test

import (
	"math"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policycore"
)

func TestQuota(t *testing.T) {
	for _, tc := range []struct {
		lim  string
		q, w int64
	}{
		{"100/1m", 100, 60},
		{"10/1s token-bucket burst 50", 50, 5},
		{"10/1s gcra burst 50", 50, 5},
		{"3/1s gcra burst 1", 1, 1},
		{"4/1s leaky-bucket burst 3", 4, 1},
		{"1/1h leaky-bucket burst 2", 3, 10800},
		{"30/90s fixed-window", 30, 90},
		{"5/15m sliding-log", 5, 900},
		{"7/1500ms sliding-window", 7, 2},
		{"2/1ms aligned-window", 2, 1}, // w is at least 1
	} {
		l, err := sluice.ParseLimit(tc.lim)
		if err != nil {
			t.Fatal(err)
		}
		if q, w := policycore.Quota(l); q != tc.q || w != tc.w {
			t.Errorf("%s: q=%d w=%d, want q=%d w=%d", tc.lim, q, w, tc.q, tc.w)
		}
	}
}

func TestSeconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{math.MinInt64, 0},
		{-time.Second, 0},
		{0, 0},
		{1, 1},
		{time.Second - 1, 1},
		{time.Second, 1},
		{time.Second + 1, 2},
		{90 * time.Second, 90},
		{math.MaxInt64, math.MaxInt64/int64(time.Second) + 1}, // no overflow
	} {
		if got := policycore.Seconds(tc.d); got != tc.want {
			t.Errorf("Seconds(%d) = %d, want %d", int64(tc.d), got, tc.want)
		}
	}
}
