package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/observe"
	"github.com/sluice-go/sluice/redisstore"
)

// tally is an observer that counts Events by source, policy and outcome,
// and checks what every Event must carry.
type tally struct {
	t      testing.TB
	mu     sync.Mutex
	counts map[string]int
	calls  int // Events with Index 0 and a store latency
	waits  []time.Duration
}

func newTally(t testing.TB) *tally { return &tally{t: t, counts: map[string]int{}} }

func (c *tally) Observe(e observe.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[e.Source+" "+e.Policy+" "+e.Outcome.String()]++
	if e.Index < 0 || e.Latency < 0 || e.Wait < 0 {
		c.t.Errorf("event %+v", e)
	}
	if e.Index == 0 && e.Latency > 0 {
		c.calls++
	}
	if e.Index == 0 && e.Wait > 0 {
		c.waits = append(c.waits, e.Wait)
	}
}

// String lists the counts, sorted: "http ip allowed=3, ...".
func (c *tally) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, k := range slices.Sorted(maps.Keys(c.counts)) {
		out = append(out, fmt.Sprintf("%s=%d", k, c.counts[k]))
	}
	return strings.Join(out, ", ")
}

func (c *tally) check(t *testing.T, want string) {
	t.Helper()
	if got := c.String(); got != want {
		t.Errorf("observed\n\t%s\nwant\n\t%s", got, want)
	}
}

// Enforced and shadow policies report every outcome, policy by policy; a
// policy that granted its part of a refused composite reports nothing, so
// the counts are Stats'.
func TestObserverCounts(t *testing.T) {
	c := newClock()
	obs := newTally(t)
	m := mustNew(t, frozenLimiter(c), []httplimit.Policy{
		{Name: "ip", Limit: sluice.PerMinute(3)},
		{Name: "user", Limit: sluice.PerMinute(5), Key: httplimit.Header("X-User")},
		{Name: "shadow", Limit: sluice.PerMinute(2), Key: httplimit.Header("X-User"), Shadow: true},
		{Name: "cost", Limit: sluice.PerMinute(100), Key: httplimit.Static("all"), Optional: true,
			CostFunc: func(r *http.Request) (int64, error) {
				if r.Header.Get("X-Bad") != "" {
					return 0, fmt.Errorf("bad cost")
				}
				return 1, nil
			}},
	}, httplimit.WithObserver(obs))
	srv := httptest.NewServer(m.Handler(echo))
	defer srv.Close()
	// u1 three times: all granted, the shadow refuses the third. u1 again:
	// ip refuses (user would grant), the shadow too. u2: ip refuses, the
	// shadow grants. A bad cost: answered 400 before the store.
	wantStatus := []int{200, 200, 200, 429, 429, 400}
	for i, user := range []string{"u1", "u1", "u1", "u1", "u2", "u3"} {
		hdr := []string{"X-User", user}
		if i == 5 {
			hdr = append(hdr, "X-Bad", "1")
		}
		if resp, body := get(t, srv.Client(), srv.URL, hdr...); resp.StatusCode != wantStatus[i] {
			t.Fatalf("request %d: status %d, want %d: %s", i, resp.StatusCode, wantStatus[i], body)
		}
	}
	obs.check(t, "http cost allowed=3, http cost error=1, http ip allowed=3, http ip denied=2, "+
		"http shadow allowed=3, http shadow shadow_denied=2, http user allowed=3")
	// One Event with Index 0 per store call: 5 enforced composites, 5
	// shadow ones.
	if obs.calls != 10 {
		t.Errorf("%d store calls observed, want 10", obs.calls)
	}
	// The counts are Stats'.
	for _, st := range m.Stats() {
		for o, n := range map[string]uint64{"allowed": st.Allowed, "degraded": st.Degraded} {
			if got := obs.counts["http "+st.Policy+" "+o]; uint64(got) != n {
				t.Errorf("%s %s: observed %d, Stats %d", st.Policy, o, got, n)
			}
		}
		refused := obs.counts["http "+st.Policy+" denied"] + obs.counts["http "+st.Policy+" shadow_denied"]
		if uint64(refused) != st.Refused || uint64(obs.counts["http "+st.Policy+" error"]) != st.Errors {
			t.Errorf("%s: observed %s, Stats %+v", st.Policy, obs, st)
		}
	}
}

// Under 64 concurrent clients, the observer counts exactly what the limit
// admits and refuses.
func TestObserverConcurrent(t *testing.T) {
	c := newClock() // frozen: nothing refills
	obs := newTally(t)
	m := mustNew(t, frozenLimiter(c), []httplimit.Policy{
		{Name: "all", Limit: sluice.PerMinute(20), Key: httplimit.Static("x")},
		{Name: "user", Limit: sluice.PerMinute(100), Key: httplimit.Header("X-User")},
	}, httplimit.WithObserver(obs), httplimit.WithHeaders())
	srv := httptest.NewServer(m.Handler(echo))
	defer srv.Close()
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			resp, err := srv.Client().Get(srv.URL) // no X-User: ...
			if err == nil {
				resp.Body.Close()
			}
			req, _ := http.NewRequest("GET", srv.URL, nil)
			req.Header.Set("X-User", fmt.Sprint("u", i%4))
			if resp, err = srv.Client().Do(req); err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
		})
	}
	wg.Wait()
	// The 64 requests without a user are answered 400 and report nothing.
	obs.check(t, "http all allowed=20, http all denied=44, http user allowed=20")
}

// A Redis killed under the middleware: fail-open policies report degraded,
// fail-closed ones error, and nothing else is reported.
func TestObserverStoreFailure(t *testing.T) {
	srv := redistest.Standalone(t)
	obs := newTally(t)
	ps := []httplimit.Policy{
		{Name: "ip", Limit: sluice.PerMinute(100)},
		{Name: "user", Limit: sluice.PerMinute(100), Key: httplimit.Header("X-User")},
		{Name: "shadow", Limit: sluice.PerMinute(100), Key: httplimit.Header("X-User"), Shadow: true},
	}
	var urls []string
	for _, fp := range []redisstore.FailurePolicy{redisstore.FailOpen, redisstore.FailClosed} {
		client := srv.NewClient(t, func(o *redis.Options) { o.MaxRetries, o.DialerRetries = -1, 1 })
		store, err := redisstore.New(client, redisstore.WithFailurePolicy(fp), redisstore.WithTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		// The two middlewares' keys apart, their events apart by policy
		// name.
		name := map[redisstore.FailurePolicy]string{redisstore.FailOpen: "open-", redisstore.FailClosed: "closed-"}[fp]
		var named []httplimit.Policy
		for _, p := range ps {
			p.Name = name + p.Name
			named = append(named, p)
		}
		m := mustNew(t, sluice.New(store), named, httplimit.WithObserver(obs))
		hs := httptest.NewServer(m.Handler(echo))
		defer hs.Close()
		urls = append(urls, hs.URL)
	}
	send := func(want ...int) {
		t.Helper()
		for i, u := range urls {
			for range 3 {
				if resp, body := get(t, http.DefaultClient, u, "X-User", "u1"); resp.StatusCode != want[i] {
					t.Fatalf("%s: status %d, want %d: %s", u, resp.StatusCode, want[i], body)
				}
			}
		}
	}
	send(200, 200)
	srv.Stop(t)
	send(200, 503)
	obs.check(t, "http closed-ip allowed=3, http closed-ip error=3, http closed-shadow allowed=3, "+
		"http closed-user allowed=3, http closed-user error=3, "+
		"http open-ip allowed=3, http open-ip degraded=3, http open-shadow allowed=3, http open-shadow degraded=3, "+
		"http open-user allowed=3, http open-user degraded=3")
}

// A leaky-bucket admission reports its delay as the Event's Wait.
func TestObserverLeakyWait(t *testing.T) {
	c := newClock()
	obs := newTally(t)
	m := mustNew(t, frozenLimiter(c), []httplimit.Policy{
		{Name: "leaky", Limit: sluice.PerSecond(10).WithBurst(5).WithAlgorithm(sluice.LeakyBucket), Key: httplimit.Static("x")},
	}, httplimit.WithObserver(obs), httplimit.WithClock(c))
	srv := httptest.NewServer(m.Handler(echo))
	defer srv.Close()
	for range 3 {
		get(t, srv.Client(), srv.URL)
	}
	obs.check(t, "http leaky allowed=3")
	if got := fmt.Sprint(obs.waits); got != "[100ms 200ms]" {
		t.Errorf("waits %s, want [100ms 200ms]", got)
	}
}

// The Transport reports each request's policies and the upstream's answer.
func TestTransportObserver(t *testing.T) {
	c := newClock()
	sc := stepClock{c}
	lim := sluice.New(memstore.New(memstore.WithClock(sc)))
	up := &upstream{clock: c, start: c.Now(), script: []string{"200", "200", "429 2", "200", "503", "200"}}
	srv := httptest.NewServer(up)
	defer srv.Close()
	obs := newTally(t)
	client := newTransport(t, lim, []httplimit.Policy{
		{Name: "global", Limit: sluice.PerSecond(1).WithBurst(2), Key: httplimit.Static("all")},
		{Name: "per-host", Limit: sluice.PerMinute(100)},
	}, httplimit.WithHoldClock(sc), httplimit.WithTransportObserver(obs))
	want := []int{200, 200, 429, 200, 503, 200}
	for i := range want {
		if s := status(t, client, srv.URL); s != want[i] {
			t.Fatalf("request %d: status %d, want %d", i, s, want[i])
		}
	}
	// The burst of 2, then one a second: request 2 waits 1s for "global";
	// request 3 is held 2s by the 429, when "global" has 2 again; request 5
	// waits 1s. A 503 without Retry-After is not a refusal.
	if got, want := fmt.Sprint(up.times()), "[0s 0s 1s 3s 3s 4s]"; got != want {
		t.Errorf("upstream saw requests at %s, want %s", got, want)
	}
	obs.check(t, "http-out global allowed=6, http-out per-host allowed=6, http-out upstream allowed=5, http-out upstream denied=1")
	if got := fmt.Sprint(obs.waits); got != "[1s 2s 1s]" {
		t.Errorf("waits %s, want [1s 2s 1s]", got)
	}
	// A deadline the wait cannot keep: denied by the policy that refused
	// ("global"), not sent; "per-host", which would have granted, is not
	// reported.
	ctx, cancel := context.WithDeadline(context.Background(), c.Now().Add(100*time.Millisecond)) // read on the Limiter's clock
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	if _, err := client.Do(req); err == nil {
		t.Fatal("a request that would wait past its deadline was sent")
	}
	obs.check(t, "http-out global allowed=6, http-out global denied=1, http-out per-host allowed=6, "+
		"http-out upstream allowed=5, http-out upstream denied=1")
	if _, err := httplimit.NewTransport(lim, []httplimit.Policy{{Name: httplimit.UpstreamPolicy, Limit: sluice.PerSecond(1)}}); err == nil {
		t.Error("a policy took the name UpstreamPolicy")
	}
}

// A Redis killed under the Transport: fail open, the policies and the
// upstream report degraded and the calls go out; fail closed, the hold
// cannot be read, the call is not sent and the upstream reports an error.
func TestTransportObserverStoreFailure(t *testing.T) {
	srv := redistest.Standalone(t)
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer up.Close()
	obs := newTally(t)
	clients := map[redisstore.FailurePolicy]*http.Client{}
	for _, fp := range []redisstore.FailurePolicy{redisstore.FailOpen, redisstore.FailClosed} {
		client := srv.NewClient(t, func(o *redis.Options) { o.MaxRetries, o.DialerRetries = -1, 1 })
		store, err := redisstore.New(client, redisstore.WithFailurePolicy(fp), redisstore.WithTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		name := map[redisstore.FailurePolicy]string{redisstore.FailOpen: "open", redisstore.FailClosed: "closed"}[fp]
		clients[fp] = newTransport(t, sluice.New(store), []httplimit.Policy{
			{Name: name, Limit: sluice.PerMinute(100), Key: httplimit.Static("x")},
		}, httplimit.WithTransportKeyPrefix(name+":"), httplimit.WithTransportObserver(obs))
	}
	for range 2 {
		for _, c := range clients {
			if s := status(t, c, up.URL); s != 200 {
				t.Fatalf("status %d", s)
			}
		}
	}
	srv.Stop(t)
	for range 3 {
		if s := status(t, clients[redisstore.FailOpen], up.URL); s != 200 {
			t.Fatalf("fail open: status %d", s)
		}
		if _, err := clients[redisstore.FailClosed].Get(up.URL); !errors.Is(err, sluice.ErrStoreUnavailable) {
			t.Fatalf("fail closed: %v, want sluice.ErrStoreUnavailable", err)
		}
	}
	obs.check(t, "http-out closed allowed=2, http-out open allowed=2, http-out open degraded=3, "+
		"http-out upstream allowed=4, http-out upstream degraded=3, http-out upstream error=3")
}
