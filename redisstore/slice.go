package redisstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/fastclock"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/store"
)

// WithSlices makes the store hand slices of hot keys' budgets to this
// process (SEMANTICS.md, "Slices"): a key this process decides often takes
// a slice of its budget from Redis in one script (spent there, like any
// take) and admits from it in memory, taking the next slice before it runs
// dry and giving back what it did not use when its demand drops or the
// store closes. A slice is sized from this process's own recent demand on
// the key, so a cold key takes none and is decided in Redis as without
// slices.
//
// life is the longest a slice is kept: a unit admitted from it was spent in
// Redis at most life earlier, so under token-bucket and gcra all processes
// together admit at most burst + floor((d + life)/T) units in any span d;
// under fixed-window and aligned-window a slice never outlives its window,
// so a window still admits at most rate. Shorter is closer to the limit at
// every instant; longer takes fewer round trips on a key of little demand.
// A slice covers about a quarter of life of the process's demand.
//
// Sliding-window, sliding-log and leaky-bucket keys never take slices (they
// cannot give units back): they are decided in Redis as without slices, and
// so are a class's take (with headroom), a take under a limit with a debt
// allowance and an op with its own time (At). A composite whose parts may
// all take slices is admitted from their slices when each holds its part's
// cost, all or nothing; else it is decided in Redis as without slices. A
// refund goes to Redis; a charge too, once this process has given back its
// slices of the key; a Reset drops this process's slices of the key. During an outage the process keeps admitting
// from the slices it holds, then the failure policy applies. SliceStats
// reports what the slices hold. life must be positive and at most an hour.
func WithSlices(life time.Duration) Option {
	return func(s *Store) {
		if life <= 0 || life > time.Hour {
			s.optErr = append(s.optErr, fmt.Errorf("WithSlices(%v): a slice's life must be from 1µs to 1h", life))
			return
		}
		s.sliceLife = life
	}
}

// sliceShards is the number of shards of the slice table.
const sliceShards = 64

// minSlice is the fewest units beyond a request's cost worth a slice: a
// key whose demand over a slice's horizon is below it is decided in Redis.
const minSlice = 4

// A sliceTable is a store's slices (WithSlices): per key, the slices this
// process holds and its recent demand.
type sliceTable struct {
	s       *Store
	life    int64 // µs
	horizon int64 // µs: the demand one slice covers
	now     func() int64
	seed    maphash.Seed
	shards  [sliceShards]sliceShard
	stop    chan struct{}
	done    chan struct{}
	closed  atomic.Bool
	// gate orders the goroutines a slice or a give-back runs on (inflight)
	// before close waits for them.
	gate     sync.RWMutex
	inflight sync.WaitGroup

	// Totals over the keys the table has dropped (live keys keep their own),
	// under goneMu.
	goneMu sync.Mutex
	gone   sliceCounts
}

type sliceShard struct {
	// hot is the entry last looked up through the map: a hot key is found
	// by one atomic load, with no write to a shared cache line (a read
	// lock's count is one).
	hot atomic.Pointer[sliceEntry]
	mu  sync.RWMutex
	m   map[string]*sliceEntry
	_   [32]byte // keeps two shards' locks off one cache line
}

// A slice is units spent in Redis that this process may admit until exp
// (local µs, exclusive); taken is when it was asked for (local µs), reset
// the key's reset_after (µs) and window the window's end (store µs; 0 for
// the buckets) that the take reported, and spent the store's time of the
// take (µs).
type slice struct {
	units, exp, taken, reset, window, spent int64
}

// live reports whether sl holds units at now.
func (sl *slice) live(now int64) bool { return sl.units > 0 && now < sl.exp }

// sliceCounts are a key's counters (see SliceStats).
type sliceCounts struct {
	local, store, slices, sliced, givenBack, expired int64
}

func (c *sliceCounts) add(o *sliceCounts) {
	c.local += o.local
	c.store += o.store
	c.slices += o.slices
	c.sliced += o.sliced
	c.givenBack += o.givenBack
	c.expired += o.expired
}

// A sliceEntry is one key's slices and demand, under mu.
type sliceEntry struct {
	key      string
	mu       sync.Mutex
	params   algo.Params
	cur, nxt slice
	// refill is closed when the slice being taken has landed; nil when none
	// is on its way (one at a time per key).
	refill chan struct{}
	// Demand: units asked for since winStart, and over the last full horizon.
	winStart, winUnits, demand int64
	lastUse                    int64
	counts                     sliceCounts
	// epoch counts the resets of the key, so that a slice taken before one
	// is not kept after it; gone is set when the table forgets the entry,
	// so that a caller who found it just before looks again.
	epoch uint64
	gone  bool
}

func newSliceTable(s *Store) *sliceTable {
	tab := &sliceTable{s: s, life: s.sliceLife.Microseconds(), now: fastclock.Micros, seed: maphash.MakeSeed(),
		stop: make(chan struct{}), done: make(chan struct{})}
	tab.horizon = max(tab.life/4, 1)
	if s.now != nil {
		tab.now = s.now
	}
	for i := range tab.shards {
		tab.shards[i].m = make(map[string]*sliceEntry)
	}
	go tab.janitor(time.Duration(tab.horizon) * time.Microsecond)
	return tab
}

func (tab *sliceTable) shard(key string) *sliceShard {
	return &tab.shards[maphash.String(tab.seed, key)%sliceShards]
}

// entry returns key's entry, made on first use.
func (tab *sliceTable) entry(key string) *sliceEntry {
	sh := tab.shard(key)
	if e := sh.hot.Load(); e != nil && e.key == key {
		return e
	}
	sh.mu.RLock()
	e := sh.m[key]
	sh.mu.RUnlock()
	if e == nil {
		sh.mu.Lock()
		if e = sh.m[key]; e == nil {
			// A copy of the key: the store keeps nothing of the ops it is
			// handed.
			e = &sliceEntry{key: strings.Clone(key)}
			sh.m[e.key] = e
		}
		sh.mu.Unlock()
	}
	sh.hot.Store(e)
	return e
}

// lockedEntry returns key's entry, locked: one the table still holds.
func (tab *sliceTable) lockedEntry(key string) *sliceEntry {
	for {
		e := tab.entry(key)
		e.mu.Lock()
		if !e.gone {
			return e
		}
		e.mu.Unlock()
	}
}

// note counts cost units asked for at now in the key's demand.
func (e *sliceEntry) note(now, cost, horizon int64) {
	if el := now - e.winStart; el >= horizon {
		e.demand = 0
		if el < 2*horizon {
			e.demand = e.winUnits * horizon / el
		}
		e.winStart, e.winUnits = now, 0
	}
	e.winUnits += cost
	e.lastUse = now
}

// want is how many units a slice taken now for a request of cost should
// spend: the demand over a horizon, at most half the key's capacity (so
// that one process does not empty a fresh key for the others); cost when
// the key is cold.
func (e *sliceEntry) want(cost int64) int64 {
	w := min(max(e.demand, e.winUnits), e.params.Capacity()/2)
	if w < cost+minSlice {
		return cost
	}
	return w
}

// held is the units e's live slices hold at now.
func (e *sliceEntry) held(now int64) int64 {
	var n int64
	if e.cur.live(now) {
		n += e.cur.units
	}
	if e.nxt.live(now) {
		n += e.nxt.units
	}
	return n
}

// expire drops e's slices that have ended at now, unspent: their units are
// not given back (SEMANTICS.md: a give-back after the end could land where
// the bound no longer counts them). The next slice moves up when the
// current one is spent or gone.
func (e *sliceEntry) expire(now int64) {
	for _, sl := range []*slice{&e.cur, &e.nxt} {
		if sl.units > 0 && now >= sl.exp {
			e.counts.expired += sl.units
			*sl = slice{}
		}
	}
	if e.cur.units == 0 && e.nxt.units > 0 {
		e.cur, e.nxt = e.nxt, slice{}
	}
}

// local admits cost units at now from the first slice holding them, and
// writes the decision into d (SEMANTICS.md, "Slices": a decision from a
// slice).
func (e *sliceEntry) local(now, cost int64, d *algo.Decision) bool {
	sl := &e.cur
	if sl.units < cost {
		sl = &e.nxt
		if sl.units < cost {
			return false
		}
	}
	sl.units -= cost
	e.counts.local++
	*d = algo.Decision{
		Allowed:    true,
		Remaining:  e.cur.units + e.nxt.units,
		ResetAfter: max(0, sl.reset-(now-sl.taken)),
		Window:     sl.window,
	}
	if e.cur.units == 0 {
		e.cur, e.nxt = e.nxt, slice{}
	}
	return true
}

// take decides cost > 0 units of key under p, a limit that may take
// slices: from a slice when one holds the units, else in Redis at the
// store's time, taking a new slice when the key is hot. It applies no
// failure policy. It checks the op as check does, but the limit only when
// it is not the one the key's slices were taken under (checked then).
func (tab *sliceTable) take(ctx context.Context, key string, p *algo.Params, cost, maxDelay int64) (algo.Decision, error) {
	if key == "" || cost > p.Capacity() || maxDelay < 0 {
		return algo.Decision{}, checkTake(key, p, cost, 0, maxDelay)
	}
	e := tab.lockedEntry(key)
	local := tab.now()
	if e.params != *p {
		if err := p.Validate(); err != nil {
			e.mu.Unlock()
			return algo.Decision{}, err
		}
		// Slices of another limit are given back under it.
		old, back := e.params, e.drop(local)
		e.params = *p
		e.winStart, e.winUnits, e.demand = local, 0, 0
		defer tab.giveBack(e.key, &old, back)
	}
	e.note(local, cost, tab.horizon)
	e.expire(local)
	var d algo.Decision
	if e.local(local, cost, &d) {
		tab.prefetch(e, local)
		e.mu.Unlock()
		return d, nil
	}
	// What the slices still hold cannot serve this request: it is given
	// back first, so that this process is not refused for want of units it
	// holds itself.
	want := e.want(cost)
	e.counts.store++
	stale := e.drop(local)
	if want == cost || e.refill != nil || !tab.goLater() {
		// A cold key, one whose next slice is on its way (a request does not
		// wait for it), or a store closing: decided in Redis as without
		// slices.
		e.mu.Unlock()
		tab.giveBack(e.key, p, stale)
		return tab.s.decideNow(ctx, key, p, cost)
	}
	defer tab.inflight.Done()
	ch := make(chan struct{})
	e.refill = ch
	e.mu.Unlock()
	tab.giveBack(e.key, p, stale)
	now, err := tab.s.clock()
	if err != nil {
		tab.landed(e, ch)
		return algo.Decision{}, err
	}
	return tab.takeSlice(ctx, p, cost, want, now, e, ch)
}

// drop empties e's slices and returns the live ones, to be given back;
// the units of those that have ended are counted dropped, as expire counts
// them (a changed limit dropped them uncounted before expire ran).
func (e *sliceEntry) drop(now int64) []slice {
	var out []slice
	for _, sl := range []*slice{&e.cur, &e.nxt} {
		if sl.live(now) {
			out = append(out, *sl)
		} else {
			e.counts.expired += sl.units // ended unspent: dropped, as expire does
		}
		*sl = slice{}
	}
	return out
}

// prefetch starts taking the next slice, under e.mu, when the slices hold
// less than half a slice and none is on its way: so a hot key's requests
// keep finding units and never wait for Redis.
func (tab *sliceTable) prefetch(e *sliceEntry, now int64) {
	if e.refill != nil || e.nxt.units > 0 {
		return
	}
	want := e.want(0)
	if want == 0 || 2*e.held(now) >= want {
		return
	}
	if !tab.goLater() {
		return
	}
	ch := make(chan struct{})
	e.refill = ch
	p := e.params
	go func() {
		defer tab.inflight.Done()
		ctx, cancel := context.WithTimeout(context.Background(), tab.s.timeout)
		defer cancel()
		at, err := tab.s.clock()
		if err != nil { // no slice: the key is left to Redis
			tab.landed(e, ch)
			return
		}
		_, _ = tab.takeSlice(ctx, &p, 0, want, at, e, ch) // a failure leaves the key to Redis
	}()
}

// landed ends the refill ch of e that took no slice.
func (tab *sliceTable) landed(e *sliceEntry, ch chan struct{}) {
	e.mu.Lock()
	if e.refill == ch {
		e.refill = nil
	}
	close(ch)
	e.mu.Unlock()
}

// goLater reports whether a slice may be taken (the store is not
// closing), and counts its taker in inflight, which must call
// inflight.Done: close waits for the slices on their way before it gives
// back what the slices hold.
func (tab *sliceTable) goLater() bool {
	tab.gate.RLock()
	defer tab.gate.RUnlock()
	if tab.closed.Load() {
		return false
	}
	tab.inflight.Add(1)
	return true
}

// takeSlice runs the slice script on e's key at now (-1: the server's
// TIME) for cost units and up to want − cost more, keeps what passed beyond
// cost as a slice of e (when e still decides under p and has room), gives
// back what it cannot keep, and ends the refill ch. It returns the decision
// of the take, as the caller sees it: Remaining counts the new slice's
// units.
func (tab *sliceTable) takeSlice(ctx context.Context, p *algo.Params, cost, want, now int64, e *sliceEntry, ch chan struct{}) (algo.Decision, error) {
	e.mu.Lock()
	epoch := e.epoch
	e.mu.Unlock()
	sent := tab.now()
	d, got, at, err := tab.s.takeSliceAt(ctx, e.key, p, cost, want, now)
	e.mu.Lock()
	if e.refill == ch {
		e.refill = nil
	}
	close(ch)
	if err != nil || got <= cost {
		e.mu.Unlock()
		return d, err
	}
	sl := slice{units: got - cost, exp: sent + tab.life, taken: sent, reset: d.ResetAfter, window: d.Window, spent: at}
	if p.Kind == algo.FixedWindow || p.Kind == algo.AlignedWindow {
		sl.exp = sent + min(tab.life, d.ResetAfter) // never past the window's end
	}
	e.counts.slices++
	e.counts.sliced += sl.units
	e.expire(tab.now())
	if e.epoch != epoch || e.gone {
		// The key was reset meanwhile: nothing to give back to.
		e.counts.expired += sl.units
		e.mu.Unlock()
		return d, nil
	}
	kept := e.params == *p
	switch {
	case !kept:
	case e.cur.units == 0:
		e.cur = sl
	case e.nxt.units == 0:
		e.nxt = sl
	default:
		kept = false // both places taken meanwhile
	}
	if kept {
		d.Remaining += sl.units
	}
	e.mu.Unlock()
	if !kept {
		tab.giveBack(e.key, p, []slice{sl})
	}
	return d, nil
}

// giveBack gives the units of slices under p back to key, while each is
// live: a slice that has ended is dropped instead, and so is one whose
// give-back reaches Redis after its life there (slice_giveback.lua) or
// fails.
func (tab *sliceTable) giveBack(key string, p *algo.Params, slices []slice) {
	for _, sl := range slices {
		ok := false
		if sl.live(tab.now()) {
			ctx, cancel := context.WithTimeout(context.Background(), tab.s.timeout)
			ok = tab.s.giveBack(ctx, key, p, &sl, tab.life) == nil
			cancel()
		}
		tab.count(key, func(c *sliceCounts) {
			if ok {
				c.givenBack += sl.units
			} else {
				c.expired += sl.units
			}
		})
	}
}

// find returns key's entry, or nil when the table holds none (it makes
// none).
func (tab *sliceTable) find(key string) *sliceEntry {
	sh := tab.shard(key)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return sh.m[key]
}

// count updates key's counters with f (the table's when the key is gone).
func (tab *sliceTable) count(key string, f func(*sliceCounts)) {
	e := tab.find(key)
	if e == nil {
		tab.goneMu.Lock()
		f(&tab.gone)
		tab.goneMu.Unlock()
		return
	}
	e.mu.Lock()
	f(&e.counts)
	e.mu.Unlock()
}

// forget drops key's slices without giving anything back (a reset).
func (tab *sliceTable) forget(key string) {
	e := tab.find(key)
	if e == nil {
		return
	}
	e.mu.Lock()
	e.counts.expired += e.cur.units + e.nxt.units
	e.cur, e.nxt = slice{}, slice{}
	e.epoch++
	e.mu.Unlock()
}

// release gives back this process's slices of key, if it holds any,
// before a charge of key, decided in Redis: the charge then finds every
// unit the process has not admitted, and the process admits nothing after
// it from units spent before (SEMANTICS.md, "Slices").
func (tab *sliceTable) release(key string) {
	e := tab.find(key)
	if e == nil {
		return
	}
	e.mu.Lock()
	back, p := e.drop(tab.now()), e.params
	e.mu.Unlock()
	tab.giveBack(e.key, &p, back)
}

// janitor, every horizon, gives back the slices of keys whose demand has
// stopped and forgets keys idle for long.
func (tab *sliceTable) janitor(every time.Duration) {
	defer close(tab.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-tab.stop:
			return
		case <-t.C:
			tab.sweep(tab.now(), false)
		}
	}
}

// sweep gives back the slices of every key idle for a horizon at now (all,
// when closing), and forgets keys idle for four lives that hold nothing.
func (tab *sliceTable) sweep(now int64, closing bool) {
	type back struct {
		key    string
		params algo.Params
		slices []slice
	}
	var todo []back
	for i := range tab.shards {
		sh := &tab.shards[i]
		sh.mu.Lock()
		for key, e := range sh.m {
			e.mu.Lock()
			e.expire(now)
			idle := now - e.lastUse
			if closing || idle >= tab.horizon {
				if sl := e.drop(now); len(sl) > 0 {
					todo = append(todo, back{key, e.params, sl})
				}
			}
			if idle >= 4*tab.life && e.refill == nil && e.cur.units == 0 && e.nxt.units == 0 {
				tab.goneMu.Lock()
				tab.gone.add(&e.counts)
				tab.goneMu.Unlock()
				e.gone = true
				delete(sh.m, key)
				sh.hot.CompareAndSwap(e, nil)
			}
			e.mu.Unlock()
		}
		sh.mu.Unlock()
	}
	for _, b := range todo {
		tab.giveBack(b.key, &b.params, b.slices)
	}
}

// close stops the janitor, waits for the slices on their way, and gives
// back every slice this process holds.
func (tab *sliceTable) close() {
	tab.gate.Lock()
	was := tab.closed.Swap(true)
	tab.gate.Unlock()
	if was {
		return
	}
	close(tab.stop)
	<-tab.done
	tab.inflight.Wait()
	tab.sweep(tab.now(), true)
}

// SliceStats is what a store's slices hold and have done (WithSlices):
// counters since the store was made, and the units held now.
type SliceStats struct {
	// Keys is how many keys the slice table follows.
	Keys int
	// Held is the units this process's live slices hold now: spent in Redis,
	// not yet admitted. Another process refused meanwhile is the price of
	// the slices (under-admission), bounded by them.
	Held int64
	// Local counts decisions made from slices, without Redis; Store the
	// decisions on keys that may take slices that went to Redis (cold keys,
	// refills made by a request, refusals).
	Local, Store int64
	// Slices counts the slices taken and Sliced their units; GivenBack the
	// units given back to Redis; Expired the units dropped unspent (a slice
	// that ended, a give-back that failed): units spent in Redis that no
	// request used.
	Slices, Sliced, GivenBack, Expired int64
}

// KeySlices is one key's slices (Store.Slices).
type KeySlices struct {
	Key string
	// Held is the units the key's live slices hold, Slices how many there
	// are (0 to 2), ExpiresIn when the first ends.
	Held      int64
	Slices    int
	ExpiresIn time.Duration
	// Demand is the units this process asked for on the key over the last
	// slice horizon (a quarter of a slice's life).
	Demand int64
}

// SliceStats reports the store's slices (zero without WithSlices).
func (s *Store) SliceStats() SliceStats {
	tab := s.slices
	if tab == nil {
		return SliceStats{}
	}
	now := tab.now()
	var st SliceStats
	var c sliceCounts
	for i := range tab.shards {
		sh := &tab.shards[i]
		sh.mu.RLock()
		st.Keys += len(sh.m)
		for _, e := range sh.m {
			e.mu.Lock()
			c.add(&e.counts)
			st.Held += e.held(now)
			e.mu.Unlock()
		}
		sh.mu.RUnlock()
	}
	tab.goneMu.Lock()
	c.add(&tab.gone)
	tab.goneMu.Unlock()
	st.Local, st.Store, st.Slices, st.Sliced, st.GivenBack, st.Expired = c.local, c.store, c.slices, c.sliced, c.givenBack, c.expired
	return st
}

// Slices returns the keys whose slices hold the most units now, at most n
// of them, most first (what a console shows of the slices).
func (s *Store) Slices(n int) []KeySlices {
	tab := s.slices
	if tab == nil || n <= 0 {
		return nil
	}
	now := tab.now()
	var out []KeySlices
	for i := range tab.shards {
		sh := &tab.shards[i]
		sh.mu.RLock()
		for key, e := range sh.m {
			e.mu.Lock()
			k := KeySlices{Key: key, Held: e.held(now), Demand: max(e.demand, e.winUnits)}
			for _, sl := range []*slice{&e.cur, &e.nxt} {
				if sl.live(now) {
					k.Slices++
					if in := storelink.Duration(sl.exp - now); k.ExpiresIn == 0 || in < k.ExpiresIn {
						k.ExpiresIn = in
					}
				}
			}
			e.mu.Unlock()
			if k.Held > 0 {
				out = append(out, k)
			}
		}
		sh.mu.RUnlock()
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Held != out[j].Held {
			return out[i].Held > out[j].Held
		}
		return out[i].Key < out[j].Key
	})
	return out[:min(n, len(out))]
}

// Slicing reports whether the store takes slices of hot keys (WithSlices).
func (s *Store) Slicing() bool { return s.slices != nil }

// sliceScripts are the slice scripts by algorithm: the prelude, the guard,
// the step and scripts/slice.lua; nil for the algorithms that take none.
var sliceScripts = func() (out [algo.AlignedWindow + 1]*redisrun.Script) {
	for _, k := range algo.Kinds() {
		if !algo.Sliceable(k) {
			continue
		}
		out[k] = redisrun.NewScript(prelude() + mustRead("guard.lua") + stepsOf(k) + mustRead("slice.lua"))
	}
	return out
}()

// takeSliceAt runs the slice script on key at now (µs, -1 for the server's
// TIME), applying no failure policy: the take's decision, the units it
// spent and the time it was taken at (µs, the store's).
func (s *Store) takeSliceAt(ctx context.Context, key string, p *algo.Params, cost, want, now int64) (algo.Decision, int64, int64, error) {
	lim := storelink.LimitOf(p)
	l := limitOf(&lim, store.Never)
	c := &redisrun.Call{
		Script: sliceScripts[l.kind],
		Keys:   []string{s.rateKey(key)},
		Args:   []any{l.kind, l.rate, l.period, l.burst, cost, want, now, s.margin},
	}
	if err := s.call(ctx, c); err != nil {
		return algo.Decision{}, 0, 0, err
	}
	if len(c.Reply) != width+2 {
		return algo.Decision{}, 0, 0, fmt.Errorf("%w: slice script replied %v", redisrun.ErrBadReply, c.Reply)
	}
	d, err := decisionOf(c.Reply, c.Keys[0])
	return d, c.Reply[width], c.Reply[width+1], err
}

// giveBackScript is refund.lua behind slice_giveback.lua: a refund that
// does nothing once the slice's life in the store has ended.
var giveBackScript = redisrun.NewScript(prelude() + refundSteps() + mustRead("slice_giveback.lua") + mustRead("refund.lua"))

// errSliceEnded is a give-back that reached Redis after its slice's life.
var errSliceEnded = errors.New("redisstore: the slice had ended when its give-back arrived")

// giveBack refunds sl's units to key under p, naming its window; a bucket's
// only until life after the slice was spent (the store's time).
func (s *Store) giveBack(ctx context.Context, key string, p *algo.Params, sl *slice, life int64) error {
	now, err := s.clock()
	if err != nil {
		return err
	}
	return s.giveBackAt(ctx, key, p, sl, life, now)
}

// giveBackAt is giveBack at now (µs, -1 for the server's TIME).
func (s *Store) giveBackAt(ctx context.Context, key string, p *algo.Params, sl *slice, life, now int64) error {
	deadline := int64(0)
	if p.Kind == algo.TokenBucket || p.Kind == algo.GCRA {
		deadline = sl.spent + life
	}
	lim := storelink.LimitOf(p)
	c := scripts.refundCall(s.rateKey(key), limitOf(&lim, store.Never), sl.units, now, s.margin, sl.window)
	c.Script = giveBackScript
	c.Args = append(c.Args, deadline)
	if err := s.call(ctx, c); err != nil {
		return err
	}
	if len(c.Reply) != width {
		return fmt.Errorf("%w: give-back script replied %v", redisrun.ErrBadReply, c.Reply)
	}
	if c.Reply[0] != 1 {
		return errSliceEnded
	}
	return nil
}
