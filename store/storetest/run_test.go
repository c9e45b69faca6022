package storetest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sluice-go/sluice/store"
	"github.com/sluice-go/sluice/store/storetest"
)

// TestMapStore runs the suite on mapStore (example_test.go): the suite
// checks itself, and store.Apply, on a store written as an outside one
// would be.
func TestMapStore(t *testing.T) {
	storetest.Run(t, func(*testing.T) store.Store { return newMapStore() })
}

// ratesOnly is mapStore without concurrency limits: it answers hold ops
// with errors.ErrUnsupported, as a store that keeps no holds does.
type ratesOnly struct{ *mapStore }

func (s ratesOnly) Run(ctx context.Context, ops []store.Op) {
	for i := range ops {
		switch op := &ops[i]; op.Kind {
		case store.Acquire, store.Release, store.Extend:
			op.Err = fmt.Errorf("no concurrency limits here: %w", errors.ErrUnsupported)
		default:
			s.mapStore.Run(ctx, ops[i:i+1])
		}
	}
}

// TestRatesOnly runs the suite on a store without holds: the groups of
// holds skip, saying why, and the others pass.
func TestRatesOnly(t *testing.T) {
	storetest.Run(t, func(*testing.T) store.Store { return ratesOnly{newMapStore()} })
}

// noCharges is mapStore as a store that has not learnt charges (as an
// outside store may not have): it answers a Charge, and any op under a
// limit with a debt allowance, with errors.ErrUnsupported.
type noCharges struct{ *mapStore }

func (s noCharges) Run(ctx context.Context, ops []store.Op) {
	for i := range ops {
		op := &ops[i]
		debt := op.Limit.Debt != 0
		for _, p := range op.Parts {
			debt = debt || p.Limit.Debt != 0
		}
		if op.Kind == store.Charge || debt {
			op.Err = fmt.Errorf("no charges here: %w", errors.ErrUnsupported)
			continue
		}
		s.mapStore.Run(ctx, ops[i:i+1])
	}
}

// TestNoCharges runs the suite on a store without charges: the charge
// group skips, saying why, and the others pass.
func TestNoCharges(t *testing.T) {
	storetest.Run(t, func(*testing.T) store.Store { return noCharges{newMapStore()} })
}
