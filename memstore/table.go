package memstore

import (
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sluice-go/sluice/internal/algo"
)

// shard is a table of the keys whose hash picks it, and the lock its writers
// (insert, sweep, reset) hold. Decisions on keys that exist take no shard
// lock: they find the key's entry in the table without one (its slots are
// read with atomic loads) and lock the entry. Each decision then writes one
// cache line, the entry's, instead of the shard lock's and the entry's: with
// goroutines on several cores the shard lock's line would move between them
// on every decision.
type shard struct {
	mu      sync.Mutex
	tab     atomic.Pointer[table]
	n       int // keys held
	used    int // slots ever filled in tab (keys and tombstones)
	sweepAt int // sweep on the insert that brings n to this
	_       [24]byte
}

// table is an open-addressing hash table of entries, probed linearly from
// the key's hash. A slot is empty (hash 0), holds an entry, or is a tombstone
// (a hash with no entry: its key was dropped; probes go on past it). Writers
// fill a slot's entry before its hash, so a reader that sees the hash sees the
// entry; a table that fills up is replaced by a new one, tombstones left out.
type table struct {
	mask  uint64
	slots []slot
}

type slot struct {
	h atomic.Uint64
	e atomic.Pointer[entry]
}

// entry is one key's state and the lock decisions on it hold: the key, lock
// and freshAt, then the state, 104 bytes padded to 128, so that an entry is
// two whole cache lines (the allocator puts 128-byte objects on 128-byte
// boundaries). Unpadded, it would sit 112 bytes from the next, and every
// other entry would span three lines, each of which a decision on another
// core must fetch: over 10,000 keys from two cores, the padding took 13% off
// a decision where the cores share no cache. An entry dropped from its table
// (a sweep found it fresh, or Reset) is marked dead under its lock (freshAt =
// dead); a decision that found it just before then sees the mark and looks
// the key up again.
type entry struct {
	key     string
	mu      sync.Mutex
	freshAt int64 // µs; from then on st is equivalent to the fresh state
	st      algo.State
	_       [24]byte
}

// dead is the freshAt of an entry dropped from its table.
const dead = math.MinInt64

// hashOf is the table's hash of key: never 0, which marks an empty slot.
func hashOf(seed maphash.Seed, key string) uint64 {
	h := maphash.String(seed, key)
	if h == 0 {
		h = 1
	}
	return h
}

// get returns key's live entry in sh's table, or nil. It takes no lock.
func (sh *shard) get(h uint64, key string) *entry {
	_, e := sh.tab.Load().lookup(h, key, false)
	return e
}

// find returns the entry of the first slot holding hash h, or nil: key's
// entry but for a 64-bit hash collision, which the caller rules out once it
// holds the entry's lock. Locking before reading the key takes the entry's
// cache line for writing at once, not shared first and then for writing.
func (sh *shard) find(h uint64) *entry {
	_, e := sh.tab.Load().lookup(h, "", true)
	return e
}

// lookup returns the slot holding key's live entry and the entry, or nils;
// with anyKey, those of the first live slot with hash h, whatever its key.
func (t *table) lookup(h uint64, key string, anyKey bool) (*slot, *entry) {
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		sl := &t.slots[i]
		x := sl.h.Load()
		if x == 0 {
			return nil, nil
		}
		if x == h {
			if e := sl.e.Load(); e != nil && (anyKey || e.key == key) {
				return sl, e
			}
		}
	}
}

// put fills the first empty slot from h's with e (sh.mu held, or t not yet
// published): the entry first, then the hash that makes readers look at it.
func (t *table) put(h uint64, e *entry) {
	i := h & t.mask
	for t.slots[i].h.Load() != 0 {
		i = (i + 1) & t.mask
	}
	t.slots[i].e.Store(e)
	t.slots[i].h.Store(h)
}

// lockEntry returns key's entry locked, creating it if need be (unless
// create is false: then nil when there is none).
func (sh *shard) lockEntry(h uint64, key string, now int64, create bool) *entry {
	for {
		if e := sh.get(h, key); e != nil {
			e.mu.Lock()
			if e.freshAt != dead {
				return e
			}
			e.mu.Unlock()
		}
		if !create {
			// Dead or missing: missing once the writer that dropped it is
			// done.
			if e := sh.get(h, key); e == nil {
				return nil
			}
			continue
		}
		sh.mu.Lock()
		e := sh.getOrInsert(h, key, now)
		e.mu.Lock()
		sh.mu.Unlock()
		return e // live: dropped only under sh.mu
	}
}

// getOrInsert returns key's live entry, inserting it if need be (sh.mu
// held).
func (sh *shard) getOrInsert(h uint64, key string, now int64) *entry {
	if e := sh.get(h, key); e != nil {
		return e
	}
	return sh.insert(h, key, now)
}

// minSweep is the shard size below which no sweep runs.
const minSweep = 64

// minTable is the smallest table; a table is kept at most half full.
const minTable = 16

func newTable(n int) *table {
	return &table{mask: uint64(n - 1), slots: make([]slot, n)}
}

// insert adds key's entry (sh.mu held, key not in the table), first sweeping
// the shard when it has doubled, and growing or rebuilding the table when
// its slots are half used.
func (sh *shard) insert(h uint64, key string, now int64) *entry {
	if sh.n+1 >= sh.sweepAt {
		sh.sweep(now)
		sh.sweepAt = max(minSweep, 2*(sh.n+1))
	}
	t := sh.tab.Load()
	if 2*(sh.used+1) > len(t.slots) {
		t = sh.rebuild(max(minTable, pow2(2*(sh.n+1))))
	}
	// A copy of the key: the store keeps nothing of the ops it is handed
	// (store.Store), so that a Limiter's stay on its stack.
	e := &entry{key: strings.Clone(key)}
	t.put(h, e)
	sh.n++
	sh.used++
	return e
}

// rebuild replaces sh's table by one of n slots holding its live entries
// (sh.mu held). Readers of the old table still find every entry in it.
func (sh *shard) rebuild(n int) *table {
	old := sh.tab.Load()
	t := newTable(n)
	for k := range old.slots {
		sl := &old.slots[k]
		e := sl.e.Load()
		if e == nil {
			continue
		}
		t.put(sl.h.Load(), e)
	}
	sh.used = sh.n
	sh.tab.Store(t)
	return t
}

// drop removes the entry in sl (sh.mu and the entry's lock held): a
// tombstone in the table, the entry marked dead for a decision that found it
// before.
func (sh *shard) drop(sl *slot, e *entry) {
	e.freshAt = dead
	sl.e.Store(nil)
	sh.n--
}

// sweep drops the keys whose state is equivalent to fresh at now (sh.mu
// held).
func (sh *shard) sweep(now int64) {
	t := sh.tab.Load()
	for k := range t.slots {
		sl := &t.slots[k]
		e := sl.e.Load()
		if e == nil {
			continue
		}
		e.mu.Lock()
		if e.freshAt <= now {
			sh.drop(sl, e)
		}
		e.mu.Unlock()
	}
}
