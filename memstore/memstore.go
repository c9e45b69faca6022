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
// starts (read from the CPU's time-stamp counter where the kernel trusts it,
// several times cheaper than time.Now); WithClock sets another.
//
// Memory per key: 120 to 160 bytes plus the key's bytes for the single-state
// algorithms (a 104-byte entry and the table's slots, a quarter to half full;
// measured by TestMemoryPerKey), and 16 bytes more per admitted microsecond
// kept by a sliding log.
package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"runtime"
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
