package memstore_test

import (
	"context"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/store"
)

func BenchmarkStep(b *testing.B) {
	p := algo.Params{Kind: algo.TokenBucket, Rate: 1e6, Period: 1e6, Burst: 1000}
	var s algo.State
	now := int64(1_764_000_000_000_000)
	for b.Loop() {
		now++
		algo.Step(&p, &s, now, 1, algo.Never)
	}
}

func BenchmarkTakeAtFixed(b *testing.B) {
	st := memstore.New()
	ctx := context.Background()
	op := store.Op{Kind: store.Take, Key: "user:1", Limit: store.Limit{Algorithm: uint8(algo.TokenBucket), Rate: 1e6, Period: 1e6, Burst: 1000}, Cost: 1, MaxDelay: store.Never, At: 1_764_000_000_000_000}
	var ops [1]store.Op
	for b.Loop() {
		op.At++
		ops[0] = op
		st.Run(ctx, ops[:])
	}
}

func BenchmarkLimiterFixedClock(b *testing.B) {
	now := int64(1_764_000_000_000_000)
	lim := sluice.New(memstore.New(memstore.WithClock(storelink.MicroClock(func() int64 { now++; return now }))))
	l := sluice.PerSecond(1_000_000).WithBurst(1000)
	ctx := context.Background()
	for b.Loop() {
		lim.Take(ctx, "user:1", l, 1)
	}
}
