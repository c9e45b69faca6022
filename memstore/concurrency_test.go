package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/testsupport/storetest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/store"
)

// TestHoldZeroAllocs: an acquire and its release on a key that has had a
// hold before allocate nothing, nor does a refusal.
func TestHoldZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	lim := sluice.New(memstore.New())
	ctx := context.Background()
	c := sluice.MaxConcurrent(2)
	full, _ := lim.Acquire(ctx, "full", sluice.MaxConcurrent(1), 1)
	if !full.Allowed {
		t.Fatal("the first hold of a fresh key was refused")
	}
	for name, f := range map[string]func(){
		"Acquire+Release": func() {
			ls, _ := lim.Acquire(ctx, "job", c, 1)
			lim.Release(ctx, ls)
		},
		"refused Acquire": func() { lim.Acquire(ctx, "full", sluice.MaxConcurrent(1), 1) },
		"Extend":          func() { lim.Extend(ctx, full, 0) },
	} {
		f()
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s: %v allocations, want 0", name, n)
		}
	}
}

// TestHoldSweep: a key whose holds were all released or came back is
// forgotten by Sweep; one that still has a hold is kept.
func TestHoldSweep(t *testing.T) {
	clock := testenv.NewClock()
	s := memstore.New(memstore.WithClock(clock))
	lim := sluice.New(s)
	ctx := context.Background()
	c := sluice.MaxConcurrent(1).WithLifetime(time.Second)
	a, _ := lim.Acquire(ctx, "a", c, 1)
	lim.Acquire(ctx, "b", c, 1)
	if s.Len() != 2 {
		t.Fatalf("Len %d after two keys' holds, want 2", s.Len())
	}
	lim.Release(ctx, a)
	s.Sweep()
	if s.Len() != 1 {
		t.Fatalf("Len %d after a's release and a sweep, want 1", s.Len())
	}
	clock.Add(time.Second)
	s.Sweep()
	if s.Len() != 0 {
		t.Fatalf("Len %d once b's hold came back, want 0", s.Len())
	}
	if ls, err := lim.Acquire(ctx, "b", c, 1); err != nil || !ls.Allowed {
		t.Fatalf("b after the sweep: %+v %v", ls, err)
	}
}

// TestHoldIDInUseKeepsHolds: an acquire refused because its id is held
// changes nothing, not even when the set may be swept: a sweep after it
// keeps the hold, and a second one is refused under a limit of 1.
func TestHoldIDInUseKeepsHolds(t *testing.T) {
	s := memstore.New(memstore.WithClock(testenv.NewClock()))
	c := store.Concurrency{Limit: 1, Lifetime: 60_000_000}
	run := func(id int64) *store.Op {
		ops := []store.Op{{Kind: store.Acquire, Key: "k", Concurrency: c, Cost: 1, ID: id}}
		s.Run(context.Background(), ops)
		return &ops[0]
	}
	if op := run(7); op.Err != nil || !op.Decision.Allowed {
		t.Fatalf("first: %+v", op)
	}
	if op := run(7); !errors.Is(op.Err, store.ErrIDInUse) {
		t.Fatalf("same id: %v, want ErrIDInUse", op.Err)
	}
	s.Sweep()
	if op := run(8); op.Err != nil || op.Decision.Allowed {
		t.Fatalf("a second hold under a limit of 1 after a sweep: %+v", op)
	}
}

// TestResetDropsHolds: Reset returns a key to its fresh state, its holds
// included (store.Reset).
func TestResetDropsHolds(t *testing.T) {
	s := memstore.New(memstore.WithClock(testenv.NewClock()))
	lim := sluice.New(s)
	ctx := context.Background()
	c := sluice.MaxConcurrent(1)
	for _, key := range []string{"a", "b"} {
		if ls, err := lim.Acquire(ctx, key, c, 1); err != nil || !ls.Allowed {
			t.Fatalf("%s: %+v %v", key, ls, err)
		}
	}
	if err := lim.Reset(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if ls, _ := lim.Acquire(ctx, "a", c, 1); !ls.Allowed {
		t.Fatalf("a after its reset: %+v, want allowed", ls)
	}
	if ls, _ := lim.Acquire(ctx, "b", c, 1); ls.Allowed {
		t.Fatalf("b, not reset: %+v, want refused", ls)
	}
}

// BenchmarkHold is an acquire and its release on one key, beside one
// token-bucket take (the issue's bound: within 2×).
func BenchmarkHold(b *testing.B) {
	ctx := context.Background()
	b.Run("op=acquire+release", func(b *testing.B) {
		lim := sluice.New(memstore.New())
		c := sluice.MaxConcurrent(8)
		b.ReportAllocs()
		for b.Loop() {
			ls, err := lim.Acquire(ctx, "user:1", c, 1)
			if err != nil || !ls.Allowed {
				b.Fatal(ls, err)
			}
			if _, err := lim.Release(ctx, ls); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("op=take", func(b *testing.B) {
		lim := sluice.New(memstore.New())
		l := sluice.PerSecond(1_000_000).WithBurst(1000)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := lim.Take(ctx, "user:1", l, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkHoldAgainstTake is BenchmarkHold's two operations in rounds
// that alternate (holdRound acquire + release pairs, then as many takes),
// so that a burst of load on a shared machine lands on both alike; an
// operation is a round of each. It reports the fastest round of each, per
// operation, and their ratio (x-take): the figure docs/performance.md's
// summary gives for the 2× bound.
func BenchmarkHoldAgainstTake(b *testing.B) {
	const holdRound = 20_000
	ctx := context.Background()
	holds, takes := sluice.New(memstore.New()), sluice.New(memstore.New())
	c := sluice.MaxConcurrent(8)
	l := sluice.PerSecond(1_000_000).WithBurst(1000)
	pair, take := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		for range holdRound {
			ls, err := holds.Acquire(ctx, "user:1", c, 1)
			if err != nil || !ls.Allowed {
				b.Fatal(ls, err)
			}
			if _, err := holds.Release(ctx, ls); err != nil {
				b.Fatal(err)
			}
		}
		pair = min(pair, time.Since(start))
		start = time.Now()
		for range holdRound {
			if _, err := takes.Take(ctx, "user:1", l, 1); err != nil {
				b.Fatal(err)
			}
		}
		take = min(take, time.Since(start))
	}
	b.ReportMetric(float64(pair.Nanoseconds())/holdRound, "acquire+release-ns")
	b.ReportMetric(float64(take.Nanoseconds())/holdRound, "take-ns")
	b.ReportMetric(float64(pair)/float64(take), "x-take")
}

// At most 2 reports of a user built at once: the third waits for a slot. A
// hold not released (the process died) comes back by itself after its
// lifetime.
func ExampleStore_leases() {
	lim := sluice.New(memstore.New())
	ctx := context.Background()
	reports := sluice.MaxConcurrent(2).WithLifetime(5 * time.Minute)

	first, _ := lim.Acquire(ctx, "reports:alice", reports, 1)
	second, _ := lim.Acquire(ctx, "reports:alice", reports, 1)
	third, _ := lim.Acquire(ctx, "reports:alice", reports, 1)
	fmt.Println(first.Allowed, second.Allowed, third.Allowed)

	lim.Release(ctx, first)
	again, _ := lim.Acquire(ctx, "reports:alice", reports, 1)
	fmt.Println("after a release:", again.Allowed, "remaining", again.Remaining)
	// Output:
	// true true false
	// after a release: true remaining 0
}

// TestHoldZeroAllocsAtScale is TestHoldZeroAllocs on a key of 10,000
// holds, whose holds are indexed: an acquire, a release, an extension, a
// refusal and an acquire that finds a hold come back allocate nothing
// once the index has grown to the key's size.
func TestHoldZeroAllocsAtScale(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	s := memstore.New()
	ctx := context.Background()
	now, next := int64(1_764_000_000_000_000), int64(1)
	c := algo.Concurrency{Limit: 10_001, Lifetime: 10_000}
	ops := make([]store.Op, 1)
	run := func(kind store.Kind, units, id int64, allowed bool) {
		ops[0] = storetest.HoldOp(kind, "k", c, units, id)
		ops[0].At = now
		s.Run(ctx, ops)
		if op := &ops[0]; op.Err != nil || op.Decision.Allowed != allowed {
			t.Fatalf("op %d of %d at %d: %+v %v", kind, id, now, op.Decision, op.Err)
		}
	}
	for range 9_999 {
		run(store.Acquire, 1, next, true)
		next++
		now++
	}
	const ext = 1 << 40 // extended by the Extend case, so held throughout
	run(store.Acquire, 1, ext, true)
	now++
	for _, tc := range []struct {
		name string
		f    func()
	}{
		// One hold comes back (the oldest: the clock moves on a µs) and one
		// is acquired: the key keeps 10,000.
		{"Acquire", func() {
			run(store.Acquire, 1, next, true)
			next++
			now++
		}},
		{"Acquire+Release", func() {
			run(store.Acquire, 1, next, true)
			run(store.Release, 0, next, true)
			next++
		}},
		{"Extend", func() { run(store.Extend, 0, ext, true) }},
		{"refused Acquire", func() { run(store.Acquire, 3, next, false) }}, // 9,999 or more held
	} {
		tc.f()
		if n := testing.AllocsPerRun(1000, tc.f); n != 0 {
			t.Errorf("%s: %v allocations, want 0", tc.name, n)
		}
	}
}
