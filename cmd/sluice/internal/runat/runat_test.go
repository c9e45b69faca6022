package runat_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cmd/sluice/internal/runat"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/store"
)

// take is a Take of cost units of key under 2 per second, a burst of 2.
func take(key string, cost int64) store.Op {
	return store.Op{Kind: store.Take, Key: key, Limit: store.Limit{Algorithm: 1, Rate: 2, Period: 1e6, Burst: 2}, Cost: cost, MaxDelay: store.Never}
}

// Decisions are made at the time given, 0 included on Memory's store, and
// never at the store's clock.
func TestRun(t *testing.T) {
	ctx := context.Background()
	st := runat.Memory()
	for _, s := range []struct {
		at, cost  int64
		allowed   bool
		remaining int64
	}{
		{0, 2, true, 0},
		{1, 1, false, 0},
		{500_000, 1, true, 0},
		{1_500_000, 0, true, 2},
	} {
		d, err := runat.Run(ctx, st, take("k", s.cost), s.at)
		if err != nil || d.Allowed != s.allowed || d.Remaining != s.remaining {
			t.Errorf("at %d, cost %d: %+v, %v; want allowed %v, remaining %d", s.at, s.cost, d, err, s.allowed, s.remaining)
		}
	}
}

// A store with a clock of its own cannot be given time 0.
func TestRunZeroOnStoreClock(t *testing.T) {
	_, err := runat.Run(context.Background(), memstore.New(), take("k", 1), 0)
	if !errors.Is(err, sluice.ErrInvalidTime) {
		t.Errorf("time 0 on a store with a clock: %v, want ErrInvalidTime", err)
	}
}
