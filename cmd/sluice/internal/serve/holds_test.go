package serve

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/testsupport/testenv"
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

// The holds table stays bounded however many keys and leases its callers
// invent: at most maxHoldKeys keys, maxHoldLeases leases a key (the rest
// counted, and the key marked Partial).
func TestHoldsBounded(t *testing.T) {
	tab := newHoldTable(func() time.Time { return t0 })
	exp := t0.Add(time.Minute).UnixMicro()
	for i := range maxHoldLeases + 10 {
		tab.acquired("big", 1000, false, strconv.Itoa(i), 1, exp, true)
	}
	for i := range 3 * maxHoldKeys {
		tab.acquired("k"+strconv.Itoa(i), 5, false, "x"+strconv.Itoa(i), 1, exp, true)
	}
	v, _ := tab.view(5)
	if v.Keys != maxHoldKeys || len(tab.keys) != maxHoldKeys || v.Dropped != 2*maxHoldKeys+1 || len(v.Top) != 5 {
		t.Fatalf("keys %d (table %d), dropped %d, top %d", v.Keys, len(tab.keys), v.Dropped, len(v.Top))
	}
	if top := v.Top[0]; top.Key != "big" || top.Held != maxHoldLeases || !top.Partial || top.Acquired != maxHoldLeases+10 {
		t.Errorf("the key holding the most, kept while others come and go: %+v", top)
	}
}

// TestHoldsMemory measures the holds table full: maxHoldKeys keys of 64
// bytes, each with maxHoldLeases leases (docs/performance.md). A figure,
// not a check: under SLUICE_TIMING=1 only.
func TestHoldsMemory(t *testing.T) {
	testenv.SkipUnlessTiming(t, "the holds table's memory")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tab := newHoldTable(func() time.Time { return t0 })
	exp := t0.Add(time.Minute).UnixMicro()
	key := strings.Repeat("k", 60)
	for k := range maxHoldKeys {
		for i := range maxHoldLeases {
			tab.acquired(key+strconv.Itoa(1000+k), 5, false, strconv.FormatInt(1764000000000000+int64(k*100+i), 10), 1, exp, true)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	t.Logf("%d keys × %d leases: %d B on the heap", len(tab.keys), maxHoldLeases, after.HeapAlloc-before.HeapAlloc)
	runtime.KeepAlive(tab)
}
