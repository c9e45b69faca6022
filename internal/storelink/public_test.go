package storelink_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
)

// TestChecked: a root Request no Limiter checked is checked as a Limiter
// checks one, and arrives with its fields in µs.
func TestChecked(t *testing.T) {
	lim := sluice.PerSecond(10).WithBurst(5)
	for _, c := range []struct {
		name string
		req  sluice.Request
		want error
		md   int64
	}{
		{"valid", sluice.Request{Key: "k", Limit: lim, Cost: 5, MaxDelay: math.MaxInt64}, nil, algo.Never},
		{"bounded delay", sluice.Request{Key: "k", Limit: lim.Using(sluice.LeakyBucket), Cost: 1, MaxDelay: 1500 * time.Microsecond}, nil, 1500},
		{"zero algorithm", sluice.Request{Key: "k", Limit: sluice.Limit{Rate: 1, Period: time.Second, Burst: 1}, Cost: 1}, nil, 0},
		{"empty key", sluice.Request{Limit: lim, Cost: 1}, sluice.ErrEmptyKey, 0},
		{"negative cost", sluice.Request{Key: "k", Limit: lim, Cost: -1}, sluice.ErrInvalidCost, 0},
		{"over capacity", sluice.Request{Key: "k", Limit: lim, Cost: 6}, sluice.ErrCostExceedsCapacity, 0},
		{"invalid limit", sluice.Request{Key: "k", Limit: sluice.PerSecond(0), Cost: 1}, sluice.ErrInvalidLimit, 0},
		{"period below 1µs", sluice.Request{Key: "k", Limit: sluice.Per(1, time.Nanosecond), Cost: 1}, sluice.ErrInvalidLimit, 0},
		{"negative max delay", sluice.Request{Key: "k", Limit: lim, Cost: 1, MaxDelay: -1}, sluice.ErrInvalidLimit, 0},
	} {
		r, err := storelink.Checked(&c.req)
		if !errors.Is(err, c.want) || (err == nil) != (c.want == nil) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
			continue
		}
		if err != nil {
			continue
		}
		p, _ := storelink.Params(c.req.Limit)
		if want := (storelink.Request{Key: c.req.Key, Params: p, Cost: c.req.Cost, MaxDelay: c.md}); r != want {
			t.Errorf("%s: %+v, want %+v", c.name, r, want)
		}
	}
}

// TestCheckedRefund: a refund needs an algorithm that gives units back,
// accepts any cost from 0 (a refund is not bounded by the capacity), and
// keeps its window.
func TestCheckedRefund(t *testing.T) {
	lim := sluice.Per(3, time.Minute).Using(sluice.FixedWindow)
	r, window, err := storelink.CheckedRefund(&sluice.Request{Key: "k", Limit: lim, Cost: 7, Window: 42})
	if err != nil || r.Cost != 7 || r.MaxDelay != algo.Never || window != 42 {
		t.Errorf("fixed window: %+v, window %d, %v", r, window, err)
	}
	for name, c := range map[string]struct {
		req  sluice.Request
		want error
	}{
		"sliding log":   {sluice.Request{Key: "k", Limit: lim.Using(sluice.SlidingLog), Cost: 1}, sluice.ErrNoRefund},
		"negative":      {sluice.Request{Key: "k", Limit: lim, Cost: -1}, sluice.ErrInvalidCost},
		"empty key":     {sluice.Request{Limit: lim, Cost: 1}, sluice.ErrEmptyKey},
		"invalid limit": {sluice.Request{Key: "k", Limit: sluice.Limit{}, Cost: 1}, sluice.ErrInvalidLimit},
	} {
		if _, _, err := storelink.CheckedRefund(&c.req); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}

// TestCheckedParts: the error of a composite names its part, or the key
// named twice; a composite has at least one part.
func TestCheckedParts(t *testing.T) {
	lim := sluice.PerSecond(10)
	ok := sluice.Request{Key: "a", Limit: lim, Cost: 1, MaxDelay: math.MaxInt64}
	rs, err := storelink.CheckedParts([]sluice.Request{ok, {Key: "b", Limit: lim, MaxDelay: math.MaxInt64}})
	if err != nil || len(rs) != 2 || rs[1].Key != "b" || rs[1].Cost != 0 {
		t.Fatalf("%+v, %v", rs, err)
	}
	_, err = storelink.CheckedParts([]sluice.Request{ok, {Key: "b", Limit: lim, Cost: 11}})
	if !errors.Is(err, sluice.ErrCostExceedsCapacity) || !strings.Contains(err.Error(), `part 1 ("b")`) {
		t.Errorf("part over capacity: %v", err)
	}
	if _, err = storelink.CheckedParts([]sluice.Request{ok, ok}); !errors.Is(err, sluice.ErrDuplicateKey) {
		t.Errorf("a key twice: %v", err)
	}
	if _, err = storelink.CheckedParts([]sluice.Request(nil)); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("no part: %v", err)
	}
}

// TestResultOf: a step's microseconds become durations, algo.Never the
// longest one, and the Result is the root's field for field.
func TestResultOf(t *testing.T) {
	d := algo.Decision{Allowed: false, Remaining: 3, RetryAfter: algo.Never, ResetAfter: 1500, Delay: 0, Window: 9}
	got := sluice.Result(storelink.ResultOf(&d))
	want := sluice.Result{Remaining: 3, RetryAfter: math.MaxInt64, ResetAfter: 1500 * time.Microsecond, Window: 9}
	if got != want {
		t.Errorf("%+v, want %+v", got, want)
	}
}
