// Package memstore is sluice's in-process Store: a sharded map from key to
// algorithm state, each decision one algo.Step under the key's shard lock.
//
// It is safe for heavy concurrent use (keys spread over many shards, so
// goroutines on different keys rarely meet on a lock), makes no allocation per
// decision once a key exists, and forgets keys once their state is equivalent
// to fresh: every time a shard has doubled in size since its last sweep, the
// next new key sweeps it, dropping the keys whose state has become fresh. Memory
// therefore follows the keys active within their reset time, not every key ever
// seen. Sweep drops them on demand too.
//
// Its clock is the monotonic clock, anchored to the wall clock when the process
// starts (read from the CPU's time-stamp counter where the kernel trusts it:
// about 15ns against time.Now's 75ns here); WithClock sets another.
//
// Memory per key: about 105 bytes plus the key's bytes for the single-state
// algorithms (measured by TestMemoryPerKey), and 16 bytes more per admitted
// microsecond kept by a sliding log.
package memstore

import (
	"context"
	"hash/maphash"
	"runtime"
	"slices"
	"sync"
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

// shard is one lock and the keys under it. Keys are found by their 64-bit
// hash, computed once per decision (it also picks the shard); the rare keys
// whose hashes collide are chained.
type shard struct {
	mu      sync.Mutex
	m       map[uint64]*entry
	n       int // keys held
	sweepAt int // sweep on the insert that brings n to this
	_       [32]byte
}

type entry struct {
	key     string
	next    *entry // another key with the same hash
	st      algo.State
	freshAt int64 // µs; from then on st is equivalent to the fresh state
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
		s.shards[i].m = make(map[uint64]*entry)
		s.shards[i].sweepAt = minSweep
	}
	return s
}

// locate returns key's shard and hash.
func (s *Store) locate(key string) (*shard, uint64) {
	h := maphash.String(s.seed, key)
	return &s.shards[h&s.mask], h
}

// get returns key's entry, or nil.
func (sh *shard) get(h uint64, key string) *entry {
	for e := sh.m[h]; e != nil; e = e.next {
		if e.key == key {
			return e
		}
	}
	return nil
}

// Take makes one decision for req at the store's clock time. req must have
// passed sluice.CheckParams (the Limiter does that).
func (s *Store) Take(_ context.Context, req sluice.Request) (sluice.Result, error) {
	var d algo.Decision
	err := s.decide(req.Key, &req.Params, req.Cost, req.MaxDelay, s.now(), &d)
	return sluice.FromDecision(&d), err
}

// TakeLocal is Take for the Limiter's hot path (sluice.LocalStore).
func (s *Store) TakeLocal(key string, p algo.Params, cost int64) (remaining, retryAfter, resetAfter, delay int64, err error) {
	var d algo.Decision
	err = s.decide(key, &p, cost, algo.Never, s.now(), &d)
	return d.Remaining, d.RetryAfter, d.ResetAfter, d.Delay, err
}

// TakeAt makes one decision for req at time now (µs since the epoch). Replays
// use it to decide at the trace's time.
func (s *Store) TakeAt(req sluice.Request, now int64) (algo.Decision, error) {
	var d algo.Decision
	err := s.decide(req.Key, &req.Params, req.Cost, req.MaxDelay, now, &d)
	return d, err
}

// decide is the hot path: one step under the key's shard lock, written into
// *d (building and copying structs costs more here than the arithmetic).
func (s *Store) decide(key string, p *algo.Params, cost, maxDelay, now int64, d *algo.Decision) error {
	if err := algo.CheckTime(now); err != nil {
		return err
	}
	sh, h := s.locate(key)
	sh.mu.Lock()
	e := sh.get(h, key)
	if e == nil {
		if cost == 0 { // a query on a fresh key stores nothing
			sh.mu.Unlock()
			var fresh algo.State
			algo.StepTo(p, &fresh, now, 0, maxDelay, d)
			return nil
		}
		e = sh.insert(h, key, now)
	}
	algo.StepTo(p, &e.st, now, cost, maxDelay, d)
	if cost > 0 || p.Kind == algo.SlidingLog {
		e.freshAt = d.FreshAt
	}
	sh.mu.Unlock()
	return nil
}

// TakeAll makes one decision for a composite request at the store's clock
// time: it passes only if every part grants, and a refusal changes no part.
func (s *Store) TakeAll(_ context.Context, reqs []sluice.Request) (sluice.Result, error) {
	d, err := s.TakeAllAt(reqs, s.now())
	return sluice.FromDecision(&d), err
}

// TakeAllAt is TakeAll at time now (µs since the epoch). The shards of all
// parts are locked together, in shard order, so the decision is atomic.
func (s *Store) TakeAllAt(reqs []sluice.Request, now int64) (algo.Decision, error) {
	if err := algo.CheckTime(now); err != nil {
		return algo.Decision{}, err
	}
	// Small composites (up to 4 parts) allocate nothing.
	var shardBuf, orderBuf [4]int
	var hashBuf [4]uint64
	var stateBuf [4]algo.State
	var freshBuf [4]int64
	shards, hashes := shardBuf[:0], hashBuf[:0]
	for _, r := range reqs {
		h := maphash.String(s.seed, r.Key)
		shards, hashes = append(shards, int(h&s.mask)), append(hashes, h)
	}
	order := append(orderBuf[:0], shards...)
	slices.Sort(order)
	order = slices.Compact(order)
	for _, i := range order {
		s.shards[i].mu.Lock()
	}
	defer func() {
		for _, i := range order {
			s.shards[i].mu.Unlock()
		}
	}()
	// Step every part on a copy of its state; keep the copies only if all
	// grant.
	states := append(stateBuf[:0], make([]algo.State, len(reqs))...)
	freshAt := append(freshBuf[:0], make([]int64, len(reqs))...)
	var acc algo.Decision
	for i, r := range reqs {
		if e := s.shards[shards[i]].get(hashes[i], r.Key); e != nil {
			states[i] = e.st
			if e.st.Log != nil {
				states[i].Log = slices.Clone(e.st.Log)
			}
		}
		d := algo.Step(&reqs[i].Params, &states[i], now, r.Cost, r.MaxDelay)
		freshAt[i] = d.FreshAt
		if i == 0 {
			acc = d
		} else {
			algo.Combine(&acc, d)
		}
	}
	if !acc.Allowed {
		return acc, nil
	}
	for i, r := range reqs {
		if r.Cost == 0 {
			continue
		}
		sh := &s.shards[shards[i]]
		e := sh.get(hashes[i], r.Key)
		if e == nil {
			e = sh.insert(hashes[i], r.Key, now)
		}
		e.st = states[i]
		e.freshAt = freshAt[i]
	}
	return acc, nil
}

// Refund gives req.Cost units back to req.Key (see algo.Refund).
func (s *Store) Refund(_ context.Context, req sluice.Request) (sluice.Result, error) {
	now := s.now()
	sh, h := s.locate(req.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.get(h, req.Key)
	if e == nil {
		var fresh algo.State
		d, err := algo.Refund(&req.Params, &fresh, now, req.Cost)
		return sluice.FromDecision(&d), err
	}
	d, err := algo.Refund(&req.Params, &e.st, now, req.Cost)
	if err == nil {
		e.freshAt = d.FreshAt
	}
	return sluice.FromDecision(&d), err
}

// insert adds key's entry, first sweeping the shard when it has doubled.
func (sh *shard) insert(h uint64, key string, now int64) *entry {
	if sh.n+1 >= sh.sweepAt {
		sh.sweep(now)
		sh.sweepAt = max(minSweep, 2*(sh.n+1))
	}
	e := &entry{key: key, next: sh.m[h]}
	sh.m[h] = e
	sh.n++
	return e
}

// sweep drops the keys whose state is equivalent to fresh at now.
func (sh *shard) sweep(now int64) {
	for h, first := range sh.m {
		var kept *entry
		for e := first; e != nil; {
			next := e.next
			if e.freshAt <= now {
				sh.n--
			} else {
				e.next, kept = kept, e
			}
			e = next
		}
		if kept == nil {
			delete(sh.m, h)
		} else {
			sh.m[h] = kept
		}
	}
}

// Reset returns key to its fresh state.
func (s *Store) Reset(_ context.Context, key string) error {
	sh, h := s.locate(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	first := sh.m[h]
	switch {
	case first == nil:
	case first.key == key:
		if first.next == nil {
			delete(sh.m, h)
		} else {
			sh.m[h] = first.next
		}
		sh.n--
	default:
		for prev := first; prev.next != nil; prev = prev.next {
			if prev.next.key == key {
				prev.next = prev.next.next
				sh.n--
				break
			}
		}
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
