package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/memstore"
)

// fakeClock is a clock that moves only when someone sleeps on it.
type fakeClock struct {
	mu    sync.Mutex
	us    int64
	slept []time.Duration
}

func newFakeClock() *fakeClock { return &fakeClock{us: 1_764_000_000_000_000} }

func (c *fakeClock) micros() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.us
}

func (c *fakeClock) Now() time.Time { return time.UnixMicro(c.micros()) }

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slept = append(c.slept, d)
	c.us += d.Microseconds()
	return ctx.Err()
}

func newLimiter() (*sluice.Limiter, *fakeClock) {
	c := newFakeClock()
	return sluice.New(memstore.New(memstore.WithClock(c))), c
}

func TestTakeErrors(t *testing.T) {
	lim, _ := newLimiter()
	ctx := context.Background()
	l := sluice.PerSecond(10).WithBurst(5)
	for _, c := range []struct {
		key  string
		l    sluice.Limit
		cost int64
		want error
	}{
		{"", l, 1, sluice.ErrEmptyKey},
		{"k", l, -1, sluice.ErrInvalidCost},
		{"k", l, 6, sluice.ErrCostExceedsCapacity},
		{"k", sluice.PerSecond(0), 1, sluice.ErrInvalidLimit},
		{"k", l.WithAlgorithm(sluice.LeakyBucket).WithBurst(2), 4, sluice.ErrCostExceedsCapacity},
		{"k", l.WithAlgorithm(sluice.FixedWindow), 11, sluice.ErrCostExceedsCapacity},
	} {
		if _, err := lim.Take(ctx, c.key, c.l, c.cost); !errors.Is(err, c.want) {
			t.Errorf("Take(%q, %v, %d) = %v, want %v", c.key, c.l, c.cost, err, c.want)
		}
	}
	// Nothing was spent by the errors.
	if r, err := lim.Take(ctx, "k", l, 0); err != nil || r.Remaining != 5 {
		t.Errorf("after errors: %+v, %v; want 5 remaining", r, err)
	}
	if err := lim.Reset(ctx, ""); !errors.Is(err, sluice.ErrEmptyKey) {
		t.Errorf("Reset of an empty key: %v", err)
	}
}

func TestTakeAndReset(t *testing.T) {
	lim, _ := newLimiter()
	ctx := context.Background()
	l := sluice.PerSecond(1).WithBurst(5)
	for i := 0; i < 10; i++ {
		r, err := lim.Take(ctx, "chat:1", l, 1)
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed != (i < 5) {
			t.Fatalf("request %d: allowed %v", i, r.Allowed)
		}
		if !r.Allowed && r.RetryAfter != time.Second {
			t.Fatalf("request %d: retry after %v, want 1s", i, r.RetryAfter)
		}
	}
	if err := lim.Reset(ctx, "chat:1"); err != nil {
		t.Fatal(err)
	}
	if r, _ := lim.Take(ctx, "chat:1", l, 5); !r.Allowed {
		t.Fatal("after Reset the bucket must be full")
	}
}

func TestWait(t *testing.T) {
	lim, clock := newLimiter()
	ctx := context.Background()
	l := sluice.PerSecond(2).WithBurst(1) // one every 500ms
	for i := 0; i < 4; i++ {
		if _, err := lim.Wait(ctx, "k", l, 1); err != nil {
			t.Fatal(err)
		}
	}
	want := []time.Duration{500 * time.Millisecond, 500 * time.Millisecond, 500 * time.Millisecond}
	if len(clock.slept) != 3 || clock.slept[0] != want[0] || clock.slept[2] != want[2] {
		t.Fatalf("slept %v, want %v", clock.slept, want)
	}
}

func TestWaitDeadline(t *testing.T) {
	lim, clock := newLimiter()
	l := sluice.PerSecond(1).WithBurst(1)
	ctx := context.Background()
	if _, err := lim.Take(ctx, "k", l, 1); err != nil {
		t.Fatal(err)
	}
	// The next unit comes in 1s; a deadline 300ms away returns at once.
	dctx, cancel := context.WithDeadline(ctx, clock.Now().Add(300*time.Millisecond))
	defer cancel()
	_, err := lim.Wait(dctx, "k", l, 1)
	if !errors.Is(err, sluice.ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait = %v, want ErrDeadline", err)
	}
	if len(clock.slept) != 0 {
		t.Fatalf("Wait slept %v before giving up", clock.slept)
	}
}

func TestWaitLeakyBucket(t *testing.T) {
	lim, clock := newLimiter()
	ctx := context.Background()
	l := sluice.Per(10, time.Second).WithBurst(4).WithAlgorithm(sluice.LeakyBucket) // T = 100ms
	for i := 0; i < 3; i++ {
		r, err := lim.Wait(ctx, "payments", l, 1)
		if err != nil || !r.Allowed {
			t.Fatalf("Wait %d: %+v, %v", i, r, err)
		}
	}
	// Each Wait slept out its delay, so each left 100ms after the last.
	if len(clock.slept) != 2 || clock.slept[0] != 100*time.Millisecond || clock.slept[1] != 100*time.Millisecond {
		t.Fatalf("slept %v", clock.slept)
	}
	// Fill the queue from other callers, then a caller whose deadline comes
	// before its turn gets ErrDeadline at once and spends nothing.
	for i := 0; i < 4; i++ {
		if r, _ := lim.Take(ctx, "payments", l, 1); !r.Allowed {
			t.Fatal("queue refused too early")
		}
	}
	before, _ := lim.Take(ctx, "payments", l, 0)
	dctx, cancel := context.WithDeadline(ctx, clock.Now().Add(250*time.Millisecond))
	defer cancel()
	if _, err := lim.Wait(dctx, "payments", l, 1); !errors.Is(err, sluice.ErrDeadline) {
		t.Fatalf("Wait = %v, want ErrDeadline", err)
	}
	after, _ := lim.Take(ctx, "payments", l, 0)
	if after != before {
		t.Fatalf("a refused Wait spent: before %+v after %+v", before, after)
	}
}

func TestWaitCanceled(t *testing.T) {
	lim, _ := newLimiter()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	l := sluice.PerSecond(1).WithBurst(1)
	lim.Take(context.Background(), "k", l, 1)
	if _, err := lim.Wait(ctx, "k", l, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on a canceled context = %v", err)
	}
}

// WaitAll waits until every part grants, sleeping the largest refusal's
// RetryAfter, and gives up at once when the deadline would pass first.
func TestWaitAll(t *testing.T) {
	lim, clock := newLimiter()
	ctx := context.Background()
	parts := []sluice.Part{
		{Key: "chat:1", Limit: sluice.PerSecond(1).WithBurst(1), Cost: 1},
		{Key: "global", Limit: sluice.PerSecond(30), Cost: 1},
	}
	for i := 0; i < 3; i++ {
		if r, err := lim.WaitAll(ctx, parts, nil); err != nil || !r.Allowed {
			t.Fatalf("WaitAll %d: %+v %v", i, r, err)
		}
	}
	if len(clock.slept) != 2 || clock.slept[0] != time.Second || clock.slept[1] != time.Second {
		t.Fatalf("slept %v, want the chat's 1s twice", clock.slept)
	}
	// The global budget was spent once per admitted message only.
	if r, _ := lim.Take(ctx, "global", sluice.PerSecond(30), 0); r.Remaining != 29 {
		t.Fatalf("global remaining %d: a refused composite spent", r.Remaining)
	}
	dctx, cancel := context.WithDeadline(ctx, clock.Now().Add(100*time.Millisecond))
	defer cancel()
	if _, err := lim.WaitAll(dctx, parts, nil); !errors.Is(err, sluice.ErrDeadline) {
		t.Fatalf("WaitAll past the deadline: %v", err)
	}
}

// The Limiter remembers validated limits; many limits sharing its few slots,
// and invalid ones among them, are each still read right.
func TestManyLimits(t *testing.T) {
	lim, _ := newLimiter()
	ctx := context.Background()
	for round := 0; round < 3; round++ {
		for i := int64(1); i <= 100; i++ {
			l := sluice.PerMinute(i).WithBurst(i)
			r, err := lim.Take(ctx, fmt.Sprintf("k%d:%d", round, i), l, i)
			if err != nil || !r.Allowed || r.Remaining != 0 {
				t.Fatalf("limit %v: %+v %v", l, r, err)
			}
			if _, err := lim.Take(ctx, "k", l, i+1); !errors.Is(err, sluice.ErrCostExceedsCapacity) {
				t.Fatalf("limit %v, cost over capacity: %v", l, err)
			}
			if _, err := lim.Take(ctx, "k", sluice.PerMinute(-i), 1); !errors.Is(err, sluice.ErrInvalidLimit) {
				t.Fatalf("invalid limit accepted: %v", err)
			}
		}
	}
}
