package sluice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/memstore"
)

// Charges and settles on one key, over memstore and over a store from
// outside the module: a charge past what the key has leaves a debt that
// takes wait out; a settle refunds or charges the difference, and charges
// all of actual after a refused take.
func TestChargeAndSettle(t *testing.T) {
	clock := newFakeClock()
	ctx := context.Background()
	for name, lim := range map[string]*sluice.Limiter{
		"memstore": sluice.New(memstore.New(memstore.WithClock(clock))),
		"outside":  sluice.New(newMapStore(clock), sluice.WithClock(clock)),
	} {
		l := sluice.Per(10, time.Second).WithBurst(10) // a unit per 100ms
		l.Debt = 20
		steps := []struct {
			what string
			f    func() (sluice.Result, error)
			want sluice.Result
		}{
			{"charge 25", func() (sluice.Result, error) { return lim.Charge(ctx, "k", l, 25) },
				sluice.Result{Allowed: true, Remaining: -15, ResetAfter: 2500 * time.Millisecond}},
			{"take 1 in debt", func() (sluice.Result, error) { return lim.Take(ctx, "k", l, 1) },
				sluice.Result{Remaining: -15, RetryAfter: 1600 * time.Millisecond, ResetAfter: 2500 * time.Millisecond}},
			{"charge 100: 5 fit", func() (sluice.Result, error) { return lim.Charge(ctx, "k", l, 100) },
				sluice.Result{Remaining: -20, ResetAfter: 3 * time.Second}},
			{"settle a refused take of 3 that used 2", func() (sluice.Result, error) {
				return lim.Settle(ctx, "k", l, 3, 2, sluice.Result{})
			}, sluice.Result{Remaining: -20, ResetAfter: 3 * time.Second}},
			{"settle a take of 10 that used 4", func() (sluice.Result, error) {
				return lim.Settle(ctx, "k", l, 10, 4, sluice.Result{Allowed: true})
			}, sluice.Result{Allowed: true, Remaining: -14, ResetAfter: 2400 * time.Millisecond}},
			{"settle what was taken", func() (sluice.Result, error) {
				return lim.Settle(ctx, "k", l, 4, 4, sluice.Result{Allowed: true})
			}, sluice.Result{Allowed: true, Remaining: -14, ResetAfter: 2400 * time.Millisecond}},
		}
		for _, s := range steps {
			if got, err := s.f(); err != nil || got != s.want {
				t.Errorf("%s: %s: %+v, %v\n want %+v", name, s.what, got, err, s.want)
			}
		}
	}
}

// A settle under a window refunds to the take's window only: units taken
// in a window that has ended are not given to the next.
func TestSettleWindow(t *testing.T) {
	lim, clock := newLimiter()
	ctx := context.Background()
	l := sluice.PerMinute(10).WithAlgorithm(sluice.AlignedWindow)
	clock.us = (clock.us/60_000_000 + 1) * 60_000_000
	take, _ := lim.Take(ctx, "w", l, 10)
	clock.us += 60_000_000
	lim.Take(ctx, "w", l, 10)
	if r, err := lim.Settle(ctx, "w", l, 10, 0, take); err != nil || r.Remaining != 0 {
		t.Fatalf("a settle of a take in the window before: %+v, %v; want nothing given back", r, err)
	}
}

func TestChargeErrors(t *testing.T) {
	lim, _ := newLimiter()
	ctx := context.Background()
	tb := sluice.PerSecond(5)
	for _, c := range []struct {
		what string
		err  error
		want error
	}{
		{"negative units", charge(lim.Charge(ctx, "k", tb, -1)), sluice.ErrInvalidCost},
		{"empty key", charge(lim.Charge(ctx, "", tb, 1)), sluice.ErrEmptyKey},
		{"sliding log", charge(lim.Charge(ctx, "k", tb.WithAlgorithm(sluice.SlidingLog), 1)), sluice.ErrNoRefund},
		{"a debt allowance under a leaky bucket", charge(lim.Charge(ctx, "k", sluice.Limit{Algorithm: sluice.LeakyBucket, Rate: 1, Period: time.Second, Debt: 1}, 1)), sluice.ErrInvalidLimit},
		{"a negative debt allowance", charge(lim.Take(ctx, "k", sluice.Limit{Rate: 1, Period: time.Second, Burst: 1, Debt: -1}, 1)), sluice.ErrInvalidLimit},
		{"settle under a leaky bucket", charge(lim.Settle(ctx, "k", tb.WithAlgorithm(sluice.LeakyBucket), 1, 1, sluice.Result{Allowed: true})), sluice.ErrNoRefund},
		{"settle a negative estimate", charge(lim.Settle(ctx, "k", tb, -1, 1, sluice.Result{Allowed: true})), sluice.ErrInvalidCost},
		{"settle a negative actual", charge(lim.Settle(ctx, "k", tb, 1, -1, sluice.Result{Allowed: true})), sluice.ErrInvalidCost},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.what, c.err, c.want)
		}
	}
	if r, _ := lim.Take(ctx, "k", tb, 0); r.Remaining != 5 {
		t.Errorf("the errors changed the key: %+v", r)
	}
}

// charge is a call's error, and it checks that an error comes with no
// result.
func charge(r sluice.Result, err error) error {
	if err != nil && r != (sluice.Result{}) {
		return errors.New("a result with an error")
	}
	return err
}

// ParseLimit reads a debt allowance and String writes it.
func TestLimitDebtText(t *testing.T) {
	l, err := sluice.ParseLimit("1000/1m debt 5000")
	if err != nil || l.Debt != 5000 || l.String() != "1000/1m0s token-bucket burst 1000 debt 5000" {
		t.Fatalf("ParseLimit: %+v %q, %v", l, l.String(), err)
	}
	for _, bad := range []string{"10/1s debt", "10/1s debt x", "10/1s debt -1", "10/1s sliding-log debt 5"} {
		if _, err := sluice.ParseLimit(bad); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("ParseLimit(%q): %v, want ErrInvalidLimit", bad, err)
		}
	}
}

// ChargeAll charges every part, none refused, over memstore and a store
// from outside the module; each part's result is its own charge's, and a
// part that cannot be charged charges nothing anywhere.
func TestChargeAll(t *testing.T) {
	clock := newFakeClock()
	ctx := context.Background()
	for name, lim := range map[string]*sluice.Limiter{
		"memstore": sluice.New(memstore.New(memstore.WithClock(clock))),
		"outside":  sluice.New(newMapStore(clock), sluice.WithClock(clock)),
	} {
		key := sluice.PerSecond(10) // a unit per 100ms
		key.Debt = 20
		org := sluice.PerMinute(100).WithAlgorithm(sluice.FixedWindow)
		parts := []sluice.Part{{Key: "key", Limit: key, Cost: 25, Headroom: 3}, {Key: "org", Limit: org, Cost: 25}}
		each := make([]sluice.Result, 2)
		r, err := lim.ChargeAll(ctx, parts, each)
		if err != nil {
			t.Fatalf("%s: ChargeAll: %v", name, err)
		}
		wantKey := sluice.Result{Allowed: true, Remaining: -15, ResetAfter: 2500 * time.Millisecond}
		// A fixed window's result names its window: the one opened now.
		wantOrg := sluice.Result{Allowed: true, Remaining: 75, ResetAfter: time.Minute, Window: clock.Now().UnixMicro() + 60_000_000}
		if each[0] != wantKey || each[1] != wantOrg {
			t.Errorf("%s: each %+v, want %+v and %+v", name, each, wantKey, wantOrg)
		}
		if want := (sluice.Result{Allowed: true, Remaining: -15, ResetAfter: time.Minute}); r != want {
			t.Errorf("%s: summary %+v, want %+v", name, r, want)
		}
		parts[1].Limit = org.WithAlgorithm(sluice.SlidingWindow)
		if err := charge(lim.ChargeAll(ctx, parts, nil)); !errors.Is(err, sluice.ErrNoRefund) {
			t.Errorf("%s: a part under a sliding window: %v, want ErrNoRefund", name, err)
		}
		if err := charge(lim.ChargeAll(ctx, parts, each[:1])); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("%s: one result for two parts: %v, want ErrInvalidLimit", name, err)
		}
		if r, _ := lim.Take(ctx, "key", key, 0); r.Remaining != -15 {
			t.Errorf("%s: the refused charges changed the key: %+v", name, r)
		}
	}
}
