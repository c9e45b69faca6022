package memstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/storetest"
	"github.com/sluice-go/sluice/memstore"
)

func TestCompositeOneUserBurst(t *testing.T) {
	s := memstore.New()
	storetest.OneUserBurst(t, s.TakeAllAt, "")
}

func TestCompositeRandom(t *testing.T) {
	s := memstore.New()
	storetest.RandomComposites(t, s.TakeAllAt, "", 60, 200)
}

func TestRefund(t *testing.T) {
	storetest.Refund(t, sluice.New(memstore.New()), "")
}

func TestTakeAllErrors(t *testing.T) {
	lim := sluice.New(memstore.New())
	ctx := context.Background()
	l := sluice.PerSecond(1)
	if _, err := lim.TakeAll(ctx, []sluice.Part{{Key: "a", Limit: l}, {Key: "a", Limit: l}}, 1); !errors.Is(err, sluice.ErrDuplicateKey) {
		t.Errorf("duplicate key: %v", err)
	}
	if _, err := lim.TakeAll(ctx, nil, 1); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("no parts: %v", err)
	}
	if _, err := lim.TakeAll(ctx, []sluice.Part{{Key: "a", Limit: l}, {Key: "b", Limit: sluice.PerSecond(10)}}, 2); !errors.Is(err, sluice.ErrCostExceedsCapacity) {
		t.Errorf("cost over one part's capacity: %v", err)
	}
	if _, err := lim.TakeAll(ctx, []sluice.Part{{Key: "", Limit: l}}, 1); !errors.Is(err, sluice.ErrEmptyKey) {
		t.Errorf("empty key: %v", err)
	}
}
