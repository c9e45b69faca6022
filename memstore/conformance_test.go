package memstore_test

import (
	"testing"

	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/store"
	conformance "github.com/sluice-go/sluice/store/storetest"
)

// TestConformance runs the public conformance suite, the one an outside
// store runs, on memstore.
func TestConformance(t *testing.T) {
	conformance.Run(t, func(*testing.T) store.Store { return memstore.New() })
}
