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
// Memory per key: about 100 bytes plus the key's bytes for the single-state
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

type shard struct {
	mu      sync.Mutex
	m       map[string]*entry
	sweepAt int // sweep on the insert that brings len(m) to this
	_       [40]byte
}

type entry struct {
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
		s.shards[i].m = make(map[string]*entry)
		s.shards[i].sweepAt = minSweep
	}
	return s
}

func (s *Store) shard(key string) *shard {
	return &s.shards[maphash.String(s.seed, key)&s.mask]
}

// Take makes one decision for req at the store's clock time. req must have
// passed sluice.CheckParams (the Limiter does that).
func (s *Store) Take(_ context.Context, req sluice.Request) (sluice.Result, error) {
	d, err := s.take(&req, s.now())
	return sluice.FromDecision(d), err
}

// TakeLocal is Take for the Limiter's hot path (sluice.LocalStore).
func (s *Store) TakeLocal(key string, p algo.Params, cost int64) (sluice.Result, error) {
	now := s.now()
	if err := algo.CheckTime(now); err != nil {
		return sluice.Result{}, err
	}
	sh := s.shard(key)
	sh.mu.Lock()
	e := sh.m[key]
	if e == nil {
		if cost == 0 {
			sh.mu.Unlock()
			var fresh algo.State
			return sluice.FromDecision(algo.Step(&p, &fresh, now, 0, algo.Never)), nil
		}
		e = sh.insert(key, now)
	}
	d := algo.Step(&p, &e.st, now, cost, algo.Never)
	if cost > 0 || p.Kind == algo.SlidingLog {
		e.freshAt = d.FreshAt
	}
	sh.mu.Unlock()
	return sluice.FromDecision(d), nil
}

// TakeAt makes one decision for req at time now (µs since the epoch). Replays
// use it to decide at the trace's time.
func (s *Store) TakeAt(req sluice.Request, now int64) (algo.Decision, error) {
	return s.take(&req, now)
}

// take is the hot path; req is a pointer so the request is not copied again.
func (s *Store) take(req *sluice.Request, now int64) (algo.Decision, error) {
	if err := algo.CheckTime(now); err != nil {
		return algo.Decision{}, err
	}
	sh := s.shard(req.Key)
	sh.mu.Lock()
	e := sh.m[req.Key]
	if e == nil {
		if req.Cost == 0 { // a query on a fresh key stores nothing
			sh.mu.Unlock()
			var fresh algo.State
			return algo.Step(&req.Params, &fresh, now, 0, req.MaxDelay), nil
		}
		e = sh.insert(req.Key, now)
	}
	d := algo.Step(&req.Params, &e.st, now, req.Cost, req.MaxDelay)
	if req.Cost > 0 || req.Params.Kind == algo.SlidingLog {
		e.freshAt = d.FreshAt
	}
	sh.mu.Unlock()
	return d, nil
}

// TakeAll makes one decision for a composite request at the store's clock
// time: it passes only if every part grants, and a refusal changes no part.
func (s *Store) TakeAll(_ context.Context, reqs []sluice.Request) (sluice.Result, error) {
	d, err := s.TakeAllAt(reqs, s.now())
	return sluice.FromDecision(d), err
}

// TakeAllAt is TakeAll at time now (µs since the epoch). The shards of all
// parts are locked together, in shard order, so the decision is atomic.
func (s *Store) TakeAllAt(reqs []sluice.Request, now int64) (algo.Decision, error) {
	if err := algo.CheckTime(now); err != nil {
		return algo.Decision{}, err
	}
	// Small composites (up to 4 parts) allocate nothing.
	var shardBuf, orderBuf [4]int
	var stateBuf [4]algo.State
	var freshBuf [4]int64
	shards := shardBuf[:0]
	for _, r := range reqs {
		shards = append(shards, int(maphash.String(s.seed, r.Key)&s.mask))
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
		if e := s.shards[shards[i]].m[r.Key]; e != nil {
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
		e := sh.m[r.Key]
		if e == nil {
			e = sh.insert(r.Key, now)
		}
		e.st = states[i]
		e.freshAt = freshAt[i]
	}
	return acc, nil
}

// Refund gives req.Cost units back to req.Key (see algo.Refund).
func (s *Store) Refund(_ context.Context, req sluice.Request) (sluice.Result, error) {
	now := s.now()
	sh := s.shard(req.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[req.Key]
	if e == nil {
		var fresh algo.State
		d, err := algo.Refund(&req.Params, &fresh, now, req.Cost)
		return sluice.FromDecision(d), err
	}
	d, err := algo.Refund(&req.Params, &e.st, now, req.Cost)
	if err == nil {
		e.freshAt = d.FreshAt
	}
	return sluice.FromDecision(d), err
}

// insert adds key's entry, first sweeping the shard when it has doubled.
func (sh *shard) insert(key string, now int64) *entry {
	if len(sh.m)+1 >= sh.sweepAt {
		sh.sweep(now)
		sh.sweepAt = max(minSweep, 2*(len(sh.m)+1))
	}
	e := &entry{}
	sh.m[key] = e
	return e
}

func (sh *shard) sweep(now int64) {
	for k, e := range sh.m {
		if e.freshAt <= now {
			delete(sh.m, k)
		}
	}
}

// Reset returns key to its fresh state.
func (s *Store) Reset(_ context.Context, key string) error {
	sh := s.shard(key)
	sh.mu.Lock()
	delete(sh.m, key)
	sh.mu.Unlock()
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
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}
