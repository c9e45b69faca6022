package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/redisstore"
	"github.com/sluice-go/sluice/store"
)

// TestRunBatch: the ops of one Run share round trips (32 takes on distinct
// keys in a few, not 32), and two ops on one key are decided in the order
// given: of a burst of 1, the first is admitted and the second refused.
func TestRunBatch(t *testing.T) {
	far := &farClient{Client: redisrun.GoRedis(redistest.Shared(t).Client()), delay: 20 * time.Millisecond}
	st := newStore(t, far, redisstore.WithPrefix(fmt.Sprintf("runbatch:%d:", time.Now().UnixNano())))
	defer st.Close()
	one := store.Limit{Algorithm: 1, Rate: 1, Period: 3_600_000_000, Burst: 1}
	ops := make([]store.Op, 0, 34)
	for i := range 32 {
		ops = append(ops, store.Op{Kind: store.Take, Key: fmt.Sprintf("k%d", i), Limit: one, Cost: 1, MaxDelay: store.Never})
	}
	ops = append(ops, store.Op{Kind: store.Take, Key: "k0", Limit: one, Cost: 1, MaxDelay: store.Never})
	st.Run(context.Background(), ops)
	for i := range 32 {
		if op := &ops[i]; op.Err != nil || !op.Decision.Allowed {
			t.Fatalf("op %d: %+v %v, want admitted", i, op.Decision, op.Err)
		}
	}
	if op := &ops[32]; op.Err != nil || op.Decision.Allowed {
		t.Fatalf("the second take of k0: %+v %v, want refused after the first", op.Decision, op.Err)
	}
	// The 32 go together (some round trips, as the batcher gathers them),
	// then the second take of k0 on its own.
	if runs := far.runs.Load(); runs > 16 {
		t.Errorf("%d round trips for 33 ops", runs)
	}
	t.Logf("%d round trips for 33 ops", far.runs.Load())
}
