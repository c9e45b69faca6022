package store_test

import (
	"fmt"

	"github.com/sluice-go/sluice/store"
)

// A store decides an op in one transaction: it loads the states the op
// names, Apply decides, and it saves the states that changed. Here the key
// is new, so its state is a zero State, and the take's state is then saved
// until it is fresh again.
func ExampleApply() {
	op := store.Op{
		Kind:     store.Take,
		At:       1_764_000_000_000_000, // µs since the epoch
		Key:      "user:42",
		Limit:    store.Limit{Algorithm: 1, Rate: 10, Period: 60_000_000, Burst: 10}, // 10 a minute, a token bucket
		Cost:     3,
		MaxDelay: store.Never,
	}
	keys := store.Keys(&op)
	states := make([]store.State, len(keys)) // loaded: none is held yet
	store.Apply(&op, op.At, states)
	fmt.Printf("allowed %v, %d left, fresh again in %ds\n", op.Decision.Allowed, op.Decision.Remaining, op.Decision.ResetAfter/1e6)
	for i, k := range keys {
		if st := &states[i]; st.Changed() && st.FreshAt() > op.At {
			b, _ := st.MarshalBinary()
			fmt.Printf("save %q: %d bytes, to be deleted at +%ds\n", k, len(b), (st.FreshAt()-op.At)/1e6)
		}
	}
	// Output:
	// allowed true, 7 left, fresh again in 18s
	// save "r:user:42": 28 bytes, to be deleted at +18s
}
