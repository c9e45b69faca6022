package storetest_test

import (
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
