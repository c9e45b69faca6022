package memstore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/internal/testsupport/storetest"
	"github.com/sluice-go/sluice/memstore"
)

// BenchmarkOneKey is one key taken serially: the lock, the map and the step.
func BenchmarkOneKey(b *testing.B) {
	lim := sluice.New(memstore.New())
	l := sluice.PerSecond(1_000_000).WithBurst(1000)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := lim.Take(ctx, "user:1", l, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkManyKeysParallel is 10,000 keys taken round-robin by parallel
// goroutines, as bench's Keys10k: with the store's clock, and with a clock
// read from memory (ticked by a goroutine every millisecond), which leaves
// the decision without the cost of reading the time.
func BenchmarkManyKeysParallel(b *testing.B) {
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	for _, c := range []string{"clock=store", "clock=memory"} {
		b.Run(c, func(b *testing.B) {
			var opts []memstore.Option
			if c == "clock=memory" {
				opts = append(opts, memstore.WithClock(tickedClock(b)))
			}
			lim := sluice.New(memstore.New(opts...))
			l := sluice.PerSecond(1_000_000).WithBurst(1000)
			ctx := context.Background()
			for _, k := range keys {
				lim.Take(ctx, k, l, 1)
			}
			var next atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(7919)) % len(keys)
				for pb.Next() {
					if _, err := lim.Take(ctx, keys[i], l, 1); err != nil {
						b.Error(err)
						return
					}
					if i++; i == len(keys) {
						i = 0
					}
				}
			})
		})
	}
}

// tickedClock is a clock read from memory, which a goroutine moves on by a
// millisecond every millisecond until b ends: a clock that costs an atomic
// load.
func tickedClock(b *testing.B) sluice.Clock {
	var now atomic.Int64
	now.Store(1_764_000_000_000_000)
	stop := make(chan struct{})
	t := time.NewTicker(time.Millisecond)
	go func() {
		for {
			select {
			case <-t.C:
				now.Add(1000)
			case <-stop:
				return
			}
		}
	}()
	b.Cleanup(func() {
		t.Stop()
		close(stop)
	})
	return storelink.MicroClock(now.Load)
}

// BenchmarkCompositeOneKey is a per-chat limit and a global one, taken
// together.
func BenchmarkCompositeOneKey(b *testing.B) {
	lim := sluice.New(memstore.New())
	parts := []sluice.Part{
		{Key: "chat:1", Limit: sluice.PerSecond(1_000_000).WithBurst(1000), Cost: 1},
		{Key: "global", Limit: sluice.PerSecond(30_000_000).WithBurst(1000), Cost: 1},
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := lim.TakeAll(ctx, parts, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCompositeEach is BenchmarkCompositeOneKey asking for each
// part's result, which lands in an array on the caller's stack: admitted,
// and refused (the global part spent, so each refusal looks at both).
func BenchmarkCompositeEach(b *testing.B) {
	for _, c := range []struct {
		name   string
		global sluice.Limit
		n      int
	}{
		{"admitted/2", sluice.PerSecond(30_000_000).WithBurst(1000), 2},
		{"admitted/4", sluice.PerSecond(30_000_000).WithBurst(1000), 4},
		{"refused/2", sluice.PerHour(1), 2},
		{"refused/4", sluice.PerHour(1), 4},
	} {
		b.Run(c.name, func(b *testing.B) {
			lim := sluice.New(memstore.New())
			l := sluice.PerSecond(1_000_000).WithBurst(1000)
			parts := []sluice.Part{
				{Key: "chat:1", Limit: l, Cost: 1},
				{Key: "global", Limit: c.global, Cost: 1},
				{Key: "user:1", Limit: l, Cost: 1},
				{Key: "org:1", Limit: l, Cost: 1},
			}[:c.n]
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				var each [4]sluice.Result
				if _, err := lim.TakeAll(ctx, parts, each[:len(parts)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkHoldAt is one hold operation on a key that holds 1 hold, then
// 10,000 (storetest.HoldAtBench): the cost of an acquire, a release or an
// extension must not grow with the holds of its key.
func BenchmarkHoldAt(b *testing.B) {
	for _, op := range storetest.HoldOps {
		for _, n := range []int{1, 10_000} { // side by side, for their ratio
			b.Run(fmt.Sprintf("op=%s/holds=%d", op, n), func(b *testing.B) {
				b.ReportAllocs()
				storetest.HoldAtBench(b, memstore.New(), "k", n, op, nil)
			})
		}
	}
}

// BenchmarkCharge is BenchmarkOneKey charging instead of taking: each
// charge of 1 after a take, the key in debt (a level at the allowance,
// each unit forgiven) or not.
func BenchmarkCharge(b *testing.B) {
	l := sluice.PerSecond(1_000_000).WithBurst(1000)
	l.Debt = 5000
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		units int64
	}{{"take", 0}, {"charge", 1}, {"charge-in-debt", 1}} {
		b.Run(c.name, func(b *testing.B) {
			lim := sluice.New(memstore.New())
			if c.name == "charge-in-debt" {
				lim.Charge(ctx, "user:1", l, 1<<40)
			}
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if c.units == 0 {
					_, err = lim.Take(ctx, "user:1", l, 1)
				} else {
					_, err = lim.Charge(ctx, "user:1", l, c.units)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
