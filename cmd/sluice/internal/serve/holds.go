package serve

import (
	"errors"
	"hash/maphash"
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
	"github.com/sluice-go/sluice/internal/fastclock"
	"github.com/sluice-go/sluice/observe"
)

// The holds table is bounded by the service's limits (package limits):
// the keys it follows (view-keys), the leases it follows one by one per key
// (view-leases) and the bytes it holds, keys and leases together
// (view-bytes). Beyond view-leases, or when a key's list would take the
// table past view-bytes, a key's further leases are counted, not followed
// (HeldKey.Partial); a new key beyond view-keys or view-bytes takes the
// place of the key holding the least of a few picked at random, as many
// as it needs (HoldsView.Dropped counts them). A lease is followed by a
// digest of its name, not the name (a descriptor's token carries the
// domain and the descriptor: 2.7 KB with 1 KiB ones), so the table's size
// is bounded however many keys and leases, and however long, its callers
// invent (TestViewBytesCap; docs/performance.md).
const holdEvictSample = 8

// What the table counts for each key and lease besides a key's text
// (holdKey.size): the key's entry and its slot in the map, and a lease's.
const (
	holdKeyBytes   = int64(unsafe.Sizeof(holdKey{})) + 48
	holdLeaseBytes = int64(unsafe.Sizeof(heldLease{}))
)

// holdForget is how long a key that holds nothing stays in the table
// after its last call (µs): Holds forgets it then.
const holdForget = int64(10 * time.Minute / time.Microsecond)

// HeldKey is one key's concurrency leases, as this instance's /v1/acquire,
// /v1/release and /v1/extend saw them (Server.Holds), and the units every
// instance holds on the key, as the store answered a look (HeldAll).
type HeldKey struct {
	// Key is the key as the calls named it.
	Key string
	// Limit is the limit of the key's last acquire.
	Limit int64
	// Held is the units of the leases this instance holds now, Leases how
	// many there are: the leases other instances hold on a shared store
	// are not among them.
	Held   int64
	Leases int
	// HeldAll is the units held on the key by every instance of the
	// store, this one's included, as a look at the store answered it at
	// most a second ago (so it may lag Held by as much): exact whatever
	// limits the acquires named, so it may be over Limit when the limit
	// was lowered (the leases held stay) or another instance names a
	// larger one. HeldAllKnown is false when no look answered for the key:
	// the store failed or was slow, a failure policy answered instead, or
	// the key is beyond the view's first 20 or newer than the last look.
	HeldAll      int64
	HeldAllKnown bool
	// Oldest is how long the oldest lease held has been held; NextExpiry
	// how long until the first lease held comes back by itself.
	Oldest, NextExpiry time.Duration
	// Acquired, Refused, Released and Expired count the key's acquires
	// granted and refused, its leases given back, and its leases that came
	// back by themselves (their lifetime ran out) since the key was first
	// seen.
	Acquired, Refused, Released, Expired int64
	// Partial: the key had more leases at once than the table follows
	// (view-leases, or view-bytes), and the ones beyond were counted but
	// not followed, so Held and Leases may be short.
	Partial bool
}

// HoldsView is what Server.Holds reports: the keys holding the most units
// now, and the table's totals.
type HoldsView struct {
	// Keys is how many keys the table follows (those holding leases, and
	// those called in the last 10 minutes), Held the units all of them
	// hold now.
	Keys int
	Held int64
	// Dropped counts the keys no longer followed to make room for others.
	Dropped int64
	// Bytes is what the table holds, its keys and leases, as it counts
	// them against view-bytes.
	Bytes int64
	// Bound is the last of the table's bounds a key or a lease met (a
	// *limits.Exceeded that names it and the flag that raises it), nil
	// when none has been met.
	Bound error
	// Top are the keys with leases held now, the most units first.
	Top []HeldKey
}

// heldLease is one lease the table follows: a digest of its name as the
// calls give it (holdTable.digest), units, and when it was acquired and
// comes back, µs by the store's clock.
type heldLease struct {
	id                   uint64
	units, since, expiry int64
}

// holdKey is one key's entry in the table.
type holdKey struct {
	limit                                int64
	leases                               []heldLease
	partial                              bool
	byRules                              bool // acquired by descriptors: its key is the store's
	acquired, refused, released, expired int64
	last                                 int64 // µs, its last call
}

// prune drops the leases whose lifetime has run out by now, counting them
// expired.
func (k *holdKey) prune(now int64) {
	live := k.leases[:0]
	for _, l := range k.leases {
		if l.expiry > now {
			live = append(live, l)
		} else {
			k.expired++
		}
	}
	clear(k.leases[len(live):])
	k.leases = live
}

// held is the units of k's leases (pruned).
func (k *holdKey) held() int64 {
	var n int64
	for _, l := range k.leases {
		n += l.units
	}
	return n
}

// size is what k holds, its key's text and its leases' room included.
func (k *holdKey) size(key string) int64 {
	return int64(len(key)) + holdKeyBytes + int64(cap(k.leases))*holdLeaseBytes
}

// take removes the lease id, reporting whether k followed it.
func (k *holdKey) take(id uint64) (heldLease, bool) {
	for i, l := range k.leases {
		if l.id == id {
			k.leases = append(k.leases[:i], k.leases[i+1:]...)
			return l, true
		}
	}
	return heldLease{}, false
}

// holdTable follows the concurrency leases the lease calls hold, per key,
// within lim's view-keys, view-leases and view-bytes, for the console. Its
// methods are safe for concurrent use.
type holdTable struct {
	now     func() int64 // µs, the store's clock
	lim     *limits.Table
	seed    maphash.Seed
	mu      sync.Mutex
	keys    map[string]*holdKey
	bytes   int64 // what keys holds (holdKey.size)
	dropped int64
	bound   error // the last bound met (HoldsView.Bound)
}

func newHoldTable(now func() time.Time, lim *limits.Table) *holdTable {
	t := &holdTable{now: fastclock.Micros, lim: lim, seed: maphash.MakeSeed(), keys: map[string]*holdKey{}}
	if now != nil {
		t.now = func() int64 { return now().UnixMicro() }
	}
	return t
}

// digest is what the table keeps of a lease's name.
func (t *holdTable) digest(id string) uint64 { return maphash.String(t.seed, id) }

// entry returns key's entry, making room for it when the table is full,
// or nil when key alone is over view-bytes; the caller holds mu.
func (t *holdTable) entry(key string, now int64) *holdKey {
	if k := t.keys[key]; k != nil {
		k.prune(now)
		k.last = now
		return k
	}
	k := &holdKey{last: now}
	need := k.size(key)
	if err := t.lim.Check(limits.ViewBytes, "the slots view's bytes with a new key", t.bytes+need); err != nil {
		t.bound = err
		if need > t.lim.ViewBytes {
			return nil
		}
	}
	if err := t.lim.Check(limits.ViewKeys, "the keys the slots view follows with a new one", int64(len(t.keys))+1); err != nil {
		t.bound = err
	}
	for len(t.keys) > 0 && (int64(len(t.keys)) >= t.lim.ViewKeys || t.bytes+need > t.lim.ViewBytes) {
		t.evict(now)
	}
	key = strings.Clone(key) // not the request's memory
	t.keys[key] = k
	t.bytes += need
	return k
}

// evict drops, of a few keys picked at random (map order), the one
// holding the least, the least recently called among equals.
func (t *holdTable) evict(now int64) {
	var victim string
	var vk *holdKey
	n := 0
	for key, k := range t.keys {
		k.prune(now)
		if vk == nil || k.held() < vk.held() || (k.held() == vk.held() && k.last < vk.last) {
			victim, vk = key, k
		}
		if n++; n == holdEvictSample {
			break
		}
	}
	t.forget(victim, vk)
	t.dropped++
}

// forget drops key, whose entry is k, from the table.
func (t *holdTable) forget(key string, k *holdKey) {
	delete(t.keys, key)
	t.bytes -= k.size(key)
}

// follow adds the lease l to the entry k when the table's bounds let it,
// reporting whether they did: past view-leases, or when k's list would
// take the table past view-bytes, it is not followed. The list grows by
// doubling, up to view-leases, so its room is counted before it is made.
func (t *holdTable) follow(k *holdKey, l heldLease) bool {
	if err := t.lim.Check(limits.ViewLeases, "the leases the slots view follows on one key", int64(len(k.leases))+1); err != nil {
		t.bound = err
		return false
	}
	if len(k.leases) == cap(k.leases) {
		room := min(max(4, 2*int64(cap(k.leases))), t.lim.ViewLeases)
		grow := (room - int64(cap(k.leases))) * holdLeaseBytes
		if err := t.lim.Check(limits.ViewBytes, "the slots view's bytes with a key's further leases", t.bytes+grow); err != nil {
			t.bound = err
			return false
		}
		leases := make([]heldLease, len(k.leases), room)
		copy(leases, k.leases)
		k.leases = leases
		t.bytes += grow
	}
	k.leases = append(k.leases, l)
	return true
}

// acquired records an acquire's answer: a lease held (id, units, expiry),
// or a refusal (id ""); byRules says whether it was by descriptors (key is
// then the store key), else by key.
func (t *holdTable) acquired(key string, limit int64, byRules bool, id string, units, expiry int64, allowed bool) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	k := t.entry(key, now)
	if k == nil {
		return // a key alone over view-bytes (set below its default): not followed
	}
	k.limit, k.byRules = limit, byRules
	switch {
	case !allowed:
		k.refused++
	case id == "": // held nowhere (the store failed open): nothing to follow
		k.acquired++
	default:
		k.acquired++
		if !t.follow(k, heldLease{id: t.digest(id), units: units, since: now, expiry: expiry}) {
			k.partial = true
		}
	}
}

// ended records a release (extend false) or an extension's answer for the
// lease id: held says whether the lease was still held, expiry is its new
// expiry after an extension.
func (t *holdTable) ended(key, id string, extend, held bool, expiry int64) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	k := t.keys[key]
	if k == nil {
		return // not a key this table follows (now)
	}
	k.prune(now)
	k.last = now
	l, found := k.take(t.digest(id))
	switch {
	case !held && found:
		k.expired++ // came back by itself, by the store's clock
	case !held:
		// Already counted when pruned, or not followed here.
	case extend && found:
		l.expiry = expiry
		k.leases = append(k.leases, l)
	case !extend:
		k.released++
	}
}

// view returns the n keys holding the most units now, and the totals, and
// the store key of each of the n (storeKey).
func (t *holdTable) view(n int) (HoldsView, []string) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	var top []HeldKey
	for key, k := range t.keys {
		k.prune(now)
		if len(k.leases) == 0 && now-k.last > holdForget {
			t.forget(key, k)
		}
	}
	v := HoldsView{Keys: len(t.keys), Dropped: t.dropped, Bytes: t.bytes, Bound: t.bound}
	for key, k := range t.keys {
		h := HeldKey{
			Key: key, Limit: k.limit, Held: k.held(), Leases: len(k.leases), Partial: k.partial,
			Acquired: k.acquired, Refused: k.refused, Released: k.released, Expired: k.expired,
		}
		v.Held += h.Held
		if h.Leases == 0 {
			continue
		}
		oldest, next := k.leases[0].since, k.leases[0].expiry
		for _, l := range k.leases[1:] {
			oldest, next = min(oldest, l.since), min(next, l.expiry)
		}
		h.Oldest, h.NextExpiry = time.Duration(now-oldest)*time.Microsecond, time.Duration(next-now)*time.Microsecond
		top = append(top, h)
	}
	sort.Slice(top, func(i, j int) bool {
		if top[i].Held != top[j].Held {
			return top[i].Held > top[j].Held
		}
		return top[i].Key < top[j].Key
	})
	v.Top = top[:min(max(n, 0), len(top))]
	keys := make([]string, len(v.Top))
	for i, h := range v.Top {
		keys[i] = storeKey(h.Key, t.keys[h.Key].byRules)
	}
	return v, keys
}

// storeKey is the store key of the acquires of key: by descriptors, key
// itself; by key, as lease names it.
func storeKey(key string, byRules bool) string {
	if byRules {
		return key
	}
	return takeKeyPrefix + key
}

// Holds reports the concurrency leases this instance's lease calls hold
// now: the n keys holding the most units (at most the service's view-keys
// are followed), and the totals. A lease acquired on another instance of a
// shared store is not among them, but is in the units the store says all
// instances hold on each of the keys (HeldKey.HeldAll): the store is
// asked at most once a second, about the first 20 keys, waiting 200 ms at
// most (holdsall.go), and the calls within the second read its answers.
func (s *Server) Holds(n int) HoldsView {
	v, keys := s.holds.view(n)
	all := s.all.held(s.holds.now, keys, s.lookAll)
	for i := range v.Top {
		if h, ok := all[keys[i]]; ok {
			v.Top[i].HeldAll, v.Top[i].HeldAllKnown = h, true
		}
	}
	return v
}

// The Policy of the observe.Events and Refused calls (Options.Observer,
// Options.Refused) of the calls that name no rule: the acquires of
// /v1/acquire (by key or by descriptors), the takes of /v1/take by key
// (a take by descriptors is its rules'), and the charges and settles of
// /v1/charge and /v1/settle by key (also Options.Charged's).
const (
	AcquirePolicy = "(acquire)"
	TakePolicy    = "(take)"
	ChargePolicy  = "(charge)"
)

// observeCall reports a call of policy on key: an event of outcome o, and
// key as refused when o is Denied.
func (s *service) observeCall(policy, key string, o observe.Outcome, latency time.Duration) {
	if s.opts.Observer != nil {
		s.opts.Observer.Observe(observe.Event{Source: "serve", Policy: policy, Outcome: o, Latency: latency})
	}
	if o == observe.Denied && s.opts.Refused != nil {
		s.opts.Refused(policy, key)
	}
}

// recordTake reports a take by key (/v1/take's key form) as an event of
// TakePolicy, as recordLease reports an acquire: the call's answer (res),
// or err when the store or the call failed. A request refused for what it
// asks (a bad limit, a key over key-bytes) decided nothing and is not
// reported.
func (s *service) recordTake(key string, res sluice.Result, err error, latency time.Duration) {
	if o, decided := callOutcome(err, outcome(res.Allowed, res.Degraded)); decided {
		s.observeCall(TakePolicy, key, o, latency)
	}
}

// callOutcome is the outcome of a call by key that answered o or failed
// with err (Error when the store or the call failed); decided is false
// for a request refused for what it asks (a bad limit, a key over
// key-bytes), which decided nothing and is not reported.
func callOutcome(err error, o observe.Outcome) (_ observe.Outcome, decided bool) {
	var re *requestError
	switch {
	case errors.As(err, &re):
		return o, false
	case err != nil:
		return observe.Error, true
	}
	return o, true
}

// outcome is an answer's outcome as the observer counts it.
func outcome(allowed, degraded bool) observe.Outcome {
	switch {
	case degraded:
		return observe.Degraded
	case allowed:
		return observe.Allowed
	}
	return observe.Denied
}

// recordLease records a lease call's answer (out, or err) in the holds
// table and, for an acquire, as an event of AcquirePolicy. A look (units
// 0) holds nothing and is not recorded.
func (s *service) recordLease(op string, t *LeaseRequest, out *LeaseResponse, err error, latency time.Duration) {
	units := int64(1)
	if t.Units != nil {
		units = *t.Units
	}
	if op == "acquire" && units == 0 {
		return
	}
	key, limit, byRules := t.Key, t.Limit, false
	if out != nil && out.key != "" { // the descriptor form
		key, limit, byRules = out.key, out.limit, true
	}
	if op != "acquire" {
		if err == nil && key != "" {
			s.holds.ended(key, t.Lease, op == "extend", out.Allowed, out.ExpiryUS)
		}
		return
	}
	o := observe.Error
	if err == nil {
		if key == "" { // the descriptor form, no limit found: nothing held
			return
		}
		s.holds.acquired(key, limit, byRules, out.Lease, units, out.ExpiryUS, out.Allowed)
		o = outcome(out.Allowed, out.Degraded)
	}
	s.observeCall(AcquirePolicy, key, o, latency)
}
