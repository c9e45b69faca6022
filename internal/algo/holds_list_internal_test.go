package algo

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// TestHoldsListRoundTrip runs random traces that grow a key's holds past
// manyHolds and shrink them again, and before every step rebuilds a copy
// from the list of the holds (AppendList, SetList): the copy is whole, and
// the step decides the same on it as on the original and leaves the same
// list.
func TestHoldsListRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(testenv.Seed(t), 33))
	indexed := 0
	for range 10 {
		var h Holds
		c := Concurrency{Limit: 120, Lifetime: 1000}
		now, next := int64(1000), int64(1)
		var ids []int64
		for i := range 1500 {
			grow := (i/250)%2 == 0
			c.Lifetime = 1 + r.Int64N(2000)
			op, units, id := OpAcquire, r.Int64N(4), next
			switch k := r.IntN(10); {
			case len(ids) > 0 && (!grow && k < 7 || grow && k < 2):
				op, units, id = OpRelease, 0, ids[r.IntN(len(ids))]
			case len(ids) > 0 && k < 5:
				op, units, id = OpExtend, 0, ids[r.IntN(len(ids))]
			case len(ids) > 0 && k == 5:
				id = ids[r.IntN(len(ids))] // an id that may be held
			default:
				next++
			}
			if h.indexed {
				indexed++
			}
			list := h.AppendList(nil)
			var cp Holds
			cp.SetList(list)
			cp.check(t)
			if got := cp.AppendList(nil); !slices.Equal(got, list) {
				t.Fatalf("step %d: the copy lists %v, want %v", i, got, list)
			}
			var d, dc Decision
			exp, err := HoldStep(&c, &h, op, now, units, id, &d)
			expc, errc := HoldStep(&c, &cp, op, now, units, id, &dc)
			if d != dc || exp != expc || err != errc {
				t.Fatalf("step %d (op %d, %d units, id %d at %d): %+v %d %v, on the copy %+v %d %v", i, op, units, id, now, d, exp, err, dc, expc, errc)
			}
			if a, b := h.AppendList(nil), cp.AppendList(nil); !slices.Equal(a, b) {
				t.Fatalf("step %d: after it, %v and on the copy %v", i, a, b)
			}
			if op == OpAcquire && exp > 0 {
				ids = append(ids, id)
			}
			now += r.Int64N(5)
			if r.IntN(150) == 0 {
				now += 2000
			}
		}
	}
	if indexed == 0 {
		t.Fatal("the holds were never indexed: a trace that tests half")
	}
	t.Logf("%d steps on indexed holds", indexed)
}
