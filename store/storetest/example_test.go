package storetest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice/store"
	"github.com/sluice-go/sluice/store/storetest"
)

// mapStore is a whole store.Store: a map from each state's key to its
// bytes, under one lock. Each op loads the states it names, store.Apply
// decides it, and the states it changed are saved (or deleted once
// fresh), all under the lock: one op, one transaction.
type mapStore struct {
	mu     sync.Mutex
	states map[string][]byte
}

func newMapStore() *mapStore { return &mapStore{states: map[string][]byte{}} }

// Run decides each op in turn.
func (s *mapStore) Run(_ context.Context, ops []store.Op) {
	for i := range ops {
		s.run(&ops[i])
	}
}

func (s *mapStore) run(op *store.Op) {
	now := op.At
	if now == 0 {
		now = time.Now().UnixMicro()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := store.Keys(op)
	states := make([]store.State, len(keys))
	for i, k := range keys {
		if b, ok := s.states[k.String()]; ok {
			if err := states[i].UnmarshalBinary(b); err != nil {
				op.Err = err
				return
			}
		}
	}
	if store.Apply(op, now, states); op.Err != nil {
		return // a failed op changed nothing: save nothing
	}
	for i, k := range keys {
		switch st := &states[i]; {
		case st.FreshAt() <= now:
			delete(s.states, k.String())
		case st.Changed():
			b, err := st.MarshalBinary()
			if err != nil {
				panic(err) // not reached: Apply's states encode
			}
			s.states[k.String()] = b
		}
	}
}

// Compiled, not run: Run needs the *testing.T of a test. TestMapStore, in
// this package's tests, is this very test.
func ExampleRun() {
	testMapStore := func(t *testing.T) {
		storetest.Run(t, func(*testing.T) store.Store { return newMapStore() })
	}
	_ = testMapStore
}
