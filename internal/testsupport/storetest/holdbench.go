package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/store"
)

// HoldOps are the operations HoldAtBench measures.
var HoldOps = []string{"acquire", "release", "extend"}

// HoldAtBench measures one hold operation op on a key of h that holds
// holds holds (through st's Run, at times it gives), so that a store's
// benchmarks at 1 hold and at 10,000 compare the same work
// (docs/performance.md, "Holds at scale"):
//
//   - acquire: a new hold of one unit. The clock moves 1 µs an operation
//     and a hold lives holds µs, so each acquire also finds the oldest
//     hold come back, as a key in steady use does, and the key keeps
//     holds holds.
//   - release: the oldest hold is released and a new one acquired in its
//     place (a release alone would empty the key): a release costs this
//     less an acquire.
//   - extend: the holds in turn, oldest first, each extended by an hour,
//     which makes it the last to come back.
//
// Every operation must be allowed. The key is filled before b's timer
// starts (b.Loop); then filled, if not nil, is called.
func HoldAtBench(b *testing.B, st store.Store, key string, holds int, op string, filled func()) {
	ctx := context.Background()
	now := int64(1_764_000_000_000_000)
	life := int64(holds)
	if op != "acquire" {
		life = int64(time.Hour / time.Microsecond)
	}
	c := algo.Concurrency{Limit: 1 << 40, Lifetime: life}
	ops := make([]store.Op, 1)
	run := func(kind store.Kind, units, id int64) {
		ops[0] = HoldOp(kind, key, c, units, id)
		ops[0].At = now
		st.Run(ctx, ops)
		if o := &ops[0]; o.Err != nil || !o.Decision.Allowed {
			b.Fatalf("op %d of hold %d at %d: %+v %v", kind, id, now, o.Decision, o.Err)
		}
	}
	ids := make([]int64, holds) // the holds, oldest first from ids[i%holds]
	next := int64(1)
	for i := range ids {
		ids[i] = next
		run(store.Acquire, 1, next)
		next++
		now++
	}
	if filled != nil {
		filled()
	}
	i := 0
	for b.Loop() {
		switch op {
		case "acquire":
			run(store.Acquire, 1, next)
		case "release":
			run(store.Release, 0, ids[i])
			ids[i] = next
			run(store.Acquire, 1, next)
		case "extend":
			run(store.Extend, 0, ids[i])
		}
		next++
		now++
		if i++; i == holds {
			i = 0
		}
	}
}
