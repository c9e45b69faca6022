package sluice_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
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
		{"zero burst leaky", sluice.PerSecond(10).WithBurst(0).Using(sluice.LeakyBucket), true},
		{"negative burst", sluice.PerSecond(10).WithBurst(-1), false},
		{"sub-µs period", sluice.Per(1, 999*time.Nanosecond), false},
		{"period not whole µs", sluice.Per(1, 1500*time.Nanosecond), false},
		{"overflow", sluice.PerHour(1).WithBurst(1 << 30), false},
		{"no algorithm", sluice.Limit{Rate: 1, Period: time.Second, Burst: 1}, false},
		{"each algorithm", sluice.PerMinute(100).Using(sluice.SlidingLog), true},
	} {
		err := c.l.Validate()
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, sluice.ErrInvalidLimit)) {
			t.Errorf("%s: %v.Validate() = %v, want ok=%v", c.name, c.l, err, c.ok)
		}
	}
}

func TestAlgorithmNames(t *testing.T) {
	for _, a := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.LeakyBucket, sluice.FixedWindow, sluice.SlidingWindow, sluice.SlidingLog} {
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
	for _, s := range []string{"10/1s", "20/100ms", "1/1m", "5/250us", "10/s", "0/1s", "1/0.5us", "9223372036854775807/1h"} {
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
	})
}
