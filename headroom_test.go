package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/store"
)

// 10 calls a minute for an API key, 2 of them kept for critical calls:
// batch calls, which leave a headroom of 2, stop at 8; critical ones use
// all 10.
func ExamplePart_headroom() {
	clock := &manualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	lim := sluice.New(memstore.New(memstore.WithClock(clock)))
	ctx := context.Background()
	api := sluice.PerMinute(10).WithAlgorithm(sluice.FixedWindow)

	batch := 0
	for range 10 {
		r, _ := lim.TakeAll(ctx, []sluice.Part{{Key: "key:acme", Limit: api, Cost: 1, Headroom: 2}}, nil)
		if r.Allowed {
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

// TestHeadroomErrors: a one-part TakeAll's headroom is checked with its
// cost; a store known only by its interface keeps a headroom as memstore
// does.
func TestHeadroomErrors(t *testing.T) {
	lim := sluice.New(memstore.New(memstore.WithClock(fixedClock{})))
	ctx := context.Background()
	l := sluice.PerMinute(5).WithAlgorithm(sluice.FixedWindow)
	one := func(lim *sluice.Limiter, cost, headroom int64) (sluice.Result, error) {
		return lim.TakeAll(ctx, []sluice.Part{{Key: "k", Limit: l, Cost: cost, Headroom: headroom}}, nil)
	}
	if _, err := one(lim, 4, 2); !errors.Is(err, sluice.ErrCostExceedsCapacity) {
		t.Errorf("4 + 2 over 5: %v", err)
	}
	if _, err := one(lim, 1, -1); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Errorf("negative headroom: %v", err)
	}
	outside := sluice.New(struct{ store.Store }{memstore.New(memstore.WithClock(fixedClock{}))})
	for i := range 5 {
		got, gotErr := one(outside, 1, 2)
		want, wantErr := one(lim, 1, 2)
		if got != want || gotErr != nil || wantErr != nil {
			t.Fatalf("call %d: outside %+v %v, memstore %+v %v", i, got, gotErr, want, wantErr)
		}
	}
}

// Priority classes in a composite: a global budget of 10 a minute with 2
// kept for critical calls, beside each tenant's own 5 a minute. A batch
// call takes from both only while 2 global units would stay; a critical
// call (no headroom) uses the whole budget.
func ExampleLimiter_TakeAll_headroom() {
	clock := &manualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	lim := sluice.New(memstore.New(memstore.WithClock(clock)))
	ctx := context.Background()
	global := sluice.PerMinute(10).WithAlgorithm(sluice.FixedWindow)
	tenant := sluice.PerMinute(5).WithAlgorithm(sluice.FixedWindow)
	call := func(who string, headroom int64) bool {
		r, _ := lim.TakeAll(ctx, []sluice.Part{
			{Key: "global", Limit: global, Cost: 1, Headroom: headroom},
			{Key: "tenant:" + who, Limit: tenant, Cost: 1},
		}, nil)
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

// TestPartHeadroomErrors: a part's headroom is checked with its cost,
// naming the part, by TakeAll and Acquire alike; a store known only by its
// interface decides parts with headroom as memstore does.
func TestPartHeadroomErrors(t *testing.T) {
	lim := sluice.New(memstore.New())
	ctx := context.Background()
	l := sluice.PerMinute(5).WithAlgorithm(sluice.FixedWindow)
	ok := sluice.Part{Key: "a", Limit: l, Cost: 1}
	for _, tc := range []struct {
		part sluice.Part
		want error
	}{
		{sluice.Part{Key: "k", Limit: l, Cost: 4, Headroom: 2}, sluice.ErrCostExceedsCapacity},
		{sluice.Part{Key: "k", Limit: l, Cost: 1, Headroom: -1}, sluice.ErrInvalidCost},
	} {
		parts := []sluice.Part{ok, tc.part}
		if _, err := lim.TakeAll(ctx, parts, nil); !errors.Is(err, tc.want) {
			t.Errorf("TakeAll %+v: %v, want %v", tc.part, err, tc.want)
		}
		if _, err := lim.TakeAll(ctx, parts, make([]sluice.Result, 2)); !errors.Is(err, tc.want) {
			t.Errorf("TakeAll %+v, each: %v, want %v", tc.part, err, tc.want)
		}
		if _, err := lim.Acquire(ctx, "job", sluice.MaxConcurrent(2), 1, parts...); !errors.Is(err, tc.want) {
			t.Errorf("Acquire %+v: %v, want %v", tc.part, err, tc.want)
		}
	}
	if r, err := lim.Take(ctx, "a", l, 0); err != nil || r.Remaining != 5 {
		t.Fatalf("the refused composites spent: %+v %v", r, err)
	}
	// WaitAll keeps the headroom: 3 of 5 spent, a class keeping 2 waits
	// for the next window, past the deadline.
	if r, err := lim.Take(ctx, "w", l, 3); err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if r, err := lim.WaitAll(short, []sluice.Part{{Key: "w", Limit: l, Cost: 1, Headroom: 2}}, nil); !errors.Is(err, sluice.ErrDeadline) || r.Allowed {
		t.Errorf("WaitAll past the class's share: %+v %v, want ErrDeadline", r, err)
	}
	inside := sluice.New(memstore.New(memstore.WithClock(fixedClock{})))
	outside := sluice.New(struct{ store.Store }{memstore.New(memstore.WithClock(fixedClock{}))})
	parts := []sluice.Part{ok, {Key: "b", Limit: l, Cost: 1, Headroom: 1}}
	for i := range 6 {
		var in, out [2]sluice.Result
		want, wantErr := inside.TakeAll(ctx, parts, in[:])
		got, gotErr := outside.TakeAll(ctx, parts, out[:])
		if got != want || in != out || gotErr != nil || wantErr != nil {
			t.Fatalf("call %d: outside %+v %+v %v, memstore %+v %+v %v", i, got, out, gotErr, want, in, wantErr)
		}
	}
}
