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
