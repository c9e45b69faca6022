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
