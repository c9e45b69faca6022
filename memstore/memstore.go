// Package memstore is sluice's in-process Store: keys spread over shards, each
// shard a hash table of entries, each decision one algo.Step under the key's
// entry lock.
//
// It is safe for heavy concurrent use: a decision on a key that exists finds
// its entry without a lock (the tables are read with atomic loads; inserts,
// sweeps and resets take the shard's lock) and locks only the entry, so
// goroutines on different keys share no lock and no written cache line. It
// makes no allocation per decision once a key exists, and forgets keys once
// their state is equivalent to fresh: every time a shard has doubled in size
// since its last sweep, the next new key sweeps it, dropping the keys whose
// state has become fresh. Memory therefore follows the keys active within
// their reset time, not every key ever seen. Sweep drops them on demand too.
//
// Its clock is the monotonic clock, anchored to the wall clock when the process
// starts (read from the CPU's time-stamp counter where the kernel trusts it:
// 8 to 15ns against time.Now's 35 to 75ns on this project's machines);
// WithClock sets another.
//
// Memory per key: 120 to 160 bytes plus the key's bytes for the single-state
// algorithms (a 96-byte entry and the table's slots, a quarter to half full;
// measured by TestMemoryPerKey), and 16 bytes more per admitted microsecond
// kept by a sliding log.
package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/internal/fastclock"
)

// Store is an in-memory sluice.Store. The zero value is not usable; call New.
type Store struct {
	shards []shard
	mask   uint64
	seed   maphash.Seed
	now    func() int64
}

var (
	_ sluice.Store      = (*Store)(nil)
	_ sluice.LocalStore = (*Store)(nil)
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

// entry is one key's state and the lock decisions on it hold, 96 bytes: the
// key, lock and freshAt, then the state, span two cache lines at most. An
// entry dropped from its table (a sweep found it fresh, or Reset) is marked
// dead under its lock (freshAt = dead); a decision that found it just before
// then sees the mark and looks the key up again.
type entry struct {
	key     string
	mu      sync.Mutex
	freshAt int64 // µs; from then on st is equivalent to the fresh state
	st      algo.State
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

// Option configures a Store.
type Option func(*Store)

// WithClock makes the store read time from now instead of time.Now: tests pass a
// fake clock, replays the trace's time.
func WithClock(now func() time.Time) Option {
	return func(s *Store) { s.now = func() int64 { return now().UnixMicro() } }
}

// WithMicros is WithClock for a clock that reads microseconds since the epoch.
func WithMicros(now func() int64) Option { return func(s *Store) { s.now = now } }

// WithShards sets the number of shards, rounded up to a power of two (default:
// 64 per CPU, at least 256).
func WithShards(n int) Option {
	return func(s *Store) { s.shards = make([]shard, pow2(n)) }
}

func pow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// New returns an empty Store.
func New(opts ...Option) *Store {
	s := &Store{seed: maphash.MakeSeed(), now: fastclock.Micros}
	for _, o := range opts {
		o(s)
	}
	if s.shards == nil {
		s.shards = make([]shard, pow2(max(256, 64*runtime.GOMAXPROCS(0))))
	}
	s.mask = uint64(len(s.shards) - 1)
	for i := range s.shards {
		s.shards[i].tab.Store(newTable(minTable))
		s.shards[i].sweepAt = minSweep
	}
	return s
}

// locate returns key's shard and hash. The shard comes from the hash's high
// bits, the slot in the shard's table from its low bits.
func (s *Store) locate(key string) (*shard, uint64) {
	h := hashOf(s.seed, key)
	return &s.shards[(h>>40)&s.mask], h
}

// Take makes one decision for req at the store's clock time. req must have
// passed sluice.CheckParams (the Limiter does that).
func (s *Store) Take(_ context.Context, req sluice.Request) (sluice.Result, error) {
	var d algo.Decision
	err := s.decide(req.Key, &req.Params, req.Cost, req.MaxDelay, s.now(), &d)
	return sluice.FromDecision(&d), err
}

// TakeLocal is Take for the Limiter's hot path (sluice.LocalStore). On an
// error every figure is 0 but retryAfter, which is algo.Never: read as
// "allowed is retryAfter == 0", an error is never allowed.
func (s *Store) TakeLocal(key string, p algo.Params, cost int64) (remaining, retryAfter, resetAfter, delay int64, err error) {
	var d algo.Decision
	if err = s.decide(key, &p, cost, algo.Never, s.now(), &d); err != nil {
		return 0, algo.Never, 0, 0, err
	}
	return d.Remaining, d.RetryAfter, d.ResetAfter, d.Delay, nil
}

// invalidTime wraps algo.CheckTime's error in sluice.ErrInvalidTime, off the
// hot path.
func invalidTime(err error) error {
	return fmt.Errorf("%w: %v", sluice.ErrInvalidTime, err)
}

// TakeAt makes one decision for req at time now (µs since the epoch). Replays
// use it to decide at the trace's time.
func (s *Store) TakeAt(req sluice.Request, now int64) (algo.Decision, error) {
	var d algo.Decision
	err := s.decide(req.Key, &req.Params, req.Cost, req.MaxDelay, now, &d)
	return d, err
}

// decide is the hot path: one step under the key's entry lock, written into
// *d (building and copying structs costs more here than the arithmetic).
func (s *Store) decide(key string, p *algo.Params, cost, maxDelay, now int64, d *algo.Decision) error {
	if err := algo.CheckTime(now); err != nil {
		return invalidTime(err)
	}
	sh, h := s.locate(key)
	e := sh.find(h)
	if e != nil {
		e.mu.Lock()
		if e.freshAt == dead || e.key != key {
			e.mu.Unlock()
			e = nil
		}
	}
	if e == nil {
		// A query on a fresh key stores nothing.
		if e = sh.lockEntry(h, key, now, cost > 0); e == nil {
			var fresh algo.State
			algo.StepTo(p, &fresh, now, 0, maxDelay, d)
			return nil
		}
	}
	algo.StepTo(p, &e.st, now, cost, maxDelay, d)
	if cost > 0 { // a query changes nothing: the state's FreshAt stands
		e.freshAt = d.FreshAt
	}
	e.mu.Unlock()
	return nil
}

// TakeAll makes one decision for a composite request at the store's clock
// time: it passes only if every part grants, and a refusal changes no part.
func (s *Store) TakeAll(_ context.Context, reqs []sluice.Request) (sluice.Result, error) {
	var d algo.Decision
	err := s.takeAll(reqs, s.now(), &d)
	return sluice.FromDecision(&d), err
}

// TakeAllLocal is TakeAll for the Limiter's hot path
// (sluice.LocalStore): composites of up to 4 parts allocate nothing.
func (s *Store) TakeAllLocal(parts []sluice.Part) (sluice.Result, error) {
	var buf [4]sluice.Request
	reqs, err := sluice.AppendRequests(buf[:0], parts)
	if err != nil {
		return sluice.Result{}, err
	}
	var d algo.Decision
	err = s.takeAll(reqs, s.now(), &d)
	return sluice.FromDecision(&d), err
}

// TakeAllAt is TakeAll at time now (µs since the epoch). The entries of all
// parts are locked together, in one order (by hash, then key), so the
// decision is atomic; a part that spends nothing on a key without an entry
// steps a fresh state and stores nothing.
func (s *Store) TakeAllAt(reqs []sluice.Request, now int64) (algo.Decision, error) {
	var acc algo.Decision
	err := s.takeAll(reqs, now, &acc)
	return acc, err
}

// part is one part of a composite (parts[i] is reqs[i]'s): its key, shard,
// hash and entry, and the state it steps (a copy, kept only if every part
// grants).
type part struct {
	key     string
	sh      *shard
	h       uint64
	e       *entry
	freshAt int64
	st      algo.State
}

// before reports whether a's entry is locked before b's: by hash, then key.
func (a *part) before(b *part) bool {
	if a.h != b.h {
		return a.h < b.h
	}
	return a.key < b.key
}

// takeAll is TakeAllAt writing the decision into *acc, which must be zero.
// Composites of up to 4 parts allocate nothing.
func (s *Store) takeAll(reqs []sluice.Request, now int64, acc *algo.Decision) error {
	if err := algo.CheckTime(now); err != nil {
		return invalidTime(err)
	}
	if len(reqs) == 0 {
		return nil
	}
	var partBuf [4]part
	var orderBuf [4]int
	parts, order := partBuf[:0], orderBuf[:0]
	if len(reqs) > len(partBuf) {
		parts, order = make([]part, 0, len(reqs)), make([]int, 0, len(reqs))
	}
	for i := range reqs {
		parts = parts[:i+1] // its buffer is zero: set the fields, copy no part
		pt := &parts[i]
		pt.key = reqs[i].Key
		pt.sh, pt.h = s.locate(pt.key)
		// Insertion sort of the lock order: composites are small.
		j := len(order)
		order = append(order, i)
		for ; j > 0 && pt.before(&parts[order[j-1]]); j-- {
			order[j] = order[j-1]
		}
		order[j] = i
	}
	s.lockParts(parts, order, reqs, now)
	// Step every part on a copy of its state; keep the copies only if all
	// grant.
	for i := range parts {
		pt, r := &parts[i], &reqs[i]
		if pt.e != nil {
			pt.st = pt.e.st
			if pt.st.Log != nil {
				pt.st.Log = slices.Clone(pt.st.Log)
			}
		}
		var d algo.Decision
		algo.StepTo(&r.Params, &pt.st, now, r.Cost, r.MaxDelay, &d)
		pt.freshAt = d.FreshAt
		if i == 0 {
			*acc = d
		} else {
			algo.Combine(acc, d)
		}
	}
	if acc.Allowed {
		for i := range parts {
			if pt := &parts[i]; reqs[i].Cost > 0 {
				pt.e.st = pt.st
				pt.e.freshAt = pt.freshAt
			}
		}
	} else {
		// Nothing was spent: the decision describes the parts as they are.
		var lookBuf [4]algo.Decision
		looks := lookBuf[:0]
		for i := range parts {
			var st algo.State
			if e := parts[i].e; e != nil {
				st = e.st
			}
			var d algo.Decision
			algo.StepTo(&reqs[i].Params, &st, now, 0, reqs[i].MaxDelay, &d)
			looks = append(looks, d)
		}
		algo.Refused(acc, looks)
	}
	unlockParts(parts, order)
	return nil
}

// lockParts locks the entries of the parts in order (sorted by hash and
// key), each distinct key once, creating those of the parts that spend. It
// holds no entry lock while it takes a shard's lock, the order sweeps and
// inserts take them in; an entry found dead after all are locked makes it
// start again.
func (s *Store) lockParts(parts []part, order []int, reqs []sluice.Request, now int64) {
	for {
		// Entries first, without entry locks.
		for _, i := range order {
			pt := &parts[i]
			pt.e = pt.sh.get(pt.h, pt.key)
			if pt.e == nil && reqs[i].Cost > 0 {
				pt.sh.mu.Lock()
				pt.e = pt.sh.getOrInsert(pt.h, pt.key, now)
				pt.sh.mu.Unlock()
			}
		}
		// Parts on one key share its entry: the first that found one.
		for j := 1; j < len(order); j++ {
			if a, b := &parts[order[j-1]], &parts[order[j]]; b.key == a.key && a.e != nil {
				b.e = a.e
			}
		}
		ok := true
		for j := range order {
			if e := lockedAt(parts, order, j); e != nil {
				e.mu.Lock()
				if e.freshAt == dead {
					ok = false
				}
			}
		}
		if ok {
			return
		}
		unlockParts(parts, order)
	}
}

// unlockParts unlocks what lockParts locked.
func unlockParts(parts []part, order []int) {
	for j := range order {
		if e := lockedAt(parts, order, j); e != nil {
			e.mu.Unlock()
		}
	}
}

// lockedAt returns the entry lockParts locks at the j-th place of order:
// the part's entry, unless it has none or shares the previous part's.
func lockedAt(parts []part, order []int, j int) *entry {
	e := parts[order[j]].e
	if j > 0 && e == parts[order[j-1]].e {
		return nil
	}
	return e
}

// Refund gives req.Cost units back to req.Key (see algo.Refund).
func (s *Store) Refund(_ context.Context, req sluice.Request) (sluice.Result, error) {
	now := s.now()
	if err := algo.CheckTime(now); err != nil {
		return sluice.Result{}, invalidTime(err)
	}
	sh, h := s.locate(req.Key)
	e := sh.lockEntry(h, req.Key, now, false)
	if e == nil {
		var fresh algo.State
		d, err := algo.Refund(&req.Params, &fresh, now, req.Cost)
		return sluice.FromDecision(&d), err
	}
	defer e.mu.Unlock()
	d, err := algo.Refund(&req.Params, &e.st, now, req.Cost)
	if err == nil {
		e.freshAt = d.FreshAt
	}
	return sluice.FromDecision(&d), err
}

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
	e := &entry{key: key}
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

// Reset returns key to its fresh state.
func (s *Store) Reset(_ context.Context, key string) error {
	sh, h := s.locate(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sl, e := sh.tab.Load().lookup(h, key, false); e != nil {
		e.mu.Lock()
		sh.drop(sl, e)
		e.mu.Unlock()
	}
	return nil
}

// Sweep drops every key whose state is equivalent to fresh at the store's
// clock time.
func (s *Store) Sweep() {
	now := s.now()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.sweep(now)
		sh.mu.Unlock()
	}
}

// Len returns the number of keys held.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}
