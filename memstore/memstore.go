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
// Use it through a sluice.Limiter:
//
//	lim := sluice.New(memstore.New())
//
// The store implements store.Store: its one method, Run, decides the ops a
// Limiter has checked, at their At or at the store's clock. A Limiter calls
// it directly, its ops on its own stack.
//
// Its clock is the monotonic clock, anchored to the wall clock when the process
// starts (read from the CPU's time-stamp counter where the kernel trusts it,
// several times cheaper than time.Now, and elsewhere read at most once a µs
// on each P while the counter shows the µs has not ended); WithClock sets
// another, which a Limiter over the store then waits by too.
//
// Memory per key: 150 to 190 bytes plus the key's bytes for the single-state
// algorithms (a 128-byte entry, two whole cache lines, and the table's slots,
// a quarter to half full; measured by TestMemoryPerKey), and 16 bytes more
// per admitted microsecond kept by a sliding log.
package memstore

import (
	"hash/maphash"
	"runtime"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/fastclock"
	"github.com/sluice-go/sluice/store"
)

// Store is an in-memory store.Store. The zero value is not usable; call New.
type Store struct {
	shards []shard
	mask   uint64
	seed   maphash.Seed
	now    func() int64
	clock  store.Clock // nil: the system's
	// holds keeps the concurrency limits' hold sets (concurrency.go), as
	// many shards as shards.
	holds []holdShard
}

// Option configures a Store.
type Option func(*Store)

// WithClock makes the store read time from c instead of the system's clock;
// a sluice.Limiter over the store then reads deadlines and sleeps by c too
// (unless it was given a clock of its own with sluice.WithClock). Tests pass
// a fake clock.
func WithClock(c store.Clock) Option {
	return func(s *Store) {
		if c == nil {
			return
		}
		s.clock = c
		if m, ok := c.(interface{ Micros() int64 }); ok {
			s.now = m.Micros
			return
		}
		s.now = func() int64 { return c.Now().UnixMicro() }
	}
}

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
	s.holds = make([]holdShard, len(s.shards))
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

// decide is the hot path: one step under the key's entry lock, written into
// *d (building and copying structs costs more here than the arithmetic).
func (s *Store) decide(key string, p *algo.Params, cost, maxDelay, now int64, d *algo.Decision) error {
	if err := algo.CheckTime(now); err != nil {
		return err // wraps sluice.ErrInvalidTime
	}
	sh, h := s.locate(key)
	return s.decideFound(sh, h, sh.find(h), key, p, cost, maxDelay, now, d)
}

// decideNow is decide at the store's clock, read once the key's slot has
// been looked up: the CPU reads the clock while the slot's cache line is on
// its way, instead of before asking for it.
func (s *Store) decideNow(key string, p *algo.Params, cost, maxDelay int64, d *algo.Decision) error {
	sh, h := s.locate(key)
	e := sh.find(h)
	now := s.now()
	if err := algo.CheckTime(now); err != nil {
		return err
	}
	return s.decideFound(sh, h, e, key, p, cost, maxDelay, now, d)
}

// decideFound is decide once find has returned e for key's hash h in sh.
func (s *Store) decideFound(sh *shard, h uint64, e *entry, key string, p *algo.Params, cost, maxDelay, now int64, d *algo.Decision) error {
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

// refund gives units back to key under p at now, a window's only to the
// window that ends at window (0: any).
func (s *Store) refund(key string, p *algo.Params, units, window, now int64) (algo.Decision, error) {
	if err := algo.CheckTime(now); err != nil {
		return algo.Decision{}, err
	}
	sh, h := s.locate(key)
	e := sh.lockEntry(h, key, now, false)
	if e == nil {
		var fresh algo.State
		return algo.Refund(p, &fresh, now, units, window)
	}
	defer e.mu.Unlock()
	before := e.st
	d, err := algo.Refund(p, &e.st, now, units, window)
	if err == nil && !sameFields(&before, &e.st) {
		// A refund that left the state as it was (a window's refund on a
		// state holding nothing) keeps its FreshAt, as a query does.
		e.freshAt = d.FreshAt
	}
	return d, err
}

// sameFields reports whether a and b hold the same fields, a sliding log's
// entries compared by their array and length.
func sameFields(a, b *algo.State) bool {
	return a.Kind == b.Kind && a.A == b.A && a.B == b.B && a.C == b.C && a.Rate == b.Rate && a.Period == b.Period &&
		len(a.Log) == len(b.Log) && (len(a.Log) == 0 || &a.Log[0] == &b.Log[0])
}

// reset returns key to its fresh state: its rate limit's and its holds.
func (s *Store) reset(key string) {
	sh, h := s.locate(key)
	sh.mu.Lock()
	if sl, e := sh.tab.Load().lookup(h, key, false); e != nil {
		e.mu.Lock()
		sh.drop(sl, e)
		e.mu.Unlock()
	}
	sh.mu.Unlock()
	hs, h := s.holdShard(key)
	hs.mu.Lock()
	hs.drop(h, key)
	hs.mu.Unlock()
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
	s.sweepHolds(now)
}

// Len returns the number of keys held: rate limits' and concurrency
// limits' alike.
func (s *Store) Len() int {
	n := s.holdKeys()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}
