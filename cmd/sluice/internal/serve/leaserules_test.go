package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/redisstore"
)

// jobsConfig: a pool per tenant with priority classes, a report pool that
// takes a rate limit with each lease, a pool whose rate limit refuses
// every hit, and a rate limit alone.
const jobsConfig = `domain: jobs
descriptors:
  - key: tenant
    concurrency: {max: 4, lifetime: 30s, name: tenants}
    descriptors:
      - key: priority
        value: critical
        concurrency: {headroom: 0}
      - key: priority
        concurrency: {headroom: 2, name: batch}
  - key: report
    rate_limit: {unit: minute, requests_per_unit: 3}
    concurrency: {max: 10}
  - key: closed
    rate_limit: {unit: minute, requests_per_unit: 0}
    concurrency: {max: 10}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 5}
`

// leaseClient makes the lease calls of a test on one server.
type leaseClient struct {
	t    testing.TB
	base string
}

// post makes one call, checks its status code and returns its answer (or
// the body as Rule when the answer is an error).
func (c leaseClient) post(path, body string, code int) LeaseResponse {
	c.t.Helper()
	resp, out := httpPost(c.t, c.base+path, body)
	if resp.StatusCode != code {
		c.t.Fatalf("%s %s: %d %s, want %d", path, body, resp.StatusCode, out, code)
	}
	var r LeaseResponse
	if code != 200 && code != 429 {
		r.Rule = out
		return r
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		c.t.Fatalf("%s: %v (%s)", path, err, out)
	}
	return r
}

// acquire asks for a lease of the descriptor "k=v k2=v2" in domain jobs.
func (c leaseClient) acquire(descriptor string, code int) LeaseResponse {
	c.t.Helper()
	return c.post("/v1/acquire", `{"domain": "jobs", "descriptors": [`+entriesJSON(descriptor)+`]}`, code)
}

func (c leaseClient) release(lease string) LeaseResponse {
	c.t.Helper()
	return c.post("/v1/release", `{"lease": "`+lease+`"}`, 200)
}

// entriesJSON is a descriptor "k=v k2=v2" as the API's JSON.
func entriesJSON(descriptor string) string {
	var parts []string
	for _, kv := range strings.Fields(descriptor) {
		k, v, _ := strings.Cut(kv, "=")
		parts = append(parts, fmt.Sprintf(`{"key": %q, "value": %q}`, k, v))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// The lease calls by descriptors: the service finds the concurrency limit
// (a pool, a class of it), answers a token that a release or an extension
// echoes, takes a descriptor's rate limit with its lease, and answers a
// descriptor without concurrency as allowed with nothing held. On the
// memory store and on a real Redis.
func TestLeaseByDescriptors(t *testing.T) {
	for _, redis := range []bool{false, true} {
		t.Run(map[bool]string{false: "memory", true: "redis"}[redis], func(t *testing.T) {
			clock := &fakeClock{t: t0}
			o := Options{Config: writeConfig(t, map[string]string{"jobs.yaml": jobsConfig})}
			if redis {
				rs, err := redisstore.New(redistest.Standalone(t).Client(), redisstore.WithClock(clock))
				if err != nil {
					t.Fatal(err)
				}
				o.Store = rs
			}
			leaseByDescriptors(t, start(t, o, clock), clock)
		})
	}
}

func leaseByDescriptors(t *testing.T, ts *testServer, clock *fakeClock) {
	c := leaseClient{t, ts.base}

	// The pool: 4 per tenant; the batch class leaves 2 for the others.
	a := c.acquire("tenant=acme priority=batch", 200)
	b := c.acquire("tenant=acme priority=batch", 200)
	if !a.Allowed || !strings.HasPrefix(a.Lease, tokenPrefix) || a.Lease == b.Lease || a.Rule != "batch" || b.Remaining != 0 || a.ExpiryUS != t0.UnixMicro()+30_000_000 {
		t.Fatalf("batch acquires: %+v %+v", a, b)
	}
	if r := c.acquire("tenant=acme priority=batch", 429); r.Allowed || r.Lease != "" || r.RetryAfterUS != 30_000_000 {
		t.Fatalf("a third batch lease: %+v, want refused: the headroom", r)
	}
	crit := c.acquire("tenant=acme priority=critical", 200)
	plain := c.acquire("tenant=acme", 200)
	if crit.Rule != "tenant/priority=critical" || plain.Rule != "tenants" || plain.Remaining != 0 {
		t.Fatalf("the other classes: %+v %+v", crit, plain)
	}
	c.acquire("tenant=acme", 429)
	if r := c.acquire("tenant=other priority=batch", 200); !r.Allowed {
		t.Fatalf("another tenant's pool: %+v", r)
	}

	// The console's slots table sees the descriptor form under the pool's
	// key: every class's leases, the pool's limit, the refusals.
	v := ts.Holds(10)
	if len(v.Top) != 2 || v.Top[0].Held != 4 || v.Top[0].Leases != 4 || v.Top[0].Limit != 4 || v.Top[0].Refused != 2 || v.Top[0].Acquired != 4 ||
		!strings.Contains(v.Top[0].Key, "acme") || v.Top[1].Held != 1 || v.Top[0].HeldAll != 4 || !v.Top[0].HeldAllKnown {
		t.Fatalf("slots table: %+v", v)
	}

	// Release and extend by the token alone.
	if r := c.release(a.Lease); !r.Allowed || r.Lease != "" {
		t.Fatalf("release: %+v", r)
	}
	if r := c.release(a.Lease); r.Allowed {
		t.Fatalf("a second release: %+v, want not held", r)
	}
	if v := ts.Holds(10); v.Top[0].Held != 3 || v.Top[0].Released != 1 {
		t.Fatalf("slots table after a release: %+v", v.Top[0])
	}
	clock.Set(t0.Add(20 * time.Second))
	if r := c.post("/v1/extend", `{"lease": "`+b.Lease+`"}`, 200); !r.Allowed || r.Lease != b.Lease || r.ExpiryUS != t0.Add(50*time.Second).UnixMicro() {
		t.Fatalf("extend: %+v", r)
	}
	clock.Set(t0.Add(35 * time.Second)) // crit and plain came back by themselves
	if r := c.post("/v1/extend", `{"lease": "`+crit.Lease+`"}`, 200); r.Allowed || r.Lease != "" {
		t.Fatalf("extend after the lifetime: %+v, want not held", r)
	}
	if r := c.release(plain.Lease); r.Allowed {
		t.Fatalf("release after the lifetime: %+v, want not held", r)
	}

	// A rate limit with the lease: 3 a minute; a refusal holds nothing.
	var reports []LeaseResponse
	for range 3 {
		reports = append(reports, c.acquire("report=q3", 200))
	}
	if r := c.acquire("report=q3", 429); r.Allowed || r.RetryAfterUS != 55_000_000 {
		t.Fatalf("a 4th report in the minute: %+v, want refused by the rate limit until the minute ends", r)
	}
	for _, r := range reports {
		if rr := c.release(r.Lease); !rr.Allowed {
			t.Fatalf("release of a report: %+v", rr)
		}
	}
	if r := c.post("/v1/acquire", `{"domain": "jobs", "descriptors": [[{"key": "report", "value": "q3"}]], "units": 0}`, 200); r.Remaining != 0 {
		t.Fatalf("a look after the releases: %+v, want 0 left (the rate limit's)", r)
	}
	c.acquire("closed=x", 429)

	// No concurrency limit: allowed, nothing held.
	for _, d := range []string{"plain=x", "unknown=y", "tenant=acme priority=batch extra=z"} {
		if r := c.acquire(d, 200); !r.Allowed || r.Lease != "" || r.Remaining != -1 || r.Rule != "" {
			t.Errorf("%s: %+v, want allowed with nothing held", d, r)
		}
	}
	if r := c.post("/v1/acquire", `{"domain": "none", "descriptors": [[{"key": "tenant", "value": "acme"}]]}`, 200); !r.Allowed || r.Lease != "" {
		t.Errorf("unknown domain: %+v", r)
	}
	// A descriptor without concurrency beside one with it: the one's lease.
	if r := c.post("/v1/acquire", `{"domain": "jobs", "descriptors": [`+entriesJSON("plain=x")+`, `+entriesJSON("tenant=b")+`]}`, 200); r.Rule != "tenants" || r.Lease == "" {
		t.Errorf("two descriptors, one with concurrency: %+v", r)
	}

	// What the service will not do, each a 400 that says why.
	big := strings.Repeat(`[{"key": "k"}],`, 64) + `[{"key": "k"}]`
	for body, want := range map[string]string{
		`{"domain": "jobs", "descriptors": [` + entriesJSON("tenant=a") + `, ` + entriesJSON("report=b") + `]}`: "descriptors 0 and 1 both have a concurrency limit",
		`{"domain": "jobs", "descriptors": []}`:                                               "at least one descriptor",
		`{"domain": "jobs", "descriptors": [[]]}`:                                             "descriptor 0 has no entries",
		`{"domain": "jobs", "descriptors": [[{"key": ""}]]}`:                                  "empty key",
		`{"domain": "jobs", "descriptors": [` + big + `]}`:                                    "descriptors: 65, over the service's limit descriptors of 64 (--limit descriptors=N raises it)",
		`{"domain": "jobs", "key": "k", "limit": 2, "descriptors": [[{"key": "a"}]]}`:         "not both",
		`{"domain": "jobs", "descriptors": [[{"key": "a"}]], "lease": "c1.x"}`:                `"lease" names the lease of a release`,
		`{"domain": "jobs", "descriptors": [[{"key": "tenant", "value": "a"}]], "units": 5}`:  "exceeds capacity: 5 units, concurrency limit 4",
		`{"domain": "jobs", "descriptors": [[{"key": "tenant", "value": "a"}]], "units": -1}`: "negative",
	} {
		if r := c.post("/v1/acquire", body, 400); !strings.Contains(r.Rule, want) {
			t.Errorf("acquire %s: %q, want %q", body, r.Rule, want)
		}
	}
	for body, want := range map[string]string{
		`{"lease": "c1.!!"}`: "not a token an acquire answered",
		`{"lease": "c1." }`:  "not a token an acquire answered",
		`{"lease": "` + (&leaseToken{Domain: "jobs", ID: 5}).encode() + `"}`:                                                        "no entries",
		`{"lease": "` + (&leaseToken{Domain: "jobs", Entries: [][2]string{{strings.Repeat("k", 1025), ""}}, ID: 5}).encode() + `"}`: "1025 bytes, over the service's limit entry-bytes of 1KiB",
		`{"lease": "` + b.Lease + `", "domain": "jobs"}`:                                                                            `gives "lease" alone`,
		// A token names no key past its domain's pools.
		`{"lease": "` + (&leaseToken{Domain: "jobs", Entries: [][2]string{{"tenant", "acme"}}, Key: "other/tenant=acme", ID: 5}).encode() + `"}`: "not a token an acquire answered",
		`{"lease": "` + (&leaseToken{Domain: "jobs", Entries: [][2]string{{"tenant", "acme"}}, Key: "/exports:acme", ID: 5}).encode() + `"}`:     "not a token an acquire answered",
	} {
		if r := c.post("/v1/release", body, 400); !strings.Contains(r.Rule, want) {
			t.Errorf("release %s: %q, want %q", body, r.Rule, want)
		}
	}

	// The lease series by limit, and the configuration shows the limits.
	_, page := httpGet(t, ts.base+"/metrics")
	for _, line := range []string{
		`sluice_serve_concurrency_leases_total{concurrency="batch",domain="jobs",outcome="held"} 3`,
		`sluice_serve_concurrency_leases_total{concurrency="batch",domain="jobs",outcome="refused"} 1`,
		`sluice_serve_concurrency_leases_total{concurrency="batch",domain="jobs",outcome="released"} 1`,
		`sluice_serve_concurrency_leases_total{concurrency="batch",domain="jobs",outcome="extended"} 1`,
		// A second release of a lease is not an expiry: the store cannot
		// tell one from the other, and says only that nothing was held.
		`sluice_serve_concurrency_leases_total{concurrency="batch",domain="jobs",outcome="not_held"} 1`,
		`sluice_serve_concurrency_leases_total{concurrency="tenants",domain="jobs",outcome="not_held"} 1`,
		`sluice_serve_calls_total{code="not_held",door="release"} 2`,
		`sluice_serve_calls_total{code="not_held",door="extend"} 1`,
		`sluice_serve_concurrency_leases_total{concurrency="report",domain="jobs",outcome="refused"} 1`,
		`sluice_serve_calls_total{code="over_limit",door="acquire"}`,
	} {
		if !strings.Contains(page, line) {
			t.Errorf("/metrics lacks %s:\n%s", line, grep(page, "sluice_serve_concurrency"))
		}
	}
	_, text := httpGet(t, ts.base+"/debug/config")
	for _, line := range []string{
		`jobs: tenant concurrency name="tenants" max=4 lifetime=30s`,
		`jobs: tenant/priority concurrency name="batch" max=4 lifetime=30s pool=tenant headroom=2`,
		`jobs: report concurrency max=10 lifetime=1m0s with_rate_limit="3/1m0s aligned-window burst 3"`,
	} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("/debug/config lacks %q:\n%s", line, text)
		}
	}
	_, js := httpGet(t, ts.base+"/debug/config?format=json")
	if !strings.Contains(js, `{"domain":"jobs","path":"tenant/priority","name":"batch","pool":"tenant","max":4,"lifetime":"30s","headroom":2}`) {
		t.Errorf("/debug/config's JSON lacks the batch class:\n%s", js)
	}
}

// A reload that lowers a concurrency limit while leases are held keeps
// them (SEMANTICS.md): acquires are refused until the leases held fit the
// new limit, and the leases are released by the tokens the old
// configuration answered; one that raises it admits at once. On the
// memory store and on a real Redis.
func TestLeaseReload(t *testing.T) {
	conf := func(max int) string {
		return fmt.Sprintf("domain: jobs\ndescriptors:\n  - key: tenant\n    concurrency: {max: %d}\n", max)
	}
	for _, redis := range []bool{false, true} {
		t.Run(map[bool]string{false: "memory", true: "redis"}[redis], func(t *testing.T) {
			clock := &fakeClock{t: t0}
			dir := writeConfig(t, map[string]string{"jobs.yaml": conf(3)})
			o := Options{Config: dir, NoWatch: true}
			if redis {
				rs, err := redisstore.New(redistest.Standalone(t).Client(), redisstore.WithClock(clock))
				if err != nil {
					t.Fatal(err)
				}
				o.Store = rs
			}
			ts := start(t, o, clock)
			c := leaseClient{t, ts.base}
			var held []string
			for range 3 {
				held = append(held, c.acquire("tenant=acme", 200).Lease)
			}
			reload := func(max int) {
				t.Helper()
				if err := os.WriteFile(filepath.Join(dir, "jobs.yaml"), []byte(conf(max)), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := ts.Reload(); err != nil {
					t.Fatal(err)
				}
			}
			reload(1)
			c.acquire("tenant=acme", 429)
			if r := c.release(held[0]); !r.Allowed {
				t.Fatalf("release under the lowered limit: %+v", r)
			}
			c.acquire("tenant=acme", 429) // 2 held, limit 1
			c.release(held[1])
			c.acquire("tenant=acme", 429) // 1 held: full
			c.release(held[2])
			one := c.acquire("tenant=acme", 200)
			c.acquire("tenant=acme", 429)
			reload(4)
			for range 3 {
				c.acquire("tenant=acme", 200)
			}
			c.acquire("tenant=acme", 429)
			// A reload that takes the limit away: the lease comes back by
			// itself; its release is answered, not held.
			if err := os.WriteFile(filepath.Join(dir, "jobs.yaml"), []byte("domain: jobs\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := ts.Reload(); err != nil {
				t.Fatal(err)
			}
			if r := c.release(one.Lease); r.Allowed || r.Remaining != -1 {
				t.Fatalf("release once the limit is gone: %+v", r)
			}
			if r := c.acquire("tenant=acme", 200); r.Lease != "" {
				t.Fatalf("acquire once the limit is gone: %+v, want nothing held", r)
			}
		})
	}
}

// Exactness through the HTTP API: 32 goroutines acquire and release leases
// of one tenant's pool of 5, and an independent count of the work each
// holds between its acquire's answer and its release never passes 5. The
// count is a part of what the store holds, so an over-admission shows.
func TestLeaseExact(t *testing.T) {
	t.Parallel()
	for _, redis := range []bool{false, true} {
		t.Run(map[bool]string{false: "memory", true: "redis"}[redis], func(t *testing.T) {
			const max, workers, rounds = 5, 32, 12
			o := Options{Config: writeConfig(t, map[string]string{"jobs.yaml": fmt.Sprintf("domain: jobs\ndescriptors:\n  - key: tenant\n    concurrency: {max: %d, lifetime: 5m}\n", max)})}
			if redis {
				rs, err := redisstore.New(redistest.Standalone(t).Client())
				if err != nil {
					t.Fatal(err)
				}
				o.Store = rs
			}
			ts := start(t, o, &fakeClock{t: time.Now()})
			seed := testenv.Seed(t)
			var inFlight, peak, held, refused atomic.Int64
			var wg sync.WaitGroup
			for g := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := leaseClient{t, ts.base}
					for i := range rounds {
						resp, out := httpPost(t, ts.base+"/v1/acquire", `{"domain": "jobs", "descriptors": [[{"key": "tenant", "value": "acme"}]]}`)
						if resp.StatusCode == 429 {
							refused.Add(1)
							continue
						}
						var r LeaseResponse
						if resp.StatusCode != 200 || json.Unmarshal([]byte(out), &r) != nil || r.Lease == "" {
							t.Errorf("acquire: %d %s", resp.StatusCode, out)
							return
						}
						held.Add(1)
						n := inFlight.Add(1)
						for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
						}
						if (uint64(g*rounds+i)^seed)%3 == 0 {
							time.Sleep(time.Millisecond) // hold a while
						}
						inFlight.Add(-1)
						if rr := c.release(r.Lease); !rr.Allowed {
							t.Errorf("release: %+v, want it held", rr)
						}
					}
				}()
			}
			wg.Wait()
			t.Logf("%d held, %d refused, at most %d in flight", held.Load(), refused.Load(), peak.Load())
			if peak.Load() > max {
				t.Fatalf("%d leases in flight at once, over the limit of %d", peak.Load(), max)
			}
			if held.Load() == 0 || held.Load()+refused.Load() != workers*rounds {
				t.Fatalf("%d held + %d refused, want %d calls", held.Load(), refused.Load(), workers*rounds)
			}
			// Every lease was released: the pool is whole again.
			if r := (leaseClient{t, ts.base}).post("/v1/acquire", `{"domain": "jobs", "descriptors": [[{"key": "tenant", "value": "acme"}]], "units": 0}`, 200); r.Remaining != max {
				t.Fatalf("after the run: %d free, want %d", r.Remaining, max)
			}
		})
	}
}

// The per-second store keeps per-second budgets; a concurrency whose
// descriptor's rate limit would be kept there cannot be taken with its
// lease, and the load says so.
func TestLeasePerSecondStore(t *testing.T) {
	clock := &fakeClock{t: t0}
	dir := writeConfig(t, map[string]string{"jobs.yaml": "domain: jobs\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n    concurrency: {max: 2}\n"})
	o := Options{Config: dir, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Store: memstore.New(memstore.WithClock(clock)), PerSecondStore: memstore.New(memstore.WithClock(clock))}
	_, err := New(o)
	if err == nil || !strings.Contains(err.Error(), "descriptor k: its rate_limit is kept in the per-second store") {
		t.Fatalf("New: %v", err)
	}
}

// On a Redis Cluster a lease and the rate limit taken with it are all or
// nothing with or without --domain-slot: with it, a domain's keys are in
// one slot and decided in one script, classes' too; without it the
// lease's key and the rate limit's hash apart and are taken in turn, what
// was taken given back on a refusal. Both answer alike.
func TestLeaseCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.Cluster(t)
	const conf = `domain: jobs
descriptors:
  - key: report
    rate_limit: {unit: minute, requests_per_unit: 3}
    concurrency: {max: 2}
  - key: tenant
    concurrency: {max: 4}
    descriptors:
      - key: priority
        rate_limit: {unit: minute, requests_per_unit: 3}
        concurrency: {headroom: 1}
`
	for _, slot := range []bool{false, true} {
		clock := &fakeClock{t: t0} // the minute's window stays put
		rs, err := redisstore.New(cl.Client(), redisstore.WithClock(clock), redisstore.WithPrefix(fmt.Sprintf("lc%v:%d:", slot, time.Now().UnixNano())))
		if err != nil {
			t.Fatal(err)
		}
		ts := start(t, Options{Config: writeConfig(t, map[string]string{"jobs.yaml": conf}), Store: rs, DomainSlot: slot}, clock)
		c := leaseClient{t, ts.base}
		for range 2 {
			c.release(c.acquire("report=q3", 200).Lease)
		}
		c.acquire("report=q3", 200)
		c.acquire("report=q3", 429) // the minute's 3 are spent
		a := c.acquire("tenant=t1 priority=low", 200)
		c.acquire("tenant=t1 priority=low", 200)
		c.acquire("tenant=t1 priority=low", 200)
		c.acquire("tenant=t1 priority=low", 429) // the headroom, and the rate limit
		c.acquire("tenant=t1", 200)
		c.release(a.Lease)
	}
}

// A failed acquire holds nothing (issue: 3 acquires to a pool of 3 while
// Redis was stopped answered 503, yet 2 slots stayed taken for their
// lifetime). The store's timeout passes while Redis sleeps, each acquire
// answers 503 with no lease, and once Redis wakes and runs the calls the
// store had sent, their holds are given back: the pool's 3 slots are free
// again long before the lease's 5 minutes.
func TestLeaseFailedAcquireHoldsNothing(t *testing.T) {
	srv := redistest.Standalone(t)
	rs, err := redisstore.New(srv.NewClient(t, nil), redisstore.WithTimeout(100*time.Millisecond),
		redisstore.WithPrefix(fmt.Sprintf("failedacq:%d:", time.Now().UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	o := Options{Store: rs, Config: writeConfig(t, map[string]string{"jobs.yaml": "domain: jobs\ndescriptors:\n  - key: tenant\n    concurrency: {max: 3, lifetime: 5m}\n"})}
	ts := start(t, o, &fakeClock{t: time.Now()})
	c := leaseClient{t, ts.base}
	c.release(c.acquire("tenant=acme", 200).Lease) // scripts loaded, connections open

	ctx := context.Background()
	slept := make(chan error, 1)
	sleeper := srv.NewClient(t, nil)
	go func() { slept <- sleeper.Do(ctx, "DEBUG", "SLEEP", "0.6").Err() }()
	probe := srv.NewClient(t, func(o *redis.Options) { o.ReadTimeout, o.MaxRetries = 20*time.Millisecond, -1 })
	for asleep := time.Now().Add(5 * time.Second); probe.Ping(ctx).Err() == nil; time.Sleep(time.Millisecond) {
		if time.Now().After(asleep) {
			t.Fatal("the server answered PING for 5s after DEBUG SLEEP was sent")
		}
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, out := httpPost(t, ts.base+"/v1/acquire", `{"domain": "jobs", "descriptors": [[{"key": "tenant", "value": "acme"}]]}`)
			if resp.StatusCode != 503 || strings.Contains(out, `"lease"`) {
				t.Errorf("acquire while Redis sleeps: %d %s, want 503 and no lease", resp.StatusCode, out)
			}
		}()
	}
	wg.Wait()
	if err := <-slept; err != nil {
		t.Fatal(err)
	}
	body := `{"domain": "jobs", "descriptors": [[{"key": "tenant", "value": "acme"}]], "units": 3}`
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, out := httpPost(t, ts.base+"/v1/acquire", body)
		if resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool's 3 slots were still not free 10s after the failed acquires: %d %s", resp.StatusCode, out)
		}
	}
}

// A reload never doubles a pool (issue: a shared wildcard's pool, its
// pattern changed from /export/* to /export/x* under the same name, kept
// its 3 leases under the old key and admitted 3 more, 6 in flight against
// a max of 3; releasing an old token answered allowed false while it was
// still held). A shared pool is keyed by its name, not its pattern, so the
// 3 old leases keep it full; and a token releases the hold it was given
// wherever a reload moved the pool (a renamed pool is a new one: its old
// leases still release their own holds).
func TestLeaseReloadMovesNoPool(t *testing.T) {
	conf := func(pattern, name string) string {
		return fmt.Sprintf("domain: jobs\ndescriptors:\n  - key: path\n    value: %q\n    share_threshold: true\n    concurrency: {max: 3, lifetime: 5m, name: %s}\n", pattern, name)
	}
	for _, c := range []struct {
		name      string
		stable    bool // the pool keeps its key
		to, name2 string
	}{
		{"pattern changed", true, "/export/x*", "exports"},
		{"renamed", false, "/export/*", "exports2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := &fakeClock{t: t0}
			dir := writeConfig(t, map[string]string{"jobs.yaml": conf("/export/*", "exports")})
			ts := start(t, Options{Config: dir, NoWatch: true}, clock)
			lc := leaseClient{t, ts.base}
			var held []string
			for _, v := range []string{"/export/xa", "/export/xb", "/export/xc"} {
				held = append(held, lc.acquire("path="+v, 200).Lease)
			}
			lc.acquire("path=/export/xd", 429)
			if err := os.WriteFile(filepath.Join(dir, "jobs.yaml"), []byte(conf(c.to, c.name2)), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := ts.Reload(); err != nil {
				t.Fatal(err)
			}
			if c.stable {
				lc.acquire("path=/export/xd", 429) // still 3 held
			}
			for i, tok := range held {
				if r := lc.release(tok); !r.Allowed {
					t.Errorf("release of old lease %d after the reload: %+v, want its hold released", i, r)
				}
			}
			for range 3 {
				lc.acquire("path=/export/xe", 200)
			}
			lc.acquire("path=/export/xe", 429)
		})
	}
}
