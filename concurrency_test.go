package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/store"
)

// At most 2 exports of an account run at once; each holds its slot while it
// runs and releases it when done. A holder that dies keeps its slot until
// the lease's lifetime ends.
func ExampleLimiter_Acquire() {
	clock := &manualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	lim := sluice.New(memstore.New(memstore.WithClock(clock)))
	ctx := context.Background()
	exports := sluice.MaxConcurrent(2).WithLifetime(10 * time.Minute)

	a, _ := lim.Acquire(ctx, "export:acme", exports, 1)
	b, _ := lim.Acquire(ctx, "export:acme", exports, 1)
	c, _ := lim.Acquire(ctx, "export:acme", exports, 1)
	fmt.Println(a.Allowed, b.Allowed, c.Allowed, "retry within", c.RetryAfter)

	r, _ := lim.Release(ctx, a)
	fmt.Println("released:", r.Allowed, "free:", r.Remaining)
	// Output:
	// true true false retry within 10m0s
	// released: true free: 1
}

// A long job extends its lease before the lifetime ends, so that its slot
// is not taken while it still runs.
func ExampleLimiter_Extend() {
	lim := sluice.New(memstore.New())
	ctx := context.Background()
	jobs := sluice.MaxConcurrent(1).WithLifetime(30 * time.Second)

	lease, _ := lim.Acquire(ctx, "job:nightly", jobs, 1)
	lease, err := lim.Extend(ctx, lease, time.Minute)
	fmt.Println(lease.Allowed, err, lease.Expiry > 0)
	lim.Release(ctx, lease)
	// Output:
	// true <nil> true
}

// TestHoldsOutside: a store known only by its interface holds leases when
// it can (memstore behind a wrapper), alone and with rate parts, and
// answers an error wrapping errors.ErrUnsupported, never a lease, when it
// cannot (a store that holds no concurrency limits).
func TestHoldsOutside(t *testing.T) {
	ctx := context.Background()
	lim := sluice.New(struct{ store.Store }{memstore.New()})
	if sluice.Paths(lim) {
		t.Fatal("a wrapped memstore took memstore's direct path")
	}
	c := sluice.MaxConcurrent(1)
	ls, err := lim.Acquire(ctx, "k", c, 1)
	if err != nil || !ls.Allowed || ls.ID == 0 {
		t.Fatalf("acquire through the interface: %+v %v", ls, err)
	}
	if again, err := lim.Acquire(ctx, "k", c, 1); err != nil || again.Allowed {
		t.Fatalf("a second hold of a limit of 1: %+v %v, want refused", again, err)
	}
	if r, err := lim.Release(ctx, ls); err != nil || !r.Allowed || r.Remaining != 1 {
		t.Fatalf("release through the interface: %+v %v", r, err)
	}
	part := sluice.Part{Key: "budget", Limit: sluice.PerMinute(1), Cost: 1}
	if ls, err := lim.Acquire(ctx, "k", c, 1, part); err != nil || !ls.Allowed {
		t.Fatalf("acquire with a part through the interface: %+v %v", ls, err)
	}
	if r, err := lim.Take(ctx, "budget", part.Limit, 0); err != nil || r.Remaining != 0 {
		t.Fatalf("the part's budget after the acquire: %+v %v, want spent", r, err)
	}

	none := sluice.New(newMapStore(newFakeClock()))
	ls, err = none.Acquire(ctx, "k", c, 1)
	if !errors.Is(err, errors.ErrUnsupported) || ls.Allowed {
		t.Fatalf("a store that holds no leases: %+v %v, want an error wrapping errors.ErrUnsupported", ls, err)
	}
	var zero sluice.Limiter
	if _, err := zero.Acquire(context.Background(), "k", sluice.MaxConcurrent(1), 1); !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Fatalf("the zero Limiter: %v, want ErrStoreUnavailable", err)
	}
}

// TestConcurrencyDefaultLifetime: a Concurrency with no lifetime gives its
// leases DefaultLifetime.
func TestConcurrencyDefaultLifetime(t *testing.T) {
	s := memstore.New(memstore.WithClock(fixedClock{}))
	ls, err := sluice.New(s).Acquire(context.Background(), "k", sluice.MaxConcurrent(1), 1)
	if err != nil || !ls.Allowed || ls.Expiry != (fixedClock{}).Now().UnixMicro()+sluice.DefaultLifetime.Microseconds() {
		t.Fatalf("%+v %v, want held for DefaultLifetime", ls, err)
	}
}

type fixedClock struct{}

func (fixedClock) Now() time.Time { return time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC) }

func (fixedClock) Sleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

// A report takes a slot of 2 per account and a unit of 10 a minute, all or
// nothing: the refused third neither holds a slot nor spends a unit.
func ExampleLimiter_Acquire_parts() {
	clock := &manualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	lim := sluice.New(memstore.New(memstore.WithClock(clock)))
	ctx := context.Background()
	slots := sluice.MaxConcurrent(2)
	budget := []sluice.Part{{Key: "reports:acme", Limit: sluice.PerMinute(10), Cost: 1}}

	for range 3 {
		ls, _ := lim.Acquire(ctx, "reports:acme", slots, 1, budget...)
		fmt.Println(ls.Allowed, ls.Remaining)
	}
	// Output:
	// true 1
	// true 0
	// false 0
}

// TestConcurrencyHeadroom: a limit of 10 with a headroom of 2 kept for
// critical requests: normal requests are refused once 8 are held, critical ones
// use all 10, and a normal request's figures are its class's.
func TestConcurrencyHeadroom(t *testing.T) {
	lim := sluice.New(memstore.New(memstore.WithClock(fixedClock{})))
	ctx := context.Background()
	critical := sluice.MaxConcurrent(10).WithLifetime(time.Minute)
	normal := critical.WithHeadroom(2)
	var held []sluice.Lease
	for i := range 8 {
		ls, err := lim.Acquire(ctx, "api", normal, 1)
		if err != nil || !ls.Allowed || ls.Remaining != int64(7-i) {
			t.Fatalf("normal %d: %+v %v", i, ls, err)
		}
		held = append(held, ls)
	}
	if ls, err := lim.Acquire(ctx, "api", normal, 1); err != nil || ls.Allowed || ls.RetryAfter != time.Minute {
		t.Fatalf("normal past its share: %+v %v, want refused", ls, err)
	}
	for i := range 2 {
		if ls, err := lim.Acquire(ctx, "api", critical, 1); err != nil || !ls.Allowed || ls.Remaining != int64(1-i) {
			t.Fatalf("critical %d: %+v %v", i, ls, err)
		}
	}
	if ls, err := lim.Acquire(ctx, "api", critical, 1); err != nil || ls.Allowed {
		t.Fatalf("critical past the whole limit: %+v %v", ls, err)
	}
	if r, err := lim.Release(ctx, held[0]); err != nil || !r.Allowed || r.Remaining != 0 {
		t.Fatalf("a normal release with 9 of 10 held: %+v %v, want 0 left for its class", r, err)
	}
	for _, bad := range []sluice.Concurrency{critical.WithHeadroom(10), critical.WithHeadroom(-1)} {
		if _, err := lim.Acquire(ctx, "api", bad, 1); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("headroom %d: %v, want ErrInvalidLimit", bad.Headroom, err)
		}
	}
	if _, err := lim.Acquire(ctx, "api", critical.WithHeadroom(5), 6); !errors.Is(err, sluice.ErrCostExceedsCapacity) {
		t.Errorf("6 units where a class may hold 5: %v, want ErrCostExceedsCapacity", err)
	}
}

// TestConcurrencyInvalid: a limit that cannot be used is an error wrapping
// ErrInvalidLimit from Validate, Acquire and Release alike, never a
// decision; a headroom that would wrap the limit around is one of them.
func TestConcurrencyInvalid(t *testing.T) {
	lim := sluice.New(memstore.New())
	ctx := context.Background()
	bad := []sluice.Concurrency{
		{Limit: 0},
		{Limit: -1},
		{Limit: 1<<50 + 1},
		{Limit: 3, Lifetime: time.Nanosecond},
		{Limit: 3, Lifetime: 1500 * time.Nanosecond},
		{Limit: 3, Lifetime: -time.Second},
		{Limit: 3, Lifetime: (1<<50 + 1) * time.Microsecond},
		{Limit: 3, Headroom: 3},
		{Limit: 3, Headroom: -1},
		{Limit: math.MinInt64, Headroom: math.MaxInt64 - 10},
		{Limit: -5, Headroom: 2},
	}
	for _, c := range bad {
		if err := c.Validate(); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("%+v: Validate %v, want ErrInvalidLimit", c, err)
		}
		if ls, err := lim.Acquire(ctx, "k", c, 1); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("%+v: Acquire %+v %v, want ErrInvalidLimit", c, ls, err)
		}
		if r, err := lim.Release(ctx, sluice.Lease{Key: "k", Limit: c, Units: 1, ID: 1}); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("%+v: Release %+v %v, want ErrInvalidLimit", c, r, err)
		}
	}
	for _, c := range []sluice.Concurrency{{Limit: 1}, {Limit: 1 << 50, Lifetime: time.Microsecond}, {Limit: 3, Headroom: 2, Lifetime: time.Hour}} {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: Validate %v, want nil", c, err)
		}
	}
}
