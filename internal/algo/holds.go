package algo

import (
	"math/bits"
	"math/rand/v2"
)

// Holds is the holds of a key, the state HoldStep works on; the zero
// value holds none. A few holds are a slice sorted by expiry, which a scan
// reads faster than any index; past manyHolds they move to an index (a
// skip list ordered by expiry and a table from id to hold) whose
// operations cost about the same at a hundred holds as at a million (a
// search, when a hold does not come back last, takes about 8·log8 of
// them), and back to the slice once fewHolds or fewer are left. The index keeps its arrays while
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
		h.idx.insert(l, -1)
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
		x.unlink(i)
		x.forget(i)
	}
	x.reset()
	if cap(x.nodes) > 8*manyHolds {
		h.idx = nil
	}
	h.indexed = false
}

// maxLevel is the levels of the skip list: with a level in eight rising
// one more, 12 levels keep a search short up to 8^12 holds.
const maxLevel = 12

// holdIndex is a key's holds, indexed: a skip list ordered by expiry (the
// first to come back first; among equal expiries, in the order they were
// placed) whose levels are linked both ways, so that a hold found by its
// id is unlinked without a search, and a table from id to hold. Acquiring
// a hold that comes back last (the same lifetime as the others) links it
// at the end; one that comes back earlier is placed by a search of about
// 8·log8(n) steps. The levels are drawn at random from a seed drawn when
// the index is made, so no order of calls can make the list a line.
type holdIndex struct {
	nodes []holdNode // nodes[0] is the head, of maxLevel levels
	// links holds the levels above the first: node i's level l ≥ 1 links
	// to the next node at links[up+2(l-1)] and to the previous at the
	// index after. Every list is a circle through the head (0).
	links []int32
	free  [maxLevel]int32 // a free node per level (chained through next), 0 for none
	ids   idTable
	n     int   // holds
	used  int64 // their units
	top   int   // the levels in use: the head's above are empty
	rng   uint64
	// visits counts the nodes a search or a walk steps over: the tests
	// that count the work read it (holds_internal_test.go).
	visits int
}

// holdNode is one hold, its links on the first level (most nodes have
// no other: they are read with the hold, in one cache line) and where
// its other links are.
type holdNode struct {
	Hold
	next, prev int32
	up, level  int32
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

// noLinks is a node's upper links before it is placed: the head's, empty
// lists.
var noLinks [2 * (maxLevel - 1)]int32

// next and prev are node i's neighbours at level l; linkUp and unlinkUp
// write them above the first level, place, unlink and dropUntil on the
// first (in the nodes).
func (x *holdIndex) next(i int32, l int) int32 {
	if l == 0 {
		return x.nodes[i].next
	}
	return x.links[x.nodes[i].up+int32(2*l-2)]
}

func (x *holdIndex) prev(i int32, l int) int32 {
	if l == 0 {
		return x.nodes[i].prev
	}
	return x.links[x.nodes[i].up+int32(2*l-1)]
}

// linkUp links node i after node p at level l ≥ 1.
func (x *holdIndex) linkUp(i, p int32, l int) {
	links := x.links
	at, pa := x.nodes[i].up+int32(2*l-2), x.nodes[p].up+int32(2*l-2)
	q := links[pa]
	links[x.nodes[q].up+int32(2*l-1)] = i
	links[pa] = i
	links[at], links[at+1] = q, p
}

// unlinkUp takes node i out of its list at level l ≥ 1.
func (x *holdIndex) unlinkUp(i int32, l int) {
	links := x.links
	at := x.nodes[i].up + int32(2*l-2)
	q, p := links[at], links[at+1]
	links[x.nodes[p].up+int32(2*l-2)] = q
	links[x.nodes[q].up+int32(2*l-1)] = p
}

// first is the node of the hold that comes back first, last that of the
// one that comes back last; 0 when there is none.
func (x *holdIndex) first() int32 { return x.nodes[0].next }
func (x *holdIndex) last() int32  { return x.nodes[0].prev }

// level draws a node's number of levels: l with a chance of 7/8 of
// 1/8^(l-1), so that most nodes are linked on the first level alone.
func (x *holdIndex) level() int {
	x.rng ^= x.rng << 13 // xorshift64: never 0 from a seed that is not
	x.rng ^= x.rng >> 7
	x.rng ^= x.rng << 17
	return min(maxLevel, 1+bits.TrailingZeros64(x.rng)/3)
}

// alloc returns a free node of l levels, reused if one was freed.
func (x *holdIndex) alloc(l int) int32 {
	if i := x.free[l-1]; i != 0 {
		x.free[l-1] = x.nodes[i].next
		return i
	}
	i := int32(len(x.nodes))
	x.nodes = append(x.nodes, holdNode{up: int32(len(x.links)), level: int32(l)})
	x.links = append(x.links, noLinks[:2*l-2]...)
	return i
}

// insert keeps the hold l, which no hold of x has the id of; slot is
// where the table's search for l.ID ended (find), or -1.
func (x *holdIndex) insert(l Hold, slot int) {
	i := x.alloc(x.level())
	x.nodes[i].Hold = l
	x.place(i)
	x.ids.put(l.ID, i, slot)
	x.n++
	x.used += l.Units
}

// place links node i (not linked) after the nodes that come back with it
// or before it: at the end of each of its lists when it comes back last
// (the usual case), else after the nodes a search from the top level
// stops at.
func (x *holdIndex) place(i int32) {
	nodes := x.nodes // a local: the compiler keeps it in registers across the stores
	n := &nodes[i]
	e, lv := n.Expiry, int(n.level)
	p := nodes[0].prev
	if p != 0 && nodes[p].Expiry > e {
		x.placeAt(i, e, lv)
		return
	}
	n.prev, n.next = p, 0
	nodes[p].next = i
	nodes[0].prev = i
	for l := 1; l < lv; l++ {
		x.linkUp(i, x.links[2*l-1], l) // after the last of the list: the head's prev
	}
	x.top = max(x.top, lv)
}

// placeAt links node i, which comes back at e, before the last: after
// the node of each of its lv levels that a search from the top stops at.
func (x *holdIndex) placeAt(i int32, e int64, lv int) {
	var before [maxLevel]int32
	p := int32(0)
	for l := max(x.top, lv) - 1; l >= 0; l-- {
		for q := x.next(p, l); q != 0 && x.nodes[q].Expiry <= e; q = x.next(p, l) {
			p = q
			x.visits++
		}
		before[l] = p
	}
	nodes := x.nodes
	n := &nodes[i]
	n.prev, n.next = before[0], nodes[before[0]].next
	nodes[n.next].prev = i
	nodes[n.prev].next = i
	for l := 1; l < lv; l++ {
		x.linkUp(i, before[l], l)
	}
	x.top = max(x.top, lv)
}

// unlink takes node i out of its lists.
func (x *holdIndex) unlink(i int32) {
	nodes := x.nodes
	n := &nodes[i]
	p, q := n.prev, n.next
	nodes[p].next = q
	nodes[q].prev = p
	if n.level > 1 {
		x.unlinkUpper(i, int(n.level))
	}
}

// unlinkUpper takes node i out of its lists above the first.
func (x *holdIndex) unlinkUpper(i int32, lv int) {
	for l := 1; l < lv; l++ {
		x.unlinkUp(i, l)
	}
	for x.top > 1 && x.next(0, x.top-1) == 0 {
		x.top--
	}
}

// remove drops the hold of node i, whose slot in the table is slot, and
// frees the node.
func (x *holdIndex) remove(i int32, slot int) {
	x.unlink(i)
	x.ids.delAt(slot)
	x.freeNode(i)
}

// forget takes the hold of node i, unlinked, out of the table and the
// count, and frees the node.
func (x *holdIndex) forget(i int32) {
	x.ids.delAt(x.ids.slotOf(x.nodes[i].ID, x.nodes))
	x.freeNode(i)
}

// freeNode takes node i's hold, out of the lists and the table, out of the
// count and puts the node on its level's free list.
func (x *holdIndex) freeNode(i int32) {
	n := &x.nodes[i]
	x.n--
	x.used -= n.Units
	n.next = x.free[n.level-1]
	x.free[n.level-1] = i
}

// move makes node i's hold come back at expiry.
func (x *holdIndex) move(i int32, expiry int64) {
	x.unlink(i)
	x.nodes[i].Expiry = expiry
	x.place(i)
}

// dropUntil drops the holds that have come back at now: the first, each
// after the head, so unlinked on the first level without reading its
// neighbour before it.
func (x *holdIndex) dropUntil(now int64) {
	nodes := x.nodes
	for {
		i := nodes[0].next
		if i == 0 {
			return
		}
		n := &nodes[i]
		if n.Expiry > now {
			return
		}
		nodes[0].next = n.next
		nodes[n.next].prev = 0
		if n.level > 1 {
			x.unlinkUpper(i, int(n.level))
		}
		x.forget(i)
	}
}

// find returns the node of the hold id, or 0, and the slot of the table
// where its search ended: id's, or the free slot where id would be put.
func (x *holdIndex) find(id int64) (int32, int) { return x.ids.get(id, x.nodes) }

// freeAt is the expiry of the first hold by whose return left − limit
// units have come back, walking the holds in the order they come back:
// the cost grows with the holds walked, and so with the units asked for
// (HoldStep's refusal). left is more than limit.
func (x *holdIndex) freeAt(left, limit int64) int64 {
	for i := x.first(); i != 0; i = x.nodes[i].next {
		x.visits++
		if left -= x.nodes[i].Units; left <= limit {
			return x.nodes[i].Expiry
		}
	}
	return 0 // not reached: the holds' units add up to left
}

// idTable maps a hold's id to its node: open addressing, linear probing,
// at most half full (runs of taken slots stay short), a deletion shifting back the ids after it (so no
// tombstones build up: a key in steady use never grows its table). A
// slot is 8 bytes, the node and the upper half of the id's hash (from
// which its home is known), so that a probe reads the node only when the
// hash matches. The hash mixes in a seed of the index's own, so ids chosen
// by a caller cannot crowd one run of slots.
type idTable struct {
	slots []idSlot // a power of 2 long; node 0 (the head's) marks a free slot
	n     int
	shift uint8 // 64 less the bits of a slot's index, at least 32
	seed  uint64
}

type idSlot struct {
	node int32
	hash uint32
}

// hash is the upper half of id's hash.
func (t *idTable) hash(id int64) uint32 {
	return uint32(((uint64(id) ^ t.seed) * 0x9e3779b97f4a7c15) >> 32)
}

// home is the slot where the search for an id of hash h starts.
func (t *idTable) home(h uint32) int { return int(h >> (t.shift - 32)) }

// get returns the node of id among nodes, or 0, and the slot where the
// search ended: id's, or the free slot where id would be put (-1 in an
// empty table).
func (t *idTable) get(id int64, nodes []holdNode) (int32, int) {
	if len(t.slots) == 0 {
		return 0, -1
	}
	mask, h := len(t.slots)-1, t.hash(id)
	for i := t.home(h); ; i = (i + 1) & mask {
		s := t.slots[i]
		if s.node == 0 {
			return 0, i
		}
		if s.hash == h && nodes[s.node].ID == id {
			return s.node, i
		}
	}
}

// slotOf returns the slot of id, which is in t.
func (t *idTable) slotOf(id int64, nodes []holdNode) int {
	mask, h := len(t.slots)-1, t.hash(id)
	i := t.home(h)
	for t.slots[i].hash != h || nodes[t.slots[i].node].ID != id {
		i = (i + 1) & mask
	}
	return i
}

// put adds id (not in t) with its node at slot, the free slot where get's
// search for it ended (-1: search again), doubling the table first when
// it would be over half full.
func (t *idTable) put(id int64, node int32, slot int) {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
		slot = -1
	}
	s := idSlot{node, t.hash(id)}
	if slot < 0 {
		t.place(s)
		return
	}
	t.slots[slot] = s
	t.n++
}

// place puts s in the first free slot from its home.
func (t *idTable) place(s idSlot) {
	mask := len(t.slots) - 1
	i := t.home(s.hash)
	for t.slots[i].node != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = s
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
		if s.node != 0 {
			t.place(s)
		}
	}
}

// delAt empties slot i, then moves back each id of the run after it whose
// home is at or before the freed slot, so that every id stays reachable
// from its home without a gap.
func (t *idTable) delAt(i int) {
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].node != 0; j = (j + 1) & mask {
		if (j-t.home(t.slots[j].hash))&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = idSlot{}
	t.n--
}
