package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
	"github.com/sluice-go/sluice/observe"
)

// eventLog is an observe.Observer that keeps the events.
type eventLog struct {
	mu     sync.Mutex
	events []observe.Event
}

func (l *eventLog) Observe(e observe.Event) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

func (l *eventLog) count(policy string, o observe.Outcome) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.events {
		if e.Policy == policy && e.Outcome == o {
			n++
		}
	}
	return n
}

// Holds follows the leases the lease calls hold: in flight per key, the
// oldest's age and the next expiry, acquires refused, leases released and
// expired (by a release too late, an extension too late, or their
// lifetime running out unseen); each acquire is an event of AcquirePolicy.
func TestHolds(t *testing.T) {
	events := &eventLog{}
	var refusedMu sync.Mutex
	var refused []string
	ts, clock := startTest(t, Options{Observer: events, Refused: func(p, k string) {
		refusedMu.Lock()
		refused = append(refused, p+" "+k)
		refusedMu.Unlock()
	}})
	call := func(path, body string) LeaseResponse {
		t.Helper()
		_, out := httpPost(t, ts.base+path, body)
		var r LeaseResponse
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%s %s: %v (%s)", path, body, err, out)
		}
		return r
	}
	acq := func(key string, limit, units int) LeaseResponse {
		return call("/v1/acquire", fmt.Sprintf(`{"key": %q, "limit": %d, "units": %d, "lifetime": "30s"}`, key, limit, units))
	}
	end := func(op, key, lease string) LeaseResponse {
		return call("/v1/"+op, fmt.Sprintf(`{"key": %q, "limit": 9, "lifetime": "30s", "lease": %q}`, key, lease))
	}
	a := acq("exports", 3, 2)
	clock.Set(t0.Add(5 * time.Second))
	b := acq("exports", 3, 1)
	if c := acq("exports", 3, 1); c.Allowed {
		t.Fatalf("a fourth unit of 3: %+v", c)
	}
	acq("reports", 1, 1)
	acq("looks", 1, 0) // a look holds nothing and is not followed
	clock.Set(t0.Add(10 * time.Second))

	v := ts.Holds(10)
	if v.Keys != 2 || v.Held != 4 || len(v.Top) != 2 {
		t.Fatalf("holds: %+v", v)
	}
	want := HeldKey{Key: "exports", Limit: 3, Held: 3, Leases: 2, Oldest: 10 * time.Second, NextExpiry: 20 * time.Second, Acquired: 2, Refused: 1,
		HeldAll: 3, HeldAllKnown: true}
	if v.Top[0] != want {
		t.Errorf("exports: %+v\nwant %+v", v.Top[0], want)
	}
	if r := v.Top[1]; r.Key != "reports" || r.Held != 1 || r.Oldest != 5*time.Second || r.NextExpiry != 25*time.Second {
		t.Errorf("reports: %+v", r)
	}
	if got := ts.Holds(1); len(got.Top) != 1 || got.Top[0].Key != "exports" {
		t.Errorf("Holds(1): %+v", got)
	}
	if n := events.count(AcquirePolicy, observe.Allowed); n != 3 {
		t.Errorf("%d allowed acquire events, want 3", n)
	}
	refusedMu.Lock()
	if n := events.count(AcquirePolicy, observe.Denied); n != 1 || fmt.Sprint(refused) != "[(acquire) exports]" {
		t.Errorf("%d denied acquire events, refused %q", n, refused)
	}
	refusedMu.Unlock()

	end("release", "exports", a.Lease)
	end("extend", "exports", b.Lease) // now expires at 40 s
	clock.Set(t0.Add(36 * time.Second))
	v = ts.Holds(10)
	want = HeldKey{Key: "exports", Limit: 3, Held: 1, Leases: 1, Oldest: 31 * time.Second, NextExpiry: 4 * time.Second, Acquired: 2, Refused: 1, Released: 1,
		HeldAll: 1, HeldAllKnown: true}
	if len(v.Top) != 1 || v.Top[0] != want || v.Held != 1 {
		t.Fatalf("after a release, an extension and reports' expiry: %+v\nwant %+v", v, want)
	}
	clock.Set(t0.Add(41 * time.Second))
	if r := end("release", "exports", b.Lease); r.Allowed {
		t.Fatalf("a release after the expiry: %+v", r)
	}
	if v = ts.Holds(10); len(v.Top) != 0 || v.Held != 0 || v.Keys != 2 {
		t.Fatalf("nothing held: %+v", v)
	}
	ts.holds.mu.Lock()
	for key, want := range map[string]int64{"exports": 1, "reports": 1} {
		if k := ts.holds.keys[key]; k.expired != want {
			t.Errorf("%s: %d expired, want %d", key, k.expired, want)
		}
	}
	ts.holds.mu.Unlock()
	// A key that holds nothing is forgotten 10 minutes after its last call.
	clock.Set(t0.Add(41*time.Second + 10*time.Minute))
	if v = ts.Holds(10); v.Keys != 1 {
		t.Errorf("10 minutes on: %d keys followed, want 1 (exports, called at 41 s)", v.Keys)
	}
	clock.Set(t0.Add(42*time.Second + 10*time.Minute))
	if v = ts.Holds(10); v.Keys != 0 {
		t.Errorf("10 minutes after the last call: %d keys followed, want 0", v.Keys)
	}
}

// newTestHolds is a holds table at t0 with the caps of lt (0s: the
// defaults).
func newTestHolds(lt limits.Table) *holdTable {
	lt.FillDefaults()
	return newHoldTable(func() time.Time { return t0 }, &lt)
}

// wantBound checks that the table says which of its bounds it met, and the
// flag that raises it.
func wantBound(t *testing.T, v HoldsView, row *limits.Row) {
	t.Helper()
	var over *limits.Exceeded
	if !errors.As(v.Bound, &over) || over.Row != row || !strings.Contains(v.Bound.Error(), row.Name) || !strings.Contains(v.Bound.Error(), row.Flag()+" raises it") {
		t.Errorf("the table's bound: %v, want %s's, naming %s", v.Bound, row.Name, row.Flag())
	}
}

// TestViewKeysCap: view-keys + 1 keys, and the table follows view-keys of
// them: the new key takes the place of one holding the least (not the key
// holding the most), and the view says how many were let go and why.
func TestViewKeysCap(t *testing.T) {
	tab := newTestHolds(limits.Table{})
	n := int(limits.ViewKeys.Default)
	exp := t0.Add(time.Minute).UnixMicro()
	for i := range 3 {
		tab.acquired("big", 1000, false, "b"+strconv.Itoa(i), 1, exp, true)
	}
	for i := range n {
		tab.acquired("k"+strconv.Itoa(i), 5, false, "x"+strconv.Itoa(i), 1, exp, true)
	}
	v, _ := tab.view(5)
	if v.Keys != n || len(tab.keys) != n || v.Dropped != 1 || v.Top[0].Key != "big" || v.Top[0].Held != 3 {
		t.Fatalf("%d + 1 keys: %d followed (table %d), %d dropped, top %+v", n, v.Keys, len(tab.keys), v.Dropped, v.Top[0])
	}
	wantBound(t, v, limits.ViewKeys)
	if v.Bytes != tab.bytes || v.Bytes > limits.ViewBytes.Default {
		t.Errorf("%d bytes (table %d)", v.Bytes, tab.bytes)
	}
	// Up to the cap, nothing is let go and no bound is met.
	tab = newTestHolds(limits.Table{ViewKeys: 3})
	for i := range 3 {
		tab.acquired("k"+strconv.Itoa(i), 5, false, "x", 1, exp, true)
	}
	if v, _ := tab.view(5); v.Keys != 3 || v.Dropped != 0 || v.Bound != nil {
		t.Errorf("3 keys of 3: %+v", v)
	}
}

// TestViewLeasesCap: view-leases + 1 leases on one key, and the table
// follows view-leases of them one by one; the last is counted, the key
// marked Partial (the page shows its units as N+).
func TestViewLeasesCap(t *testing.T) {
	tab := newTestHolds(limits.Table{})
	n := int(limits.ViewLeases.Default)
	exp := t0.Add(time.Minute).UnixMicro()
	for i := range n + 1 {
		tab.acquired("big", 1000, false, strconv.Itoa(i), 1, exp, true)
	}
	v, _ := tab.view(5)
	if top := v.Top[0]; top.Leases != n || top.Held != int64(n) || !top.Partial || top.Acquired != int64(n+1) {
		t.Errorf("%d + 1 leases: %+v", n, top)
	}
	wantBound(t, v, limits.ViewLeases)
	// A lease followed is released by its name, as the calls give it.
	tab.ended("big", "7", false, true, 0)
	if v, _ := tab.view(5); v.Top[0].Leases != n-1 || v.Top[0].Released != 1 {
		t.Errorf("after a release: %+v", v.Top[0])
	}
}

// TestViewBytesCap: keys and leases worth view-bytes + 1 bytes, and the
// table holds at most view-bytes: a new key takes the place of keys
// holding the least, a key's list that would grow past it stops growing
// (its further leases counted, the key Partial), and a key alone over it
// is not followed.
func TestViewBytesCap(t *testing.T) {
	exp := t0.Add(time.Minute).UnixMicro()
	key := func(i int) string { return fmt.Sprintf("%0100d", i) }
	keyBytes := int64(100) + holdKeyBytes
	// 10 keys fit exactly; the 11th is one key's bytes + 1 over.
	tab := newTestHolds(limits.Table{ViewBytes: 10 * keyBytes})
	for i := range 11 {
		tab.acquired(key(i), 5, false, "", 1, exp, true)
		if tab.bytes > tab.lim.ViewBytes {
			t.Fatalf("key %d: %d bytes, over %d", i, tab.bytes, tab.lim.ViewBytes)
		}
	}
	v, _ := tab.view(5)
	if v.Keys != 10 || v.Dropped != 1 || v.Bytes != 10*keyBytes {
		t.Errorf("11 keys of 10's bytes: %d followed, %d dropped, %d bytes", v.Keys, v.Dropped, v.Bytes)
	}
	wantBound(t, v, limits.ViewBytes)

	// Leases: the list of a key grows 4, 8, 16… (counted before it is
	// made); the growth that would go one byte over is refused.
	cap4 := keyBytes + 4*holdLeaseBytes
	tab = newTestHolds(limits.Table{ViewBytes: cap4 + 4*holdLeaseBytes - 1})
	for i := range 6 {
		tab.acquired(key(0), 50, false, strconv.Itoa(i), 1, exp, true)
	}
	v, _ = tab.view(5)
	if top := v.Top[0]; top.Leases != 4 || !top.Partial || top.Acquired != 6 || v.Bytes != cap4 {
		t.Errorf("leases past view-bytes: %+v, %d bytes", top, v.Bytes)
	}
	wantBound(t, v, limits.ViewBytes)

	// A key alone over view-bytes is not followed.
	tab = newTestHolds(limits.Table{ViewBytes: keyBytes - 1})
	tab.acquired(key(0), 5, false, "a", 1, exp, true)
	if v, _ := tab.view(5); v.Keys != 0 || v.Bytes != 0 {
		t.Errorf("a key over view-bytes: %+v", v)
	}
}

// TestHoldsBytesBounded: the red team's 1,024 keys × 64 leases with 1 KiB
// domains and values made the table hold 207 MB (213 MB live heap in the
// service): each lease kept its token, 2.8 KB of base64 with the domain
// and the descriptor in it. Now a lease is kept by a digest, and the
// table's own count of its bytes, checked against the heap after a
// collection, is at most view-bytes (4 MiB).
func TestHoldsBytesBounded(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tab := newTestHolds(limits.Table{})
	exp := t0.Add(time.Minute).UnixMicro()
	dom, val := strings.Repeat("d", 1024), strings.Repeat("v", 1024)
	for k := range 1024 {
		key := dom + "/k_" + val[:1000] + strconv.Itoa(100000+k) // a store key of about 2 KiB, its key-bytes
		for i := range 64 {
			tok := &leaseToken{Domain: dom, Entries: [][2]string{{"k", val}}, ID: int64(k*100 + i + 1)}
			tab.acquired(key, 64, true, tok.encode(), 1, exp, true)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	v, _ := tab.view(10)
	t.Logf("1,024 keys × 64 leases, 1 KiB domain and values: %d keys followed, %d dropped; the table counts %d bytes, the heap grew %d", v.Keys, v.Dropped, v.Bytes, heap)
	capBytes := limits.ViewBytes.Default
	if v.Bytes > capBytes {
		t.Errorf("the table counts %d bytes, over view-bytes %d", v.Bytes, capBytes)
	}
	// The map's buckets and the allocator's size classes come on top of
	// what the table counts: a quarter at most.
	if !raceEnabled && heap > capBytes+capBytes/4 {
		t.Errorf("the heap grew %d bytes, over view-bytes %d and a quarter", heap, capBytes)
	}
	wantBound(t, v, limits.ViewBytes)
	runtime.KeepAlive(tab)
}

// A take by key is an event of TakePolicy, its refusals refused keys, as
// an acquire is of AcquirePolicy; a take refused for what it asks (a bad
// limit) decided nothing and is no event.
func TestTakeByKeyObserved(t *testing.T) {
	events := &eventLog{}
	var refusedMu sync.Mutex
	var refused []string
	ts, _ := startTest(t, Options{Observer: events, Refused: func(p, k string) {
		refusedMu.Lock()
		refused = append(refused, p+" "+k)
		refusedMu.Unlock()
	}})
	for range 3 {
		httpPost(t, ts.base+"/v1/take", `{"key": "partner:acme", "limit": "1/1m"}`)
	}
	httpPost(t, ts.base+"/v1/take", `{"key": "partner:acme", "limit": "once a minute"}`)
	if a, d, e := events.count(TakePolicy, observe.Allowed), events.count(TakePolicy, observe.Denied), events.count(TakePolicy, observe.Error); a != 1 || d != 2 || e != 0 {
		t.Errorf("take events: %d allowed, %d denied, %d errors; want 1, 2, 0", a, d, e)
	}
	refusedMu.Lock()
	defer refusedMu.Unlock()
	if fmt.Sprint(refused) != "[(take) partner:acme (take) partner:acme]" {
		t.Errorf("refused: %q", refused)
	}
}
