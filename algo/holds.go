package algo

import (
	"math/bits"
	"math/rand/v2"
)

// Holds is the holds of a key, the state HoldStep works on; the zero
// value holds none. A few holds are a slice sorted by expiry, which a scan
// reads faster than any index; past manyHolds they move to an index (a
// skip list ordered by expiry and a table from id to hold) whose
// operations cost the same at 10 holds as at a million, and back to the
// slice once fewHolds or fewer are left. The index keeps its arrays while
// the key has holds, so that a key in steady use allocates nothing.
type Holds struct {
	few     []Hold     // the holds, sorted by expiry, while not indexed
	idx     *holdIndex // the holds while indexed; kept, empty, for reuse
	indexed bool
}

// The sizes at which a key's holds move to the index and back: apart, so
// that a key whose holds come and go around one size does not move them
// on every operation.
const (
	manyHolds = 32
	fewHolds  = 8
)

// Len is the number of holds kept: those held, and those come back that
// no operation has dropped yet.
func (h *Holds) Len() int {
	if h.indexed {
		return h.idx.n
	}
	return len(h.few)
}

// index moves the holds, sorted by expiry, into the index.
func (h *Holds) index() {
	if h.idx == nil {
		h.idx = newHoldIndex()
	}
	for _, l := range h.few {
		h.idx.insert(l)
	}
	h.few = h.few[:0]
	h.indexed = true
}

// unindex moves the indexed holds back into the slice, in the order of
// their expiries, and empties the index; an index grown far past what a
// few holds need is given back to the garbage collector.
func (h *Holds) unindex() {
	x := h.idx
	for i := x.first(); i != 0; i = x.first() {
		h.few = append(h.few, x.nodes[i].Hold)
		x.remove(i)
	}
	x.reset()
	if cap(x.nodes) > 8*manyHolds {
		h.idx = nil
	}
	h.indexed = false
}

// maxLevel is the levels of the skip list: with a level in four rising
// one more, 16 levels keep a search short up to 4^16 holds.
const maxLevel = 16

// holdIndex is a key's holds, indexed: a skip list ordered by expiry (the
// first to come back first; among equal expiries, in the order they were
// placed) whose levels are linked both ways, so that a hold found by its
// id is unlinked without a search, and a table from id to hold. Acquiring
// a hold that comes back last (the same lifetime as the others) links it
// at the end; one that comes back earlier is placed by a search of about
// 4·log4(n) steps. The levels are drawn at random from a seed drawn when
// the index is made, so no order of calls can make the list a line.
type holdIndex struct {
	nodes []holdNode // nodes[0] is the head, of maxLevel levels
	// links holds each node's levels: node i's level l links to the next
	// node at links[at+2l] and the previous at links[at+2l+1], each list
	// a circle through the head (0).
	links []int32
	free  [maxLevel]int32 // a free node per level (chained through its first link), 0 for none
	ids   idTable
	n     int   // holds
	used  int64 // their units
	top   int   // the levels in use: the head's above are empty
	rng   uint64
	// visits counts the nodes a search or a walk steps over: the tests
	// that count the work read it (holds_internal_test.go).
	visits int
}

// holdNode is one hold and where its links are.
type holdNode struct {
	Hold
	at, level int32
}

// newHoldIndex returns an empty index whose levels and table are drawn
// from a seed of its own.
func newHoldIndex() *holdIndex {
	x := &holdIndex{rng: rand.Uint64() | 1}
	x.ids.seed = rand.Uint64()
	x.reset()
	return x
}

// reset empties x and keeps its arrays (the table is already empty: its
// holds were removed one by one).
func (x *holdIndex) reset() {
	x.nodes = append(x.nodes[:0], holdNode{level: maxLevel})
	x.links = append(x.links[:0], noLinks[:]...)
	x.free = [maxLevel]int32{}
	x.n, x.used, x.top = 0, 0, 0
}

// noLinks is a node's links before it is placed: the head's, empty lists.
var noLinks [2 * maxLevel]int32

func (x *holdIndex) next(i int32, l int) int32 { return x.links[x.nodes[i].at+int32(2*l)] }
func (x *holdIndex) prev(i int32, l int) int32 { return x.links[x.nodes[i].at+int32(2*l)+1] }

// first is the node of the hold that comes back first, last that of the
// one that comes back last; 0 when there is none.
func (x *holdIndex) first() int32 { return x.next(0, 0) }
func (x *holdIndex) last() int32  { return x.prev(0, 0) }

// level draws a node's number of levels: l with a chance of 3/4^l.
func (x *holdIndex) level() int {
	x.rng ^= x.rng << 13 // xorshift64: never 0 from a seed that is not
	x.rng ^= x.rng >> 7
	x.rng ^= x.rng << 17
	return min(maxLevel, 1+bits.TrailingZeros64(x.rng)/2)
}

// alloc returns a free node of l levels, reused if one was freed.
func (x *holdIndex) alloc(l int) int32 {
	if i := x.free[l-1]; i != 0 {
		x.free[l-1] = x.links[x.nodes[i].at]
		return i
	}
	i := int32(len(x.nodes))
	x.nodes = append(x.nodes, holdNode{at: int32(len(x.links)), level: int32(l)})
	x.links = append(x.links, noLinks[:2*l]...)
	return i
}

// insert keeps the hold l, which no hold of x has the id of.
func (x *holdIndex) insert(l Hold) {
	i := x.alloc(x.level())
	x.nodes[i].Hold = l
	x.place(i)
	x.ids.put(l.ID, i)
	x.n++
	x.used += l.Units
}

// place links node i (not linked) after the nodes that come back with it
// or before it.
func (x *holdIndex) place(i int32) {
	e, lv := x.nodes[i].Expiry, int(x.nodes[i].level)
	var before [maxLevel]int32 // the node i follows at each of its levels
	if last := x.last(); last == 0 || x.nodes[last].Expiry <= e {
		for l := range lv {
			before[l] = x.prev(0, l) // the last of each list: the head when empty
		}
	} else {
		p := int32(0)
		for l := max(x.top, lv) - 1; l >= 0; l-- {
			for q := x.next(p, l); q != 0 && x.nodes[q].Expiry <= e; q = x.next(p, l) {
				p = q
				x.visits++
			}
			before[l] = p
		}
	}
	at := x.nodes[i].at
	for l := range lv {
		p := before[l]
		q := x.next(p, l)
		x.links[x.nodes[p].at+int32(2*l)] = i
		x.links[x.nodes[q].at+int32(2*l)+1] = i
		x.links[at+int32(2*l)], x.links[at+int32(2*l)+1] = q, p
	}
	x.top = max(x.top, lv)
}

// unlink takes node i out of its lists.
func (x *holdIndex) unlink(i int32) {
	for l := range int(x.nodes[i].level) {
		p, q := x.prev(i, l), x.next(i, l)
		x.links[x.nodes[p].at+int32(2*l)] = q
		x.links[x.nodes[q].at+int32(2*l)+1] = p
	}
	for x.top > 0 && x.next(0, x.top-1) == 0 {
		x.top--
	}
}

// remove drops the hold of node i and frees the node.
func (x *holdIndex) remove(i int32) {
	x.unlink(i)
	n := &x.nodes[i]
	x.ids.del(n.ID)
	x.n--
	x.used -= n.Units
	x.links[n.at] = x.free[n.level-1]
	x.free[n.level-1] = i
}

// move makes node i's hold come back at expiry.
func (x *holdIndex) move(i int32, expiry int64) {
	x.unlink(i)
	x.nodes[i].Expiry = expiry
	x.place(i)
}

// dropUntil drops the holds that have come back at now.
func (x *holdIndex) dropUntil(now int64) {
	for i := x.first(); i != 0 && x.nodes[i].Expiry <= now; i = x.first() {
		x.remove(i)
	}
}

// freeAt is the expiry of the first hold by whose return left − limit
// units have come back, walking the holds in the order they come back:
// the cost grows with the holds walked, and so with the units asked for
// (HoldStep's refusal). left is more than limit.
func (x *holdIndex) freeAt(left, limit int64) int64 {
	for i := x.first(); i != 0; i = x.next(i, 0) {
		x.visits++
		if left -= x.nodes[i].Units; left <= limit {
			return x.nodes[i].Expiry
		}
	}
	return 0 // not reached: the holds' units add up to left
}

// idTable maps a hold's id to its node: open addressing, linear probing,
// at most half full, a deletion shifting back the ids after it (so no
// tombstones build up: a key in steady use never grows its table). The
// slot of an id mixes in a seed of the index's own, so ids chosen by a
// caller cannot crowd one run of slots.
type idTable struct {
	slots []idSlot // a power of 2 long; id 0 marks a free slot
	n     int
	shift uint8
	seed  uint64
}

type idSlot struct {
	id   int64
	node int32
}

// home is the slot where the search for id starts.
func (t *idTable) home(id int64) int {
	return int(((uint64(id) ^ t.seed) * 0x9e3779b97f4a7c15) >> t.shift)
}

// get returns the node of id, or 0.
func (t *idTable) get(id int64) int32 {
	if t.n == 0 {
		return 0
	}
	mask := len(t.slots) - 1
	for i := t.home(id); ; i = (i + 1) & mask {
		switch t.slots[i].id {
		case id:
			return t.slots[i].node
		case 0:
			return 0
		}
	}
}

// put adds id (not in t) with its node, doubling the table when it
// would be over half full.
func (t *idTable) put(id int64, node int32) {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	mask := len(t.slots) - 1
	i := t.home(id)
	for t.slots[i].id != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = idSlot{id, node}
	t.n++
}

// grow doubles the table (64 slots at first) and places its ids again.
func (t *idTable) grow() {
	old := t.slots
	size := max(64, 2*len(old))
	t.slots = make([]idSlot, size)
	t.shift = uint8(64 - bits.TrailingZeros(uint(size)))
	t.n = 0
	for _, s := range old {
		if s.id != 0 {
			t.put(s.id, s.node)
		}
	}
}

// del removes id, which is in t, then moves back each id of the run after
// it whose home is at or before the freed slot, so that every id stays
// reachable from its home without a gap.
func (t *idTable) del(id int64) {
	mask := len(t.slots) - 1
	i := t.home(id)
	for t.slots[i].id != id {
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; t.slots[j].id != 0; j = (j + 1) & mask {
		if h := t.home(t.slots[j].id); (j-h)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = idSlot{}
	t.n--
}
