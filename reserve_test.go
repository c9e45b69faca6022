package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/memstore"
)

// 10 calls a minute for an API key, 2 of them kept for critical calls:
// batch calls stop at 8, critical ones use all 10.
func ExampleLimiter_TakeReserving() {
	clock := &manualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	lim := sluice.New(memstore.New(memstore.WithClock(clock)))
	ctx := context.Background()
	api := sluice.PerMinute(10).Using(sluice.FixedWindow)

	batch := 0
	for range 10 {
		if r, _ := lim.TakeReserving(ctx, "key:acme", api, 1, 2); r.Allowed {
			batch++
		}
	}
	critical := 0
	for range 10 {
		if r, _ := lim.Take(ctx, "key:acme", api, 1); r.Allowed {
			critical++
		}
	}
	fmt.Println("batch", batch, "critical", critical)
	// Output: batch 8 critical 2
}

func TestTakeReservingErrors(t *testing.T) {
	lim := sluice.New(memstore.New())
	ctx := context.Background()
	l := sluice.PerMinute(5).Using(sluice.FixedWindow)
	if _, err := lim.TakeReserving(ctx, "k", l, 4, 2); !errors.Is(err, sluice.ErrCostExceedsCapacity) {
		t.Errorf("4 + 2 over 5: %v", err)
	}
	if _, err := lim.TakeReserving(ctx, "k", l, 1, -1); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Errorf("negative reserve: %v", err)
	}
	outside := sluice.New(struct{ sluice.Store }{memstore.New()})
	if _, err := outside.TakeReserving(ctx, "k", l, 1, 1); !errors.Is(err, sluice.ErrNoReserve) || !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("outside store: %v", err)
	}
}

// Priority classes in a composite: a global budget of 10 a minute with 2
// kept for critical calls, beside each tenant's own 5 a minute. A batch
// call takes from both only while 2 global units would stay; a critical
// call (no reserve) uses the whole budget.
func ExampleLimiter_TakeAll_reserve() {
	clock := &manualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	lim := sluice.New(memstore.New(memstore.WithClock(clock)))
	ctx := context.Background()
	global := sluice.PerMinute(10).Using(sluice.FixedWindow)
	tenant := sluice.PerMinute(5).Using(sluice.FixedWindow)
	call := func(who string, reserve int64) bool {
		r, _ := lim.TakeAll(ctx, []sluice.Part{
			{Key: "global", Limit: global, Cost: 1, Reserve: reserve},
			{Key: "tenant:" + who, Limit: tenant, Cost: 1},
		})
		return r.Allowed
	}
	batch := 0
	for _, who := range []string{"a", "a", "a", "a", "a", "a", "b", "b", "b", "b"} {
		if call(who, 2) {
			batch++
		}
	}
	critical := 0
	for range 3 {
		if call("c", 0) {
			critical++
		}
	}
	fmt.Println("batch", batch, "critical", critical)
	// Output: batch 8 critical 2
}

// TestPartReserveErrors: a part's reserve is checked as TakeReserving's,
// naming the part; a store from outside the module cannot keep one.
func TestPartReserveErrors(t *testing.T) {
	lim := sluice.New(memstore.New())
	ctx := context.Background()
	l := sluice.PerMinute(5).Using(sluice.FixedWindow)
	ok := sluice.Part{Key: "a", Limit: l, Cost: 1}
	for _, tc := range []struct {
		part sluice.Part
		want error
	}{
		{sluice.Part{Key: "k", Limit: l, Cost: 4, Reserve: 2}, sluice.ErrCostExceedsCapacity},
		{sluice.Part{Key: "k", Limit: l, Cost: 1, Reserve: -1}, sluice.ErrInvalidCost},
	} {
		parts := []sluice.Part{ok, tc.part}
		if _, err := lim.TakeAll(ctx, parts); !errors.Is(err, tc.want) {
			t.Errorf("TakeAll %+v: %v, want %v", tc.part, err, tc.want)
		}
		if _, err := lim.TakeEach(ctx, parts, make([]sluice.Result, 2)); !errors.Is(err, tc.want) {
			t.Errorf("TakeEach %+v: %v, want %v", tc.part, err, tc.want)
		}
		if _, err := lim.AcquireAll(ctx, "job", sluice.MaxConcurrent(2), 1, parts); !errors.Is(err, tc.want) {
			t.Errorf("AcquireAll %+v: %v, want %v", tc.part, err, tc.want)
		}
	}
	if r, err := lim.Take(ctx, "a", l, 0); err != nil || r.Remaining != 5 {
		t.Fatalf("the refused composites spent: %+v %v", r, err)
	}
	// WaitAll keeps the reserve: 3 of 5 spent, a class keeping 2 waits for
	// the next window, past the deadline.
	if r, err := lim.Take(ctx, "w", l, 3); err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if r, err := lim.WaitAll(short, []sluice.Part{{Key: "w", Limit: l, Cost: 1, Reserve: 2}}); !errors.Is(err, sluice.ErrDeadline) || r.Allowed {
		t.Errorf("WaitAll past the class's share: %+v %v, want ErrDeadline", r, err)
	}
	outside := sluice.New(struct{ sluice.Store }{memstore.New()})
	parts := []sluice.Part{ok, {Key: "b", Limit: l, Cost: 1, Reserve: 1}}
	if _, err := outside.TakeAll(ctx, parts); !errors.Is(err, sluice.ErrNoReserve) {
		t.Errorf("outside TakeAll: %v", err)
	}
	if _, err := outside.TakeEach(ctx, parts, make([]sluice.Result, 2)); !errors.Is(err, sluice.ErrNoReserve) {
		t.Errorf("outside TakeEach: %v", err)
	}
}
