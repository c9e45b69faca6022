package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/memstore"
)

// 10 calls a minute for an API key, 2 of them kept for critical calls:
// batch calls stop at 8, critical ones use all 10.
func ExampleLimiter_TakeReserving() {
	clock := &manualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	lim := sluice.New(memstore.New(memstore.WithClock(clock)))
	ctx := context.Background()
	api := sluice.PerMinute(10).Using(sluice.FixedWindow)

	batch := 0
	for range 10 {
		if r, _ := lim.TakeReserving(ctx, "key:acme", api, 1, 2); r.Allowed {
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

func TestTakeReservingErrors(t *testing.T) {
	lim := sluice.New(memstore.New())
	ctx := context.Background()
	l := sluice.PerMinute(5).Using(sluice.FixedWindow)
	if _, err := lim.TakeReserving(ctx, "k", l, 4, 2); !errors.Is(err, sluice.ErrCostExceedsCapacity) {
		t.Errorf("4 + 2 over 5: %v", err)
	}
	if _, err := lim.TakeReserving(ctx, "k", l, 1, -1); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Errorf("negative reserve: %v", err)
	}
	outside := sluice.New(struct{ sluice.Store }{memstore.New()})
	if _, err := outside.TakeReserving(ctx, "k", l, 1, 1); !errors.Is(err, sluice.ErrNoReserve) || !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("outside store: %v", err)
	}
}
