package serve

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/redisstore"
	"github.com/sluice-go/sluice/store"
)

// forgetAll drops ts's last round of looks: its next Holds looks again.
func forgetAll(ts *testServer) {
	ts.all.mu.Lock()
	ts.all.answers = nil
	ts.all.mu.Unlock()
}

// heldOf is key's row of ts's slots view: Held, and HeldAll or -1 when
// it is unknown; -2, -2 when the key is not in the view.
func heldOf(ts *testServer, key string) (held, all int64) {
	for _, k := range ts.Holds(10).Top {
		if k.Key == key {
			if !k.HeldAllKnown {
				return k.Held, -1
			}
			return k.Held, k.HeldAll
		}
	}
	return -2, -2
}

// twoInstances checks the slots views of two servers on one store: each
// holds its own leases (Held) and sees what both hold (HeldAll), by key
// and by descriptors; tick makes the last looks old enough to look again.
// frozen: the holds tables' clock moves only by tick, so that the views
// can be checked within the second of a look.
func twoInstances(t *testing.T, a, b *testServer, tick func(), frozen bool) {
	t.Helper()
	ca, cb := leaseClient{t, a.base}, leaseClient{t, b.base}
	acq := func(c leaseClient, units, limit int) LeaseResponse {
		return c.post("/v1/acquire", fmt.Sprintf(`{"key": "exports", "limit": %d, "units": %d, "lifetime": "1m"}`, limit, units), 200)
	}
	acq(ca, 2, 5)
	la := acq(cb, 1, 5)
	acq(cb, 2, 5)
	ca.acquire("tenant=acme priority=critical", 200)
	cb.acquire("tenant=acme", 200)
	cb.acquire("tenant=acme", 200)
	var pool string // the pool's store key, as both name it
	for _, k := range b.Holds(10).Top {
		if k.Key != "exports" {
			pool = k.Key
		}
	}
	check := func(when string, want map[*testServer][2][2]int64) {
		t.Helper()
		for ts, w := range want {
			name := map[*testServer]string{a: "a", b: "b"}[ts]
			for i, key := range []string{"exports", pool} {
				if h, all := heldOf(ts, key); h != w[i][0] || all != w[i][1] {
					t.Errorf("%s: instance %s, %s: held %d, held by all %d; want %d, %d", when, name, key, h, all, w[i][0], w[i][1])
				}
			}
		}
	}
	check("acquired", map[*testServer][2][2]int64{a: {{2, 5}, {1, 3}}, b: {{3, 5}, {2, 3}}})

	// Within the second the looks answered, the views read their answers:
	// a release on b shows in b's own figure only.
	cb.post("/v1/release", `{"key": "exports", "limit": 5, "lease": "`+la.Lease+`"}`, 200)
	if frozen {
		check("released, looked within the second", map[*testServer][2][2]int64{a: {{2, 5}, {1, 3}}, b: {{2, 5}, {2, 3}}})
	}
	tick()
	check("released, looked again", map[*testServer][2][2]int64{a: {{2, 4}, {1, 3}}, b: {{2, 4}, {2, 3}}})

	// A lowered limit keeps the leases held: every instance still sees
	// them all, over the limit the key's last acquire named.
	if r := ca.post("/v1/acquire", `{"key": "exports", "limit": 3, "lifetime": "1m"}`, 429); r.Allowed {
		t.Fatalf("an acquire under a lowered limit: %+v", r)
	}
	tick()
	if k := a.Holds(10).Top[0]; k.Key != "exports" || k.Limit != 3 || k.HeldAll != 4 || !k.HeldAllKnown {
		t.Errorf("after a lowered limit: %+v, want 4 held by all over a limit of 3", k)
	}
}

// Two instances on one memory store (two servers, one memstore): each
// one's slots view shows the units both hold on its keys, read from the
// store at most once a second (by the holds table's clock).
func TestHoldsAllInstances(t *testing.T) {
	clock := &fakeClock{t: t0}
	ms := memstore.New(memstore.WithClock(clock))
	dir := writeConfig(t, map[string]string{"jobs.yaml": jobsConfig})
	a := start(t, Options{Store: ms, Config: dir}, clock)
	b := start(t, Options{Store: ms, Config: dir}, clock)
	now := t0
	twoInstances(t, a, b, func() {
		now = now.Add(time.Second)
		clock.Set(now)
	}, true)
}

// The same on Redis, two stores on one redis-server; then, Redis gone, a
// look that fails (the store's timeout, or a failure policy's answer)
// leaves the figure out and the view still answers.
func TestHoldsAllInstancesRedis(t *testing.T) {
	rs := redistest.Standalone(t)
	dir := writeConfig(t, map[string]string{"jobs.yaml": jobsConfig})
	prefix := fmt.Sprintf("holdsall:%d:", time.Now().UnixNano())
	closed, err := redisstore.New(rs.Client(), redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer closed.Close()
	// A client that fails at once with Redis gone: the failure policy
	// answers the looks (then, on a busy machine, the timeout may).
	fast := rs.NewClient(t, func(o *redis.Options) { o.MaxRetries, o.DialerRetries = -1, 1 })
	local, err := redisstore.New(fast, redisstore.WithPrefix(prefix), redisstore.WithFailurePolicy(redisstore.FailLocal))
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	a := start(t, Options{Store: closed, Config: dir}, nil)
	b := start(t, Options{Store: local, Config: dir}, nil)
	twoInstances(t, a, b, func() { forgetAll(a); forgetAll(b) }, false)

	rs.Stop(t)
	forgetAll(a)
	forgetAll(b)
	for _, ts := range []*testServer{a, b} {
		if h, all := heldOf(ts, "exports"); h != 2 || all != -1 {
			t.Errorf("Redis stopped: held %d, held by all %d; want 2 and unknown", h, all)
		}
	}
}

// BenchmarkHoldsLook is the cost of a slots view with a round of looks (10
// keys held), on the memory store and on a redis-server, and of one within
// the second, reading the last round's answers (docs/performance.md).
func BenchmarkHoldsLook(b *testing.B) {
	dir := writeConfig(b, map[string]string{"jobs.yaml": jobsConfig})
	rs := redistest.Standalone(b)
	rstore, err := redisstore.New(rs.Client(), redisstore.WithPrefix(fmt.Sprintf("holdslook:%d:", time.Now().UnixNano())))
	if err != nil {
		b.Fatal(err)
	}
	defer rstore.Close()
	for _, store := range []struct {
		name  string
		store store.Store
	}{{"memory", memstore.New()}, {"redis", rstore}} {
		ts := start(b, Options{Config: dir, Store: store.store}, nil)
		c := leaseClient{b, ts.base}
		for i := range 10 {
			c.post("/v1/acquire", fmt.Sprintf(`{"key": "k%d", "limit": 5, "lifetime": "1h"}`, i), 200)
		}
		b.Run(store.name+"/round", func(b *testing.B) {
			for b.Loop() {
				forgetAll(ts)
				if v := ts.Holds(10); !v.Top[9].HeldAllKnown {
					b.Fatalf("%+v", v.Top[9])
				}
			}
		})
		b.Run(store.name+"/cached", func(b *testing.B) {
			for b.Loop() {
				ts.Holds(10)
			}
		})
	}
}
