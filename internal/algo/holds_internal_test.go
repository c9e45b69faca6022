package algo

import (
	"math/rand/v2"
	"testing"

	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// check fails t unless h's index is whole: each level a circle through
// the head, linked both ways, in the order of expiries, every level a
// subset of the one below; the table finds every node by its id and holds
// nothing else; the count and the units match the nodes.
func (h *Holds) check(t *testing.T) {
	t.Helper()
	if !h.indexed {
		for i := 1; i < len(h.few); i++ {
			if h.few[i-1].Expiry > h.few[i].Expiry {
				t.Fatalf("the slice is out of order at %d: %v", i, h.few)
			}
		}
		if len(h.few) > manyHolds {
			t.Fatalf("%d holds in the slice, more than %d", len(h.few), manyHolds)
		}
		return
	}
	x := h.idx
	if x.n <= fewHolds {
		t.Fatalf("%d holds indexed, at most %d should be in the slice", x.n, fewHolds)
	}
	onLevel := make([]map[int32]bool, maxLevel)
	for l := range maxLevel {
		onLevel[l] = map[int32]bool{}
		prev := int32(0)
		for i := x.next(0, l); i != 0; i = x.next(i, l) {
			switch {
			case x.prev(i, l) != prev:
				t.Fatalf("level %d: node %d's prev is %d, want %d", l, i, x.prev(i, l), prev)
			case int(x.nodes[i].level) <= l:
				t.Fatalf("level %d: node %d has %d levels", l, i, x.nodes[i].level)
			case prev != 0 && x.nodes[prev].Expiry > x.nodes[i].Expiry:
				t.Fatalf("level %d: node %d expires before node %d, which it follows", l, i, prev)
			case l > 0 && !onLevel[l-1][i]:
				t.Fatalf("node %d is on level %d, not on %d", i, l, l-1)
			case l >= x.top:
				t.Fatalf("node %d on level %d, above the top %d", i, l, x.top)
			}
			onLevel[l][i] = true
			prev = i
		}
		if x.prev(0, l) != prev {
			t.Fatalf("level %d: the head's prev is %d, want the last, %d", l, x.prev(0, l), prev)
		}
	}
	used := int64(0)
	for i := range onLevel[0] {
		used += x.nodes[i].Units
		if got, _ := x.find(x.nodes[i].ID); got != i {
			t.Fatalf("the table maps id %d to %d, want %d", x.nodes[i].ID, got, i)
		}
	}
	if len(onLevel[0]) != x.n || x.ids.n != x.n || used != x.used {
		t.Fatalf("%d nodes linked, %d counted, %d in the table; units %d, counted %d", len(onLevel[0]), x.n, x.ids.n, used, x.used)
	}
}

// TestHoldsIndexWhole runs random traces that grow a key's holds past
// manyHolds and shrink them below fewHolds, by releases and by holds
// coming back, and checks the index after every step.
func TestHoldsIndexWhole(t *testing.T) {
	r := rand.New(rand.NewPCG(testenv.Seed(t), 31))
	var moves int
	for range 20 {
		var h Holds
		c := Concurrency{Limit: 200, Lifetime: 1000}
		now, next := int64(1000), int64(1)
		var ids []int64
		wasIndexed := false
		for i := range 3000 {
			grow := (i/300)%2 == 0 // phases of growth and of shrinking
			c.Lifetime = 1 + r.Int64N(2000)
			op, units, id := OpAcquire, 1+r.Int64N(3), next
			switch k := r.IntN(10); {
			case len(ids) > 0 && (!grow && k < 7 || grow && k < 2):
				op, units, id = OpRelease, 0, ids[r.IntN(len(ids))]
			case len(ids) > 0 && k < 8:
				op, units, id = OpExtend, 0, ids[r.IntN(len(ids))]
			default:
				next++
			}
			var d Decision
			if _, err := HoldStep(&c, &h, op, now, units, id, &d); err != nil {
				t.Fatal(err)
			}
			if op == OpAcquire && d.Allowed {
				ids = append(ids, id)
			}
			h.check(t)
			if h.indexed != wasIndexed {
				moves++
				wasIndexed = h.indexed
			}
			now += r.Int64N(5)
			if r.IntN(200) == 0 {
				now += 2000 // every hold comes back
			}
		}
	}
	if moves < 20 {
		t.Fatalf("the holds moved between the slice and the index %d times, want many", moves)
	}
}

// TestIDTable puts and deletes ids, some crowding one run of slots, and
// checks every lookup against a map.
func TestIDTable(t *testing.T) {
	r := rand.New(rand.NewPCG(testenv.Seed(t), 32))
	var tab idTable
	nodes := make([]holdNode, 20001) // node i+1 is put at step i
	want := map[int64]int32{}
	for i := range 20000 {
		id := 1 + r.Int64N(3000)
		if i%3 == 0 {
			id = 1 + r.Int64N(40) // a crowd of small ids
		}
		if _, ok := want[id]; ok {
			tab.delAt(tab.slotOf(id, nodes))
			delete(want, id)
		} else {
			nodes[i+1].ID = id
			tab.put(id, int32(i+1), -1)
			want[id] = int32(i + 1)
		}
		if r.IntN(100) == 0 {
			for id, node := range want {
				if got, _ := tab.get(id, nodes); got != node {
					t.Fatalf("step %d: id %d maps to %d, want %d", i, id, got, node)
				}
			}
			if tab.n != len(want) {
				t.Fatalf("step %d: %d ids, want %d", i, tab.n, len(want))
			}
		}
		if got, _ := tab.get(3001, nodes); got != 0 {
			t.Fatal("an id never put was found")
		}
	}
}

// TestHoldsScale counts the work of each operation on a key of 10,000
// holds and of 100,000: the nodes a search or a walk steps over stay a
// few dozen, and do not grow tenfold with the holds.
func TestHoldsScale(t *testing.T) {
	var work [2][]int
	for k, n := range []int{10_000, 100_000} {
		var h Holds
		c := Concurrency{Limit: int64(n) + 2, Lifetime: 1_000_000}
		now := int64(1)
		for id := range int64(n) {
			step(t, &h, &c, OpAcquire, now, 1, id+1)
			now++
		}
		h.idx.visits = 0
		count := func(what string, op, units, id int64, lifetime int64) {
			c.Lifetime = lifetime
			if d := step(t, &h, &c, op, now, units, id); d.Allowed != (units <= 1) {
				t.Fatalf("%s: %+v", what, d)
			}
			work[k] = append(work[k], h.idx.visits)
			t.Logf("%d holds, %s: %d nodes visited", n, what, h.idx.visits)
			h.idx.visits = 0
			now++
		}
		count("acquire, last to expire", OpAcquire, 1, int64(n)+1, 1_000_000)
		// The holds come back from 1,000,001 to 1,000,000 + n: now +
		// 995,000 is among them.
		count("acquire, expiring among the others", OpAcquire, 1, int64(n)+2, 995_000)
		count("release of the oldest", OpRelease, 0, 1, 0)
		count("release from the middle", OpRelease, 0, int64(n)/2, 0)
		count("extend to the middle", OpExtend, 0, int64(n)/3, 995_000)
		count("refused acquire, 1 unit over", OpAcquire, 3, int64(n)+3, 1_000_000)
		count("refused acquire, 10 units over", OpAcquire, 12, int64(n)+4, 1_000_000)
	}
	for i := range work[0] {
		if work[0][i] > 100 || work[1][i] > 100 {
			t.Errorf("operation %d: %d then %d nodes visited at 10,000 then 100,000 holds, want at most 100", i, work[0][i], work[1][i])
		}
	}
}

// step runs one operation that must not fail.
func step(t *testing.T, h *Holds, c *Concurrency, op, now, units, id int64) Decision {
	t.Helper()
	var d Decision
	if _, err := HoldStep(c, h, op, now, units, id, &d); err != nil {
		t.Fatal(err)
	}
	return d
}
