package sluice_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
)

func TestParseLimit(t *testing.T) {
	for _, c := range []struct {
		in     string
		rate   int64
		period time.Duration
	}{
		{"10/1s", 10, time.Second},
		{"20/100ms", 20, 100 * time.Millisecond},
		{"1/1m", 1, time.Minute},
		{"5/250us", 5, 250 * time.Microsecond},
		{"5/250µs", 5, 250 * time.Microsecond},
		{" 30 / 1s ", 30, time.Second},
		{"10/s", 10, time.Second},
		{"100/h", 100, time.Hour},
	} {
		l, err := sluice.ParseLimit(c.in)
		if err != nil {
			t.Errorf("ParseLimit(%q): %v", c.in, err)
			continue
		}
		want := sluice.Limit{Algorithm: sluice.TokenBucket, Rate: c.rate, Period: c.period, Burst: c.rate}
		if l != want {
			t.Errorf("ParseLimit(%q) = %+v, want %+v", c.in, l, want)
		}
	}
	for _, in := range []string{"", "10", "10/", "/1s", "x/1s", "10/1x", "0/1s", "-1/1s", "10/0s", "10/-1s", "10/500ns", "10/1500ns", "1.5/1s", "99999999999999999999/1s", "10/1s/2"} {
		if _, err := sluice.ParseLimit(in); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("ParseLimit(%q) = %v, want ErrInvalidLimit", in, err)
		}
	}
}

// ParseLimit's errors quote the period as the user wrote it, and a period
// that is not positive says so.
func TestParseLimitPeriodErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"10/-1s", `period "-1s" in "10/-1s" must be positive`},
		{"10/0s", `period "0s" in "10/0s" must be positive`},
		{"10/ -5m", `period "-5m" in "10/ -5m" must be positive`},
		{"10/-s", `period "-s" in "10/-s" is not a duration`},
		{"10/1x", `period "1x" in "10/1x" is not a duration`},
		{"10/x", `period "x" in "10/x" is not a duration`},
	} {
		_, err := sluice.ParseLimit(c.in)
		if !errors.Is(err, sluice.ErrInvalidLimit) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseLimit(%q) = %v, want ErrInvalidLimit saying %s", c.in, err, c.want)
		}
	}
}

func TestLimitValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		l    sluice.Limit
		ok   bool
	}{
		{"per second", sluice.PerSecond(10), true},
		{"burst", sluice.PerSecond(10).WithBurst(50), true},
		{"zero rate", sluice.PerSecond(0), false},
		{"negative rate", sluice.PerSecond(-3), false},
		{"zero burst", sluice.PerSecond(10).WithBurst(0), false},
		{"zero burst leaky", sluice.PerSecond(10).WithBurst(0).WithAlgorithm(sluice.LeakyBucket), true},
		{"negative burst", sluice.PerSecond(10).WithBurst(-1), false},
		{"sub-µs period", sluice.Per(1, 999*time.Nanosecond), false},
		{"period not whole µs", sluice.Per(1, 1500*time.Nanosecond), false},
		{"overflow", sluice.PerHour(1).WithBurst(1 << 30), false},
		{"zero algorithm: the token bucket", sluice.Limit{Rate: 1, Period: time.Second, Burst: 1}, true},
		{"unknown algorithm", sluice.Limit{Algorithm: 99, Rate: 1, Period: time.Second, Burst: 1}, false},
		{"each algorithm", sluice.PerMinute(100).WithAlgorithm(sluice.SlidingLog), true},
	} {
		err := c.l.Validate()
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, sluice.ErrInvalidLimit)) {
			t.Errorf("%s: %v.Validate() = %v, want ok=%v", c.name, c.l, err, c.ok)
		}
	}
}

// TestLimitCapacityAndRefill: what a limit admits at once on a fresh key,
// and how long an emptied budget takes to come back, worked out by hand.
func TestLimitCapacityAndRefill(t *testing.T) {
	for _, c := range []struct {
		lim      string
		capacity int64
		refill   time.Duration
	}{
		{"100/1m", 100, time.Minute},
		{"10/1s token-bucket burst 50", 50, 5 * time.Second},
		{"10/1s gcra burst 50", 50, 5 * time.Second},
		{"3/1s gcra burst 1", 1, 333334 * time.Microsecond}, // 1/3 s, rounded up to the µs
		{"4/1s leaky-bucket burst 3", 4, time.Second},       // burst+1
		{"1/1h leaky-bucket burst 2", 3, 3 * time.Hour},
		{"2/1s leaky-bucket burst 0", 1, 500 * time.Millisecond},
		{"30/90s fixed-window", 30, 90 * time.Second},
		{"30/90s aligned-window", 30, 90 * time.Second},
		{"5/15m sliding-log", 5, 15 * time.Minute},
		{"7/1500ms sliding-window", 7, 1500 * time.Millisecond},
	} {
		l, err := sluice.ParseLimit(c.lim)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.Capacity(); got != c.capacity {
			t.Errorf("%s: Capacity() = %d, want %d", c.lim, got, c.capacity)
		}
		if got := l.Refill(); got != c.refill {
			t.Errorf("%s: Refill() = %v, want %v", c.lim, got, c.refill)
		}
	}
	// The longest refill a valid limit can have fits a Duration.
	long := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 1, Period: time.Duration(algo.MaxScaled/2) * time.Microsecond}
	if err := long.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := long.Refill(); got != long.Period {
		t.Errorf("%v: Refill() = %v", long, got)
	}
	for _, bad := range []sluice.Limit{{}, sluice.PerSecond(0), sluice.PerSecond(10).WithBurst(0), sluice.PerHour(1).WithBurst(1 << 30), {Algorithm: 99, Rate: 1, Period: time.Second, Burst: 1}} {
		if c, r := bad.Capacity(), bad.Refill(); c != 0 || r != 0 {
			t.Errorf("%v (invalid): Capacity() = %d, Refill() = %v, want 0 and 0", bad, c, r)
		}
	}
}

func TestAlgorithmNames(t *testing.T) {
	for _, a := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.LeakyBucket, sluice.FixedWindow, sluice.AlignedWindow, sluice.SlidingWindow, sluice.SlidingLog} {
		b, err := sluice.ParseAlgorithm(a.String())
		if err != nil || b != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", a, b, err)
		}
	}
	if _, err := sluice.ParseAlgorithm("token_bucket"); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("ParseAlgorithm of a bad name: %v", err)
	}
}

func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{"10/1s", "20/100ms", "1/1m", "5/250us", "10/s", "0/1s", "1/0.5us", "9223372036854775807/1h", "10/1s gcra burst 50", "3/1m0s leaky-bucket burst 0", "1000/1m debt 5000", "6/1m aligned-window debt 12"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := sluice.ParseLimit(s)
		if err != nil {
			if !errors.Is(err, sluice.ErrInvalidLimit) {
				t.Fatalf("ParseLimit(%q): error %v is not ErrInvalidLimit", s, err)
			}
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("ParseLimit(%q) returned an invalid limit: %v", s, err)
		}
		if l.Rate <= 0 || l.Period < time.Microsecond {
			t.Fatalf("ParseLimit(%q) = %+v", s, l)
		}
		if back, err := sluice.ParseLimit(l.String()); err != nil || back != l {
			t.Fatalf("ParseLimit(%q) = %+v, whose String %q reads back as %+v, %v", s, l, l.String(), back, err)
		}
	})
}

// Limit.String is read back by ParseLimit, whatever the algorithm, burst and
// period; the zero Algorithm is the token bucket.
func TestLimitStringRoundTrip(t *testing.T) {
	for _, l := range []sluice.Limit{
		sluice.PerSecond(10).WithBurst(50),
		sluice.Per(7, 100*time.Millisecond).WithBurst(2).WithAlgorithm(sluice.GCRA),
		sluice.PerMinute(20).WithBurst(0).WithAlgorithm(sluice.LeakyBucket),
		sluice.Per(1000, 24*time.Hour).WithAlgorithm(sluice.AlignedWindow),
		sluice.Per(3, 1500*time.Microsecond).WithAlgorithm(sluice.SlidingLog),
		{Rate: 5, Period: time.Second, Burst: 5}, // zero Algorithm
		{Algorithm: sluice.FixedWindow, Rate: 1000, Period: time.Minute, Debt: 5000},
	} {
		got, err := sluice.ParseLimit(l.String())
		want := l
		if want.Algorithm == 0 {
			want.Algorithm = sluice.TokenBucket
		}
		if err != nil || got != want {
			t.Errorf("ParseLimit(%q) = %+v, %v; want %+v", l.String(), got, err, want)
		}
	}
	var zero sluice.Limit
	zero.Rate, zero.Period, zero.Burst = 2, time.Second, 2
	if zero.Algorithm.String() != "token-bucket" || zero.Validate() != nil {
		t.Errorf("the zero Algorithm is %q, %v; want a valid token bucket", zero.Algorithm, zero.Validate())
	}
	for _, bad := range []string{"10/1s burst", "10/1s burst x", "10/1s nope", "10/", "10/1s gcra burst 0"} {
		if _, err := sluice.ParseLimit(bad); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("ParseLimit(%q): %v, want ErrInvalidLimit", bad, err)
		}
	}
}

// The Algorithm constants are algo's kinds: a store passes
// algo.Kind(limit.Algorithm) to the steps.
func TestAlgorithmsAreKinds(t *testing.T) {
	for a, k := range map[sluice.Algorithm]algo.Kind{
		sluice.TokenBucket: algo.TokenBucket, sluice.GCRA: algo.GCRA, sluice.LeakyBucket: algo.LeakyBucket,
		sluice.FixedWindow: algo.FixedWindow, sluice.AlignedWindow: algo.AlignedWindow,
		sluice.SlidingWindow: algo.SlidingWindow, sluice.SlidingLog: algo.SlidingLog,
	} {
		if algo.Kind(a) != k || a.String() != k.String() {
			t.Errorf("%v is %d, algo's %v is %d", a, a, k, k)
		}
	}
}

// A limit's capacity is the most one request can spend on a fresh key; its
// refill, how long an emptied budget takes to come back: what the
// RateLimit-Policy header calls q and w.
func ExampleLimit_Capacity() {
	l := sluice.PerSecond(10).WithBurst(50)
	fmt.Println(l.Capacity(), l.Refill())
	w := sluice.PerMinute(100).WithAlgorithm(sluice.FixedWindow)
	fmt.Println(w.Capacity(), w.Refill())
	// Output:
	// 50 5s
	// 100 1m0s
}
