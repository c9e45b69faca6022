package memstore_test

import (
	"context"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/store"
)

// A charge or a settle on a key that exists allocates nothing, in debt or
// not, through a Limiter and as a composite op of up to 4 parts.
func TestChargeZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	s := memstore.New()
	lim := sluice.New(s)
	ctx := context.Background()
	l := sluice.PerSecond(1_000_000).WithBurst(1000)
	l.Debt = 5000
	w := sluice.PerMinute(100).WithAlgorithm(sluice.AlignedWindow)
	w.Debt = 50
	take, _ := lim.Take(ctx, "llm", l, 10)
	parts := [4]store.Part{
		{Key: "a", Limit: store.Limit{Algorithm: 1, Rate: 10, Period: 1_000_000, Burst: 10, Debt: 10}, Cost: 3},
		{Key: "b", Limit: store.Limit{Algorithm: 7, Rate: 10, Period: 60_000_000, Debt: 10}, Cost: 3},
		{Key: "c", Limit: store.Limit{Algorithm: 2, Rate: 10, Period: 1_000_000, Burst: 10}, Cost: 3},
		{Key: "d", Limit: store.Limit{Algorithm: 4, Rate: 10, Period: 1_000_000}, Cost: 3},
	}
	both := []sluice.Part{{Key: "llm", Limit: l, Cost: 7}, {Key: "w", Limit: w, Cost: 7}}
	each := make([]sluice.Result, 2)
	for name, f := range map[string]func(){
		"ChargeAll":         func() { lim.ChargeAll(ctx, both, each) },
		"Charge":            func() { lim.Charge(ctx, "llm", l, 1) },
		"Charge past Debt":  func() { lim.Charge(ctx, "llm", l, 1<<40) },
		"Charge a window":   func() { lim.Charge(ctx, "w", w, 70) },
		"Settle, charging":  func() { lim.Settle(ctx, "llm", l, 10, 20, take) },
		"Settle, refunding": func() { lim.Settle(ctx, "llm", l, 10, 5, take) },
		"Charge of 4 parts": func() {
			ops := [1]store.Op{{Kind: store.Charge, Parts: parts[:]}}
			s.Run(ctx, ops[:])
		},
	} {
		f()
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s: %v allocations, want 0", name, n)
		}
	}
}
