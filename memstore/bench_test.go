package memstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/sluice-go/sluice"
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
// goroutines.
func BenchmarkManyKeysParallel(b *testing.B) {
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	lim := sluice.New(memstore.New())
	l := sluice.PerSecond(1_000_000).WithBurst(1000)
	ctx := context.Background()
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
		if _, err := lim.TakeAll(ctx, parts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCompositeEach is BenchmarkCompositeOneKey through TakeEach,
// whose parts' results land in an array on the caller's stack: admitted,
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
				if _, err := lim.TakeEach(ctx, parts, each[:len(parts)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
