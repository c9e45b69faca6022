package sqlstore_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/sluice-go/sluice/examples/sqlstore"
	"github.com/sluice-go/sluice/store"
	"github.com/sluice-go/sluice/store/storetest"
)

// open opens a store on a new database file that the test removes.
func open(t testing.TB) *sqlstore.Store {
	s, err := sqlstore.Open(filepath.Join(t.TempDir(), "sluice.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConformance runs sluice's conformance suite on the store.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t) })
}

// TestSweep checks that Sweep deletes the rows fresh at its time, and only
// those, and that a key swept decides as a fresh one.
func TestSweep(t *testing.T) {
	s := open(t)
	const at = 1_764_000_000_000_000
	minute := store.Limit{Algorithm: 1, Rate: 1, Period: 60_000_000, Burst: 1}
	hour := store.Limit{Algorithm: 1, Rate: 1, Period: 3_600_000_000, Burst: 1}
	ops := []store.Op{
		{Kind: store.Take, At: at, Key: "minute", Limit: minute, Cost: 1, MaxDelay: store.Never},
		{Kind: store.Take, At: at, Key: "hour", Limit: hour, Cost: 1, MaxDelay: store.Never},
		{Kind: store.Acquire, At: at, Key: "hour", Concurrency: store.Concurrency{Limit: 1, Lifetime: 3_600_000_000}, Cost: 1, ID: 1},
	}
	s.Run(t.Context(), ops)
	for _, op := range ops {
		if op.Err != nil || !op.Decision.Allowed {
			t.Fatalf("%+v %v", op.Decision, op.Err)
		}
	}
	for _, tc := range []struct {
		now  int64
		want int64
	}{{at + 59_999_999, 0}, {at + 60_000_000, 1}, {at + 60_000_000, 0}, {at + 3_600_000_000, 2}} {
		if n, err := s.Sweep(t.Context(), tc.now); err != nil || n != tc.want {
			t.Fatalf("Sweep at +%dµs: %d rows deleted (%v), want %d", tc.now-at, n, err, tc.want)
		}
	}
	op := []store.Op{{Kind: store.Take, At: at + 3_600_000_000, Key: "minute", Limit: minute, Cost: 1, MaxDelay: store.Never}}
	if s.Run(t.Context(), op); op[0].Err != nil || op[0].Decision != (store.Decision{Allowed: true, ResetAfter: 60_000_000}) {
		t.Fatalf("a take on a swept key: %+v %v", op[0].Decision, op[0].Err)
	}
}

// BenchmarkTake measures takes of one unit on 100 keys, one op a call of
// Run, each its own transaction on a database file.
func BenchmarkTake(b *testing.B) {
	s := open(b)
	l := store.Limit{Algorithm: 1, Rate: 1000, Period: 1_000_000, Burst: 1000}
	ops := make([]store.Op, 1)
	at := int64(1_764_000_000_000_000)
	for i := 0; b.Loop(); i++ {
		ops[0] = store.Op{Kind: store.Take, At: at + int64(i), Key: fmt.Sprintf("k%d", i%100), Limit: l, Cost: 1, MaxDelay: store.Never}
		if s.Run(b.Context(), ops); ops[0].Err != nil {
			b.Fatal(ops[0].Err)
		}
	}
}
