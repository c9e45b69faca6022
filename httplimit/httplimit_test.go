package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/observe"
	"github.com/sluice-go/sluice/redisstore"
)

// newClock is a frozen clock the tests move by hand; its Sleep returns at
// once, so a leaky-bucket admission's delay is not waited out.
func newClock() *testenv.Clock { return testenv.NewClock() }

func frozenLimiter(c *testenv.Clock) *sluice.Limiter {
	return sluice.New(memstore.New(memstore.WithClock(c)))
}

func mustNew(t testing.TB, lim *sluice.Limiter, ps []httplimit.Policy, opts ...httplimit.Option) *httplimit.Middleware {
	t.Helper()
	m, err := httplimit.New(lim, ps, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

// echo answers 200 with the client address and ClientIP key the middleware
// resolved.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	a, _ := httplimit.ClientAddr(r)
	k, _ := httplimit.ClientIP()(r)
	w.Header().Set("X-Client-Addr", a.String())
	w.Header().Set("X-Client-Key", k)
	io.WriteString(w, "ok")
})

// get sends a GET with headers (name, value pairs) and returns the response
// with its body read.
func get(t testing.TB, c *http.Client, url string, hdr ...string) (*http.Response, string) {
	t.Helper()
	return testenv.Do(t, c, "GET", url, "", hdr...)
}

type problem struct {
	Type     string   `json:"type"`
	Title    string   `json:"title"`
	Status   int      `json:"status"`
	Detail   string   `json:"detail"`
	Violated []string `json:"violated-policies"`
}

func readProblem(t testing.TB, resp *http.Response, body string) problem {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, body %q", ct, body)
	}
	var p problem
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("problem body %q: %v", body, err)
	}
	if p.Status != resp.StatusCode {
		t.Errorf("problem status %d, response %d", p.Status, resp.StatusCode)
	}
	return p
}

func TestUntrustedPeerIgnoresForwardingHeaders(t *testing.T) {
	c := newClock()
	m := mustNew(t, frozenLimiter(c), []httplimit.Policy{{Name: "ip", Limit: sluice.PerMinute(3)}},
		httplimit.WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8"))) // not the test's peer
	srv := httptest.NewServer(m.Handler(echo))
	defer srv.Close()
	allowed := 0
	for i := range 10 {
		spoof := fmt.Sprintf("198.51.100.%d", i)
		resp, _ := get(t, srv.Client(), srv.URL,
			"X-Forwarded-For", spoof, "Forwarded", "for="+spoof, "X-Real-IP", spoof, "CF-Connecting-IP", spoof)
		if resp.StatusCode == 200 {
			allowed++
			if got := resp.Header.Get("X-Client-Key"); got != "127.0.0.1" {
				t.Errorf("spoofed request keyed on %q, want the peer 127.0.0.1", got)
			}
		}
	}
	if allowed != 3 {
		t.Errorf("%d admitted with spoofed headers, want 3 (one budget: the peer's)", allowed)
	}
}

func TestTrustedChainWalkedFromTheRight(t *testing.T) {
	trust := httplimit.WithTrustedProxies(netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::ffff:192.168.0.0/112"))
	cases := []struct {
		header string // "" = X-Forwarded-For
		values []string
		want   string // the ClientIP key
	}{
		{"", []string{"203.0.113.7, 10.0.0.1, 10.0.0.2"}, "203.0.113.7"},
		{"", []string{"198.51.100.1, 203.0.113.7, 10.0.0.1"}, "203.0.113.7"},     // the left part is the client's own word
		{"", []string{"198.51.100.1", "203.0.113.7", "10.0.0.1"}, "203.0.113.7"}, // several lines are one list
		{"", []string{"10.0.0.9, 10.0.0.1"}, "10.0.0.9"},                         // all trusted: the leftmost
		{"", []string{"garbage, 10.0.0.1"}, "10.0.0.1"},                          // not an address: the hop that wrote it
		{"", []string{"::ffff:203.0.113.9, 192.168.1.1"}, "203.0.113.9"},         // mapped read as IPv4, trusted mapped prefix
		{"", []string{"[2001:db8:1:2::77]:443"}, "2001:db8:1:2::/64"},
		{"", nil, "127.0.0.1"}, // no header: the peer
		{"Forwarded", []string{`for=198.51.100.1, for="[2001:db8::1]:4711";proto=https, for=10.0.0.1;by=10.0.0.2`}, "2001:db8::/64"},
		{"Forwarded", []string{`For="203.0.113.5:80"`}, "203.0.113.5"},
		{"Forwarded", []string{`for=unknown, for=10.0.0.3`}, "10.0.0.3"},
		// A quote is not the client's to open: an entry its proxies appended
		// after it is read as they wrote it.
		{"", []string{`"198.51.100.7, 203.0.113.9, 10.0.0.1`}, "203.0.113.9"},
		{"", []string{`198.51.100.7, "x\", 203.0.113.9`}, "203.0.113.9"},
		{"Forwarded", []string{`for="198.51.100.7, for=203.0.113.9`}, "203.0.113.9"},
		{"CF-Connecting-IP", []string{"203.0.113.8"}, "203.0.113.8"},
		{"CF-Connecting-IP", []string{"nonsense"}, "127.0.0.1"},
	}
	for i, tc := range cases {
		opts := []httplimit.Option{trust}
		name := "X-Forwarded-For"
		if tc.header != "" {
			opts = append(opts, httplimit.WithProxyHeader(tc.header))
			name = tc.header
		}
		m := mustNew(t, frozenLimiter(newClock()), []httplimit.Policy{{Name: "ip", Limit: sluice.PerMinute(100)}}, opts...)
		srv := httptest.NewServer(m.Handler(echo))
		var hdr []string
		for _, v := range tc.values {
			hdr = append(hdr, name, v)
		}
		resp, _ := get(t, srv.Client(), srv.URL, hdr...)
		if got := resp.Header.Get("X-Client-Key"); got != tc.want {
			t.Errorf("case %d (%s: %q): key %q, want %q", i, name, tc.values, got, tc.want)
		}
		srv.Close()
	}
}

func TestIPv6SharesOneBudgetPerPrefix(t *testing.T) {
	c := newClock()
	m := mustNew(t, frozenLimiter(c), []httplimit.Policy{{Name: "ip", Limit: sluice.PerMinute(50)}},
		httplimit.WithTrustedProxies(netip.MustParsePrefix("127.0.0.0/8")))
	srv := httptest.NewServer(m.Handler(echo))
	defer srv.Close()
	rng := rand.New(rand.NewPCG(testenv.Seed(t), 1))
	allowed := 0
	seen := map[string]bool{}
	for len(seen) < 200 { // 200 distinct addresses of 2001:db8:aa:bb::/64
		a := fmt.Sprintf("2001:db8:aa:bb:%x:%x:%x:%x", rng.Uint32N(1<<16), rng.Uint32N(1<<16), rng.Uint32N(1<<16), rng.Uint32N(1<<16))
		if seen[a] {
			continue
		}
		seen[a] = true
		resp, _ := get(t, srv.Client(), srv.URL, "X-Forwarded-For", a)
		if resp.StatusCode == 200 {
			allowed++
		}
	}
	if allowed != 50 {
		t.Errorf("200 addresses of one /64: %d admitted, want 50 (one budget)", allowed)
	}
	// Another /64 has its own.
	if resp, _ := get(t, srv.Client(), srv.URL, "X-Forwarded-For", "2001:db8:aa:bc::1"); resp.StatusCode != 200 {
		t.Errorf("another /64: status %d", resp.StatusCode)
	}
	// /128 keys each address alone.
	m128 := mustNew(t, frozenLimiter(c), []httplimit.Policy{{Name: "ip", Limit: sluice.PerMinute(1)}},
		httplimit.WithTrustedProxies(netip.MustParsePrefix("127.0.0.0/8")), httplimit.WithIPv6Prefix(128))
	srv2 := httptest.NewServer(m128.Handler(echo))
	defer srv2.Close()
	for i := range 5 {
		if resp, _ := get(t, srv2.Client(), srv2.URL, "X-Forwarded-For", fmt.Sprintf("2001:db8::%d", i+1)); resp.StatusCode != 200 {
			t.Errorf("/128: address %d refused", i)
		}
	}
}

// algorithms are the limits the header test draws from.
func randomLimit(rng *rand.Rand) sluice.Limit {
	algos := []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.LeakyBucket, sluice.FixedWindow, sluice.AlignedWindow, sluice.SlidingWindow, sluice.SlidingLog}
	periods := []time.Duration{100 * time.Millisecond, time.Second, 1500 * time.Millisecond, time.Minute}
	return sluice.Limit{
		Algorithm: algos[rng.IntN(len(algos))],
		Rate:      1 + rng.Int64N(20),
		Period:    periods[rng.IntN(len(periods))],
		Burst:     1 + rng.Int64N(10),
	}
}

// wantQW is RateLimit-Policy's q and w for l, computed apart from the
// package.
func wantQW(l sluice.Limit) (q, w int64) {
	ceilSec := func(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }
	switch l.Algorithm {
	case sluice.TokenBucket, sluice.GCRA:
		q = l.Burst
	case sluice.LeakyBucket:
		q = l.Burst + 1
	default:
		return l.Rate, ceilSec(l.Period)
	}
	// q units at one per Period/Rate, in µs rounded up, then seconds up.
	us := (q*l.Period.Microseconds() + l.Rate - 1) / l.Rate
	return q, (us + 999999) / 1000000
}

func ceilSeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

func TestHeadersAndRetryAfterAgainstTheLimiter(t *testing.T) {
	rng := rand.New(rand.NewPCG(testenv.Seed(t), 2))
	for round := range 40 {
		c := newClock()
		l := randomLimit(rng)
		m := mustNew(t, frozenLimiter(c), []httplimit.Policy{{Name: "p-" + l.Algorithm.String(), Limit: l, CostFunc: costHeader}},
			httplimit.WithHeaders(httplimit.HeadersDraft11, httplimit.HeadersXRateLimit), httplimit.WithClock(c))
		twin := frozenLimiter(c) // the same decisions, made apart
		srv := httptest.NewServer(m.Handler(echo))
		capacity := l.Burst
		switch l.Algorithm {
		case sluice.LeakyBucket:
			capacity = l.Burst + 1
		case sluice.TokenBucket, sluice.GCRA:
		default:
			capacity = l.Rate
		}
		wq, ww := wantQW(l)
		refusals := 0
		for i := range 30 {
			cost := 1 + rng.Int64N(capacity)
			want, err := twin.Take(context.Background(), "twin", l, cost)
			if err != nil {
				t.Fatal(err)
			}
			resp, body := get(t, srv.Client(), srv.URL, "X-Cost", strconv.FormatInt(cost, 10))
			where := fmt.Sprintf("round %d (%v), request %d (cost %d)", round, l, i, cost)
			if (resp.StatusCode == 200) != want.Allowed {
				t.Fatalf("%s: status %d, the limiter says allowed=%v", where, resp.StatusCode, want.Allowed)
			}
			if !want.Allowed {
				refusals++
				if resp.StatusCode != 429 {
					t.Fatalf("%s: status %d", where, resp.StatusCode)
				}
				ra, err := strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64)
				if err != nil || ra < 1 || ra != max(1, ceilSeconds(want.RetryAfter)) {
					t.Fatalf("%s: Retry-After %q, want ceil(%v) and at least 1", where, resp.Header.Get("Retry-After"), want.RetryAfter)
				}
				p := readProblem(t, resp, body)
				if p.Type != httplimit.ProblemType || len(p.Violated) != 1 || p.Violated[0] != "p-"+l.Algorithm.String() {
					t.Fatalf("%s: problem %+v", where, p)
				}
			} else if resp.Header.Get("Retry-After") != "" {
				t.Fatalf("%s: Retry-After on an admission", where)
			}
			pol, err := parseSFList(resp.Header.Get("RateLimit-Policy"))
			if err != nil || len(pol) != 1 {
				t.Fatalf("%s: RateLimit-Policy %q: %v", where, resp.Header.Get("RateLimit-Policy"), err)
			}
			if pol[0].Value != "p-"+l.Algorithm.String() || pol[0].Params["q"] != wq || pol[0].Params["w"] != ww {
				t.Fatalf("%s: RateLimit-Policy %q, want q=%d w=%d", where, resp.Header.Get("RateLimit-Policy"), wq, ww)
			}
			cur, err := parseSFList(resp.Header.Get("RateLimit"))
			if err != nil || len(cur) != 1 {
				t.Fatalf("%s: RateLimit %q: %v", where, resp.Header.Get("RateLimit"), err)
			}
			wr, wt := want.Remaining, ceilSeconds(want.ResetAfter)
			if cur[0].Value != "p-"+l.Algorithm.String() || cur[0].Params["r"] != wr || cur[0].Params["t"] != wt {
				t.Fatalf("%s: RateLimit %q, want r=%d t=%d", where, resp.Header.Get("RateLimit"), wr, wt)
			}
			if got := resp.Header.Get("X-RateLimit-Remaining"); got != strconv.FormatInt(wr, 10) {
				t.Fatalf("%s: X-RateLimit-Remaining %q, want %d", where, got, wr)
			}
			if got := resp.Header.Get("X-RateLimit-Reset"); got != strconv.FormatInt(wt, 10) {
				t.Fatalf("%s: X-RateLimit-Reset %q, want %d", where, got, wt)
			}
			if got := resp.Header.Get("X-RateLimit-Limit"); got != strconv.FormatInt(wq, 10) {
				t.Fatalf("%s: X-RateLimit-Limit %q, want %d", where, got, wq)
			}
			c.Add(time.Duration(rng.Int64N(int64(l.Period / 2))))
		}
		srv.Close()
		t.Logf("round %d: %v, %d refusals", round, l, refusals)
	}
}

// costHeader reads a request's cost from X-Cost.
func costHeader(r *http.Request) (int64, error) {
	return strconv.ParseInt(r.Header.Get("X-Cost"), 10, 64)
}

func TestRetryAfterRoundsUpAndIsNeverZero(t *testing.T) {
	c := newClock()
	// 1000/s: a refusal's wait is a millisecond.
	m := mustNew(t, frozenLimiter(c), []httplimit.Policy{{Name: "fast", Limit: sluice.Per(1000, time.Second).WithBurst(1)}})
	srv := httptest.NewServer(m.Handler(echo))
	defer srv.Close()
	get(t, srv.Client(), srv.URL)
	resp, _ := get(t, srv.Client(), srv.URL)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("status %d, Retry-After %q: want 429 and 1 (1ms rounded up)", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

func TestCompositeUnderConcurrency(t *testing.T) {
	t.Run("memstore", func(t *testing.T) {
		compositeUnderConcurrency(t, frozenLimiter(newClock())) // frozen: nothing refills, so the counts are exact
	})
	t.Run("redisstore", func(t *testing.T) {
		c := newClock()
		srv := redistest.Standalone(t)
		store, err := redisstore.New(srv.Client(), redisstore.WithClock(c), redisstore.WithTimeout(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		compositeUnderConcurrency(t, sluice.New(store))
	})
}

func compositeUnderConcurrency(t *testing.T, lim *sluice.Limiter) {
	const userBurst, tenantBurst = 5, 20
	userLimit, tenantLimit := sluice.PerMinute(1).WithBurst(userBurst), sluice.PerMinute(1).WithBurst(tenantBurst)
	m := mustNew(t, lim, []httplimit.Policy{
		{Name: "per-user", Limit: userLimit, Key: httplimit.Header("X-User")},
		{Name: "per-tenant", Limit: tenantLimit, Key: httplimit.Header("X-Tenant")},
	})
	srv := httptest.NewServer(m.Handler(echo))
	defer srv.Close()
	// Tenants t0..t2 have 6 users each (30 > 20: the tenant binds); t3 has
	// 2 (10 < 20: the users bind).
	type user struct{ tenant, name string }
	var users []user
	for ti, n := range []int{6, 6, 6, 2} {
		for u := range n {
			users = append(users, user{fmt.Sprintf("t%d", ti), fmt.Sprintf("t%d-u%d", ti, u)})
		}
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var mu sync.Mutex
	admitted := map[string]int{}
	var refused atomic.Int64
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for i := range 20 {
				u := users[(g*7+i)%len(users)]
				resp, body := get(t, client, srv.URL, "X-User", u.name, "X-Tenant", u.tenant)
				switch resp.StatusCode {
				case 200:
					mu.Lock()
					admitted[u.name]++
					admitted[u.tenant]++
					mu.Unlock()
				case 429:
					refused.Add(1)
					p := readProblem(t, resp, body)
					if len(p.Violated) == 0 {
						t.Errorf("a refusal names no policy: %+v", p)
					}
					for _, v := range p.Violated {
						if v != "per-user" && v != "per-tenant" {
							t.Errorf("refusal names %q", v)
						}
					}
				default:
					t.Errorf("status %d: %s", resp.StatusCode, body)
				}
			}
		})
	}
	wg.Wait()
	for ti, want := range []int{tenantBurst, tenantBurst, tenantBurst, 2 * userBurst} {
		if got := admitted[fmt.Sprintf("t%d", ti)]; got != want {
			t.Errorf("tenant t%d: %d admitted, want exactly %d", ti, got, want)
		}
	}
	for _, u := range users {
		if admitted[u.name] > userBurst {
			t.Errorf("user %s: %d admitted, over its burst %d", u.name, admitted[u.name], userBurst)
		}
		if u.tenant == "t3" && admitted[u.name] != userBurst {
			t.Errorf("user %s: %d admitted, want exactly %d", u.name, admitted[u.name], userBurst)
		}
	}
	// Refusals spent nothing: each budget lacks exactly what was admitted.
	ctx := context.Background()
	for _, u := range users {
		r, err := lim.Take(ctx, "httplimit:per-user:"+u.name, userLimit, 0)
		if err != nil || r.Remaining != int64(userBurst-admitted[u.name]) {
			t.Errorf("user %s: %d left (%v), want %d: a refusal spent", u.name, r.Remaining, err, userBurst-admitted[u.name])
		}
	}
	total := 0
	for ti := range 4 {
		tn := fmt.Sprintf("t%d", ti)
		total += admitted[tn]
		r, err := lim.Take(ctx, "httplimit:per-tenant:"+tn, tenantLimit, 0)
		if err != nil || r.Remaining != int64(tenantBurst-admitted[tn]) {
			t.Errorf("tenant %s: %d left (%v), want %d: a refusal spent", tn, r.Remaining, err, tenantBurst-admitted[tn])
		}
	}
	if int64(total)+refused.Load() != 64*20 {
		t.Errorf("%d admitted + %d refused != %d", total, refused.Load(), 64*20)
	}
	st := m.Stats()
	if st[0].Allowed != uint64(total) || st[1].Allowed != uint64(total) || st[0].Refused+st[1].Refused < uint64(refused.Load()) {
		t.Errorf("stats %+v: want %d allowed on each, refusals %d attributed", st, total, refused.Load())
	}
	for _, s := range m.Stats() {
		t.Logf("%+v", s)
	}
}

func TestShadowNeverRefuses(t *testing.T) {
	c := newClock()
	m := mustNew(t, frozenLimiter(c), []httplimit.Policy{
		{Name: "enforced", Limit: sluice.PerMinute(5)},
		{Name: "shadow-a", Limit: sluice.PerMinute(1), Shadow: true},
		{Name: "shadow-b", Limit: sluice.PerMinute(2), Shadow: true, Key: httplimit.Static("all")},
	}, httplimit.WithShadowHeaders())
	srv := httptest.NewServer(m.Handler(echo))
	defer srv.Close()
	codes := map[int]int{}
	for range 10 {
		resp, _ := get(t, srv.Client(), srv.URL)
		codes[resp.StatusCode]++
		items, err := parseSFList(resp.Header.Get("RateLimit"))
		if err != nil || len(items) != 3 {
			t.Fatalf("RateLimit %q (%v): want the enforced and both shadow policies", resp.Header.Get("RateLimit"), err)
		}
	}
	if codes[200] != 5 || codes[429] != 5 {
		t.Errorf("statuses %v: want 5 admitted by the enforced policy alone, 5 refused", codes)
	}
	st := m.Stats()
	if st[0].Policy != "enforced" || st[0].Allowed != 5 || st[0].Refused != 5 {
		t.Errorf("enforced stats %+v", st[0])
	}
	// The shadow composite: 1 admitted (shadow-a's one unit), then every
	// other request refused by shadow-a (shadow-b has a unit left).
	if st[1].Policy != "shadow-a" || !st[1].Shadow || st[1].Allowed != 1 || st[1].Refused != 9 {
		t.Errorf("shadow-a stats %+v", st[1])
	}
	if st[2].Policy != "shadow-b" || st[2].Allowed != 1 || st[2].Refused != 0 {
		t.Errorf("shadow-b stats %+v", st[2])
	}

	// Shadow policies alone: nothing is ever refused.
	only := mustNew(t, frozenLimiter(c), []httplimit.Policy{{Name: "s", Limit: sluice.PerMinute(1), Shadow: true}})
	srv2 := httptest.NewServer(only.Handler(echo))
	defer srv2.Close()
	for i := range 20 {
		if resp, _ := get(t, srv2.Client(), srv2.URL); resp.StatusCode != 200 {
			t.Fatalf("shadow-only request %d: status %d", i, resp.StatusCode)
		}
	}
	if s := only.Stats()[0]; s.Allowed != 1 || s.Refused != 19 {
		t.Errorf("shadow-only stats %+v", s)
	}
}

// TestFailLocalRefuses: with Redis unreachable, a store that fails over to
// a local store decides in process, flagged Degraded; what it refuses is
// answered 429, and counted and reported as a refusal (before, it was also
// counted, and reported, as a degraded admission).
func TestFailLocalRefuses(t *testing.T) {
	store, err := redisstore.New(redistest.Unreachable(t), redisstore.WithFailurePolicy(redisstore.FailLocal), redisstore.WithTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var mu sync.Mutex
	var got []string // status, then the Events of the request
	m := mustNew(t, sluice.New(store), []httplimit.Policy{{Name: "all", Limit: sluice.PerMinute(2), Key: httplimit.Static("all")}},
		httplimit.WithObserver(observe.Func(func(e observe.Event) {
			mu.Lock()
			got = append(got, e.Outcome.String())
			mu.Unlock()
		})))
	for range 3 {
		w := httptest.NewRecorder()
		m.Handler(echo).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		mu.Lock()
		got = append(got, strconv.Itoa(w.Code))
		mu.Unlock()
	}
	if want := "[degraded 200 degraded 200 denied 429]"; fmt.Sprint(got) != want {
		t.Errorf("events and statuses %v, want %s", got, want)
	}
	if st := m.Stats()[0]; st.Degraded != 2 || st.Refused != 1 {
		t.Errorf("stats %+v, want 2 degraded admissions and 1 refusal", st)
	}
}

func TestStoreFailure(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy redisstore.FailurePolicy
		status int
	}{
		{"FailOpen", redisstore.FailOpen, 200},
		{"FailClosed", redisstore.FailClosed, 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := redistest.Unreachable(t)
			addr := client.Options().Addr
			store, err := redisstore.New(client, redisstore.WithFailurePolicy(tc.policy), redisstore.WithTimeout(500*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			var logged atomic.Int64
			m := mustNew(t, sluice.New(store), []httplimit.Policy{
				{Name: "ip", Limit: sluice.PerMinute(10)},
				{Name: "user", Limit: sluice.PerMinute(10), Key: httplimit.Header("X-User")},
			}, httplimit.WithErrorLog(func(_ *http.Request, err error) {
				if !errors.Is(err, sluice.ErrStoreUnavailable) {
					t.Errorf("logged %v, want a store outage", err)
				}
				logged.Add(1)
			}))
			srv := httptest.NewServer(m.Handler(echo))
			defer srv.Close()
			for range 3 {
				resp, body := get(t, srv.Client(), srv.URL, "X-User", "u1")
				if resp.StatusCode != tc.status {
					t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
				}
				for _, leak := range []string{addr, "dial", "refused", "redis", "sluice:", "connection"} {
					if strings.Contains(strings.ToLower(body), strings.ToLower(leak)) {
						t.Errorf("response leaks %q: %s", leak, body)
					}
				}
				if tc.status == 503 {
					p := readProblem(t, resp, body)
					if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 {
						t.Errorf("503 with Retry-After %q", resp.Header.Get("Retry-After"))
					}
					if p.Detail != "the rate limiter is unavailable" {
						t.Errorf("problem %+v", p)
					}
				} else if resp.Header.Get("RateLimit") != "" {
					t.Errorf("a degraded admission sends RateLimit %q", resp.Header.Get("RateLimit"))
				}
			}
			st := m.Stats()[0]
			if tc.policy == redisstore.FailOpen && (st.Degraded != 3 || st.Allowed != 0) {
				t.Errorf("fail open: stats %+v, want 3 degraded", st)
			}
			if tc.policy == redisstore.FailClosed && (st.Errors != 3 || logged.Load() != 3) {
				t.Errorf("fail closed: stats %+v, %d logged, want 3 errors", st, logged.Load())
			}
		})
	}
}

func TestMissingKey(t *testing.T) {
	c := newClock()
	m := mustNew(t, frozenLimiter(c), []httplimit.Policy{
		{Name: "ip", Limit: sluice.PerMinute(100)},
		{Name: "api-key", Limit: sluice.PerMinute(2), Key: httplimit.Header("X-API-Key")},
	})
	var served atomic.Int64
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1) })))
	defer srv.Close()
	resp, body := get(t, srv.Client(), srv.URL)
	if resp.StatusCode != 400 {
		t.Fatalf("no API key: status %d", resp.StatusCode)
	}
	if p := readProblem(t, resp, body); !strings.Contains(p.Detail, `"api-key"`) {
		t.Errorf("problem %+v does not name the policy", p)
	}
	if served.Load() != 0 {
		t.Error("the handler ran for a request without a key")
	}
	// Two requests with a key pass; the budget is the key's, not a shared one.
	for i := range 3 {
		resp, _ := get(t, srv.Client(), srv.URL, "X-API-Key", "k1")
		if want := map[bool]int{true: 200, false: 429}[i < 2]; resp.StatusCode != want {
			t.Errorf("k1 request %d: status %d, want %d", i, resp.StatusCode, want)
		}
	}

	// Optional: the policy does not apply.
	opt := mustNew(t, frozenLimiter(c), []httplimit.Policy{
		{Name: "ip", Limit: sluice.PerMinute(3)},
		{Name: "user", Limit: sluice.PerMinute(1), Key: httplimit.Header("X-User"), Optional: true},
	})
	srv2 := httptest.NewServer(opt.Handler(echo))
	defer srv2.Close()
	codes := map[int]int{}
	for range 4 {
		resp, _ := get(t, srv2.Client(), srv2.URL)
		codes[resp.StatusCode]++
	}
	if codes[200] != 3 || codes[429] != 1 {
		t.Errorf("anonymous under an optional policy: %v, want the ip budget alone (3 admitted)", codes)
	}

	// No peer address (a Unix socket's RemoteAddr is "@" or empty): no
	// shared empty key, a 400.
	for _, ra := range []string{"", "@", "not an address"} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = ra
		m.Handler(echo).ServeHTTP(rec, req)
		if rec.Code != 400 {
			t.Errorf("RemoteAddr %q: status %d, want 400", ra, rec.Code)
		}
	}
	if s := m.Stats()[0]; s.Missing != 3 {
		t.Errorf("ip stats %+v: want 3 missing", s)
	}
}

func TestSkip(t *testing.T) {
	c := newClock()
	m := mustNew(t, frozenLimiter(c), []httplimit.Policy{{Name: "ip", Limit: sluice.PerMinute(1)}},
		httplimit.WithSkip(func(r *http.Request) bool { return r.URL.Path == "/healthz" }))
	srv := httptest.NewServer(m.Handler(echo))
	defer srv.Close()
	for range 5 {
		if resp, _ := get(t, srv.Client(), srv.URL+"/healthz"); resp.StatusCode != 200 || resp.Header.Get("RateLimit") != "" {
			t.Fatalf("health check: status %d, RateLimit %q", resp.StatusCode, resp.Header.Get("RateLimit"))
		}
	}
	if resp, _ := get(t, srv.Client(), srv.URL+"/x"); resp.StatusCode != 200 {
		t.Errorf("first request after health checks: %d (they spent)", resp.StatusCode)
	}
	allow := mustNew(t, frozenLimiter(c), []httplimit.Policy{{Name: "ip", Limit: sluice.PerMinute(1)}},
		httplimit.WithSkip(httplimit.SkipNetworks(netip.MustParsePrefix("127.0.0.0/8"))))
	srv2 := httptest.NewServer(allow.Handler(echo))
	defer srv2.Close()
	for range 5 {
		if resp, _ := get(t, srv2.Client(), srv2.URL); resp.StatusCode != 200 {
			t.Fatalf("allow-listed network refused: %d", resp.StatusCode)
		}
	}
	if s := allow.Stats()[0]; s.Allowed != 0 {
		t.Errorf("skipped requests counted: %+v", s)
	}
}

func TestRefund(t *testing.T) {
	c := newClock()
	lim := frozenLimiter(c)
	var refundErr atomic.Value
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Taken 4, used 1.
		if err := httplimit.Refund(r.Context(), 3); err != nil {
			refundErr.Store(err)
		}
	})
	m := mustNew(t, lim, []httplimit.Policy{{Name: "tokens", Limit: sluice.PerHour(1).WithBurst(10), Cost: 4}})
	srv := httptest.NewServer(m.Handler(h))
	defer srv.Close()
	admitted := 0
	for range 10 {
		if resp, _ := get(t, srv.Client(), srv.URL); resp.StatusCode == 200 {
			admitted++
		}
	}
	if err, _ := refundErr.Load().(error); err != nil {
		t.Fatal(err)
	}
	// Each admission nets 1 unit: 10, 9, ... 4 left before admissions 1..7.
	if admitted != 7 {
		t.Errorf("%d admitted with refunds, want 7 (2 without)", admitted)
	}

	// A refund never gives back more than was spent, and a sliding window cannot
	// give back.
	var errs []error
	var emu sync.Mutex
	h2 := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		emu.Lock()
		defer emu.Unlock()
		errs = append(errs, httplimit.Refund(r.Context(), 100), httplimit.Refund(r.Context(), 100))
		errs = append(errs, httplimit.RefundPolicy(r.Context(), "nope", 1))
	})
	m2 := mustNew(t, lim, []httplimit.Policy{
		{Name: "bucket", Limit: sluice.PerHour(1).WithBurst(10), Cost: 4},
		{Name: "window", Limit: sluice.Per(10, time.Hour).WithAlgorithm(sluice.SlidingWindow), Cost: 4},
	})
	srv2 := httptest.NewServer(m2.Handler(h2))
	defer srv2.Close()
	get(t, srv2.Client(), srv2.URL)
	if len(errs) != 3 || errs[0] == nil || !strings.Contains(errs[0].Error(), `"window"`) || errs[1] == nil || !errors.Is(errs[2], httplimit.ErrNoDecision) {
		t.Errorf("refund errors %v: want the window named, and no policy nope", errs)
	}
	r, _ := lim.Take(context.Background(), "httplimit:bucket:127.0.0.1", sluice.PerHour(1).WithBurst(10), 0)
	if r.Remaining != 10 {
		t.Errorf("bucket has %d after refunds of 100 on a cost of 4: want 10", r.Remaining)
	}
	if err := httplimit.Refund(context.Background(), 1); !errors.Is(err, httplimit.ErrNoDecision) {
		t.Errorf("Refund outside a request: %v", err)
	}
}

func TestLeakyBucketDelays(t *testing.T) {
	c := newClock() // frozen: the delays are the queue's alone
	const T = 20 * time.Millisecond
	// The store's time stands still; the requests wait their turns in real
	// time.
	m := mustNew(t, frozenLimiter(c), []httplimit.Policy{{Name: "queue", Limit: sluice.Limit{Algorithm: sluice.LeakyBucket, Rate: 1, Period: T, Burst: 4}}}, httplimit.WithClock(storelink.SystemClock{}))
	var served atomic.Int64
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) })))
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 10}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var mu sync.Mutex
	codes := map[int]int{}
	var slowest time.Duration
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			start := time.Now()
			resp, _ := get(t, client, srv.URL)
			mu.Lock()
			codes[resp.StatusCode]++
			if resp.StatusCode == 200 {
				slowest = max(slowest, time.Since(start))
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if codes[200] != 5 || codes[429] != 5 || served.Load() != 5 {
		t.Errorf("statuses %v, %d served: want 5 delayed by 0..4T and 5 refused", codes, served.Load())
	}
	if testenv.Timing(t, "the last admitted request waited its turn, 4T") && slowest < 4*T {
		t.Errorf("slowest admitted request took %v, want at least %v", slowest, 4*T)
	}

	// A request whose context ends while it waits is not served.
	c2 := newClock()
	// Its store's time stands still; its wait runs in real time.
	m2 := mustNew(t, frozenLimiter(c2), []httplimit.Policy{{Name: "queue", Limit: sluice.Limit{Algorithm: sluice.LeakyBucket, Rate: 1, Period: time.Hour, Burst: 4}}}, httplimit.WithClock(storelink.SystemClock{}))
	var served2 atomic.Int64
	h := m2.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served2.Add(1) }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil)) // first: no delay
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil).WithContext(ctx)) // an hour's delay, past the deadline
	if served2.Load() != 1 || rec.Code != 503 {
		t.Errorf("served %d, status %d: want the delayed request dropped with 503", served2.Load(), rec.Code)
	}
	// No deadline, canceled while it waits.
	ctx3, cancel3 := context.WithCancel(context.Background())
	go func() { time.Sleep(10 * time.Millisecond); cancel3() }()
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil).WithContext(ctx3))
	if served2.Load() != 1 || rec.Code != 503 {
		t.Errorf("served %d, status %d: want the canceled request dropped with 503", served2.Load(), rec.Code)
	}
}

func TestPerRoutePolicies(t *testing.T) {
	c := newClock()
	lim := frozenLimiter(c)
	perRoute := mustNew(t, lim, []httplimit.Policy{{Name: "route", Limit: sluice.PerMinute(2), Key: httplimit.Join(httplimit.ClientIP(), httplimit.Route())}})
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", perRoute.Handler(echo))
	mux.Handle("GET /users/{id}", perRoute.Handler(echo))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	codes := map[string][]int{}
	for _, path := range []string{"/items/1", "/items/2", "/items/3", "/users/1", "/users/2", "/users/3"} {
		resp, _ := get(t, srv.Client(), srv.URL+path)
		route := strings.SplitN(path, "/", 3)[1]
		codes[route] = append(codes[route], resp.StatusCode)
	}
	for route, got := range codes {
		if fmt.Sprint(got) != "[200 200 429]" {
			t.Errorf("route %s: %v, want one budget of 2 per pattern", route, got)
		}
	}

	// MuxRoute: one middleware around the whole mux.
	mux2 := http.NewServeMux()
	mux2.Handle("GET /a/{id}", echo)
	mux2.Handle("GET /b", echo)
	whole := mustNew(t, lim, []httplimit.Policy{{Name: "whole", Limit: sluice.PerMinute(1), Key: httplimit.MuxRoute(mux2)}})
	srv2 := httptest.NewServer(whole.Handler(mux2))
	defer srv2.Close()
	var got []int
	for _, path := range []string{"/a/1", "/a/2", "/b", "/nowhere"} {
		resp, _ := get(t, srv2.Client(), srv2.URL+path)
		got = append(got, resp.StatusCode)
	}
	if fmt.Sprint(got) != "[200 429 200 400]" {
		t.Errorf("MuxRoute: %v, want [200 429 200 400] (no route: no key)", got)
	}
}

func TestDenyHandlerAndStatus(t *testing.T) {
	c := newClock()
	m := mustNew(t, frozenLimiter(c), []httplimit.Policy{{Name: "ip", Limit: sluice.PerMinute(1)}},
		httplimit.WithStatus(503),
		httplimit.WithDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			d, ok := httplimit.DecisionFrom(r.Context())
			if !ok || d.Allowed || len(d.Refused) != 1 {
				t.Errorf("decision %+v", d)
			}
			io.WriteString(w, "slow down: "+strings.Join(d.Refused, ","))
		})))
	srv := httptest.NewServer(m.Handler(echo))
	defer srv.Close()
	get(t, srv.Client(), srv.URL)
	resp, body := get(t, srv.Client(), srv.URL)
	if resp.StatusCode != 503 || body != "slow down: ip" || resp.Header.Get("Retry-After") != "60" {
		t.Errorf("status %d, body %q, Retry-After %q", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	lim := frozenLimiter(newClock())
	ok := sluice.PerMinute(1)
	for _, tc := range []struct {
		name string
		lim  *sluice.Limiter
		ps   []httplimit.Policy
		opts []httplimit.Option
	}{
		{"nil limiter", nil, []httplimit.Policy{{Name: "a", Limit: ok}}, nil},
		{"no policy", lim, nil, nil},
		{"no name", lim, []httplimit.Policy{{Limit: ok}}, nil},
		{"quote in name", lim, []httplimit.Policy{{Name: `a"b`, Limit: ok}}, nil},
		{"colon in name", lim, []httplimit.Policy{{Name: "a:b", Limit: ok}}, nil},
		{"two names", lim, []httplimit.Policy{{Name: "a", Limit: ok}, {Name: "a", Limit: ok}}, nil},
		{"zero limit", lim, []httplimit.Policy{{Name: "a"}}, nil},
		{"cost over capacity", lim, []httplimit.Policy{{Name: "a", Limit: ok, Cost: 2}}, nil},
		{"negative cost", lim, []httplimit.Policy{{Name: "a", Limit: ok, Cost: -1}}, nil},
		{"negative reserve", lim, []httplimit.Policy{{Name: "a", Limit: sluice.PerMinute(5), Headroom: -1}}, nil},
		{"reserve of it all", lim, []httplimit.Policy{{Name: "a", Limit: sluice.PerMinute(5), Headroom: 5, CostFunc: costHeader}}, nil},
		{"reserve over cost", lim, []httplimit.Policy{{Name: "a", Limit: sluice.PerMinute(5), Cost: 3, Headroom: 3}}, nil},
		{"status 200", lim, []httplimit.Policy{{Name: "a", Limit: ok}}, []httplimit.Option{httplimit.WithStatus(200)}},
		{"ipv6 prefix 0", lim, []httplimit.Policy{{Name: "a", Limit: ok}}, []httplimit.Option{httplimit.WithIPv6Prefix(0)}},
		{"ipv6 prefix 129", lim, []httplimit.Policy{{Name: "a", Limit: ok}}, []httplimit.Option{httplimit.WithIPv6Prefix(129)}},
		{"bad proxy", lim, []httplimit.Policy{{Name: "a", Limit: ok}}, []httplimit.Option{httplimit.WithTrustedProxies(netip.Prefix{})}},
		{"bad header", lim, []httplimit.Policy{{Name: "a", Limit: ok}}, []httplimit.Option{httplimit.WithProxyHeader("X: Y")}},
		{"bad style", lim, []httplimit.Policy{{Name: "a", Limit: ok}}, []httplimit.Option{httplimit.WithHeaders(9)}},
		{"nil deny", lim, []httplimit.Policy{{Name: "a", Limit: ok}}, []httplimit.Option{httplimit.WithDenyHandler(nil)}},
		{"zero unavailable", lim, []httplimit.Policy{{Name: "a", Limit: ok}}, []httplimit.Option{httplimit.WithUnavailableRetryAfter(0)}},
	} {
		m, err := httplimit.New(tc.lim, tc.ps, tc.opts...)
		if err == nil || m != nil {
			t.Errorf("%s: no error", tc.name)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
	}
}

func TestBadCost(t *testing.T) {
	c := newClock()
	var logged atomic.Int64
	m := mustNew(t, frozenLimiter(c), []httplimit.Policy{{Name: "bytes", Limit: sluice.PerMinute(100), CostFunc: costHeader}},
		httplimit.WithErrorLog(func(*http.Request, error) { logged.Add(1) }))
	srv := httptest.NewServer(m.Handler(echo))
	defer srv.Close()
	for _, tc := range []struct {
		cost   string
		status int
	}{{"abc", 400}, {"-5", 400}, {"101", 413}, {"100", 200}, {"1", 429}} {
		resp, body := get(t, srv.Client(), srv.URL, "X-Cost", tc.cost)
		if resp.StatusCode != tc.status {
			t.Errorf("cost %s: status %d, want %d", tc.cost, resp.StatusCode, tc.status)
		}
		if strings.Contains(body, "strconv") || strings.Contains(body, "sluice:") {
			t.Errorf("cost %s: internal text in %q", tc.cost, body)
		}
	}
	if logged.Load() != 3 {
		t.Errorf("%d errors logged, want 3", logged.Load())
	}
}

func TestHeadersOfSeveralPolicies(t *testing.T) {
	c := newClock()
	lim := frozenLimiter(c)
	bucket := sluice.PerMinute(6).WithBurst(5)
	logL := sluice.Per(3, 10*time.Second).WithAlgorithm(sluice.SlidingLog)
	m := mustNew(t, lim, []httplimit.Policy{
		{Name: "bucket", Limit: bucket},
		{Name: "log", Limit: logL, Key: httplimit.Static("all")},
	})
	srv := httptest.NewServer(m.Handler(echo))
	defer srv.Close()
	ctx := context.Background()
	refusals := 0
	for i := range 8 {
		resp, body := get(t, srv.Client(), srv.URL)
		b, _ := lim.Take(ctx, "httplimit:bucket:127.0.0.1", bucket, 0)
		l, _ := lim.Take(ctx, "httplimit:log:all", logL, 0)
		want := fmt.Sprintf(`"bucket";r=%d;t=%d, "log";r=%d;t=%d`, b.Remaining, ceilSeconds(b.ResetAfter), l.Remaining, ceilSeconds(l.ResetAfter))
		if got := resp.Header.Get("RateLimit"); got != want {
			t.Errorf("request %d: RateLimit %q, want %q", i, got, want)
		}
		if items, err := parseSFList(resp.Header.Get("RateLimit-Policy")); err != nil || len(items) != 2 ||
			items[0].Params["q"] != int64(5) || items[0].Params["w"] != int64(50) || items[1].Params["q"] != int64(3) || items[1].Params["w"] != int64(10) {
			t.Errorf("request %d: RateLimit-Policy %q (%v)", i, resp.Header.Get("RateLimit-Policy"), err)
		}
		if resp.StatusCode == 429 {
			p := readProblem(t, resp, body)
			wantV := []string{}
			if b.Remaining < 1 {
				wantV = append(wantV, "bucket")
			}
			if l.Remaining < 1 {
				wantV = append(wantV, "log")
			}
			if fmt.Sprint(p.Violated) != fmt.Sprint(wantV) {
				t.Errorf("request %d: violated %v, want %v", i, p.Violated, wantV)
			}
		}
		if resp.StatusCode == 429 {
			refusals++
		}
		c.Add(2 * time.Second)
	}
	if refusals == 0 {
		t.Error("no refusal: the log (3 per 10s) should refuse requests 2s apart")
	}
}

func TestShadowPolicyNeverAnswers(t *testing.T) {
	c := newClock()
	m := mustNew(t, frozenLimiter(c), []httplimit.Policy{
		{Name: "s-key", Limit: sluice.PerMinute(1), Key: httplimit.Header("X-User"), Shadow: true},
		{Name: "s-cost", Limit: sluice.PerMinute(1), CostFunc: costHeader, Shadow: true},
	})
	srv := httptest.NewServer(m.Handler(echo))
	defer srv.Close()
	for i := range 5 {
		if resp, body := get(t, srv.Client(), srv.URL, "X-Cost", "bad"); resp.StatusCode != 200 {
			t.Fatalf("request %d without a shadow key and with a bad shadow cost: %d %s", i, resp.StatusCode, body)
		}
	}
	st := m.Stats()
	if st[0].Missing != 5 || st[1].Errors != 5 {
		t.Errorf("stats %+v: want 5 missing keys and 5 cost errors counted", st)
	}
}

type userKey struct{}

func TestKeysFromContextAndJoin(t *testing.T) {
	c := newClock()
	m := mustNew(t, frozenLimiter(c), []httplimit.Policy{{Name: "user-route", Limit: sluice.PerMinute(1),
		Key: httplimit.Join(httplimit.FromContext(userKey{}), httplimit.Header("X-Part"))}})
	auth := func(next http.Handler) http.Handler { // an auth middleware before the limiter
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u := r.Header.Get("X-Auth-User"); u != "" {
				r = r.WithContext(context.WithValue(r.Context(), userKey{}, u))
			}
			next.ServeHTTP(w, r)
		})
	}
	srv := httptest.NewServer(auth(m.Handler(echo)))
	defer srv.Close()
	// "a|b" + "c" and "a" + "b|c" must not share a key.
	for i, hdr := range [][]string{
		{"X-Auth-User", "a|b", "X-Part", "c"},
		{"X-Auth-User", "a", "X-Part", "b|c"},
		{"X-Auth-User", "a%7Cb", "X-Part", "c"},
	} {
		if resp, _ := get(t, srv.Client(), srv.URL, hdr...); resp.StatusCode != 200 {
			t.Errorf("request %d (%q): status %d: joined keys collided", i, hdr, resp.StatusCode)
		}
	}
	if resp, _ := get(t, srv.Client(), srv.URL, "X-Auth-User", "a", "X-Part", "b|c"); resp.StatusCode != 429 {
		t.Errorf("the same user and part again: status %d, want 429", resp.StatusCode)
	}
	if resp, _ := get(t, srv.Client(), srv.URL, "X-Part", "c"); resp.StatusCode != 400 {
		t.Errorf("no identity: status %d, want 400", resp.StatusCode)
	}
}

func TestOddInputsNeverPanic(t *testing.T) {
	m := mustNew(t, frozenLimiter(newClock()), []httplimit.Policy{{Name: "ip", Limit: sluice.PerMinute(100)}},
		httplimit.WithTrustedProxies(netip.MustParsePrefix("fe80::/10")))
	rec := httptest.NewRecorder()
	m.Handler(nil).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 500 {
		t.Errorf("Handler(nil): status %d", rec.Code)
	}
	// A zoned link-local peer is matched by its prefix and its forwarded
	// client read.
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "[fe80::1%eth0]:443"
	req.Header.Set("X-Forwarded-For", "203.0.113.1")
	rec = httptest.NewRecorder()
	m.Handler(echo).ServeHTTP(rec, req)
	if got := rec.Header().Get("X-Client-Key"); got != "203.0.113.1" {
		t.Errorf("zoned trusted peer: key %q", got)
	}
	// Odd forwarding headers.
	for _, v := range []string{",,,", `"`, `for="[::1`, strings.Repeat("1.2.3.4, ", 1000), "\x00"} {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = "[fe80::1]:443"
		req.Header.Set("X-Forwarded-For", v)
		req.Header.Set("Forwarded", v)
		rec := httptest.NewRecorder()
		m.Handler(echo).ServeHTTP(rec, req)
		if rec.Code != 200 {
			t.Errorf("X-Forwarded-For %.20q: status %d", v, rec.Code)
		}
	}
}

// FuzzForwardingHeaders: whatever a client sends, the key is an address or
// an IPv6 prefix, never an error or a panic, and an untrusted peer is keyed
// on itself.
func FuzzForwardingHeaders(f *testing.F) {
	f.Add("203.0.113.7, 10.0.0.1", `for=192.0.2.60;proto=http, for="[2001:db8::1]:4711"`, true)
	f.Add("unknown", `for=_hidden, for="\"`, false)
	f.Add(",", ";;;=", true)
	lim := sluice.New(memstore.New())
	trusted := mustNew(f, lim, []httplimit.Policy{{Name: "ip", Limit: sluice.PerSecond(1 << 20)}},
		httplimit.WithTrustedProxies(netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8")))
	fwd := mustNew(f, lim, []httplimit.Policy{{Name: "ip", Limit: sluice.PerSecond(1 << 20)}},
		httplimit.WithTrustedProxies(netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8")), httplimit.WithProxyHeader("Forwarded"))
	untrusted := mustNew(f, lim, []httplimit.Policy{{Name: "ip", Limit: sluice.PerSecond(1 << 20)}})
	f.Fuzz(func(t *testing.T, xff, forwarded string, _ bool) {
		for i, m := range []*httplimit.Middleware{trusted, fwd, untrusted} {
			req := httptest.NewRequest("GET", "/", nil)
			req.RemoteAddr = "127.0.0.1:1234"
			req.Header["X-Forwarded-For"] = []string{xff}
			req.Header["Forwarded"] = []string{forwarded}
			rec := httptest.NewRecorder()
			m.Handler(echo).ServeHTTP(rec, req)
			key := rec.Header().Get("X-Client-Key")
			if rec.Code != 200 {
				t.Fatalf("middleware %d: status %d", i, rec.Code)
			}
			if _, err := netip.ParseAddr(key); err != nil {
				if p, err := netip.ParsePrefix(key); err != nil || p.Bits() != 64 {
					t.Fatalf("middleware %d: key %q is not an address or a /64", i, key)
				}
			}
			if i == 2 && key != "127.0.0.1" {
				t.Fatalf("untrusted peer keyed on %q", key)
			}
		}
	})
}

// TestWithoutDecisionContext: the next handler gets the request as it came
// (no decision, no refund), while the key functions and the deny handler
// still see the decision and the trusted proxies.
func TestWithoutDecisionContext(t *testing.T) {
	lim := frozenLimiter(newClock())
	var nextSaw, denySaw atomic.Value
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, ok := httplimit.DecisionFrom(r.Context())
		err := httplimit.Refund(r.Context(), 1)
		a, _ := httplimit.ClientAddr(r)
		nextSaw.Store(fmt.Sprint(ok, errors.Is(err, httplimit.ErrNoDecision), a))
	})
	deny := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, ok := httplimit.DecisionFrom(r.Context())
		denySaw.Store(fmt.Sprint(ok, d != nil && !d.Allowed && len(d.Refused) == 1))
	})
	ps := []httplimit.Policy{{Name: "ip", Limit: sluice.PerHour(2), Key: httplimit.Join(httplimit.ClientIP(), httplimit.Static("k"))}}
	m := mustNew(t, lim, ps, httplimit.WithoutDecisionContext(), httplimit.WithDenyHandler(deny),
		httplimit.WithTrustedProxies(netip.MustParsePrefix("127.0.0.0/8")))
	srv := httptest.NewServer(m.Handler(next))
	defer srv.Close()
	for range 2 {
		if resp, _ := get(t, srv.Client(), srv.URL, "X-Forwarded-For", "203.0.113.9"); resp.StatusCode != 200 {
			t.Fatalf("status %d, want 200", resp.StatusCode)
		}
	}
	if got := nextSaw.Load(); got != "false true 127.0.0.1" {
		t.Errorf("next handler saw %v: want no decision, ErrNoDecision and the peer address", got)
	}
	// The key function resolved the forwarded client: its budget is spent,
	// the peer's is not.
	r, err := lim.Take(context.Background(), "httplimit:ip:203.0.113.9|k", sluice.PerHour(2), 0)
	if err != nil || r.Remaining != 0 {
		t.Errorf("forwarded client's budget: %+v %v, want 0 left", r, err)
	}
	if resp, _ := get(t, srv.Client(), srv.URL, "X-Forwarded-For", "203.0.113.9"); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third request: status %d, want 429", resp.StatusCode)
	}
	if got := denySaw.Load(); got != "true true" {
		t.Errorf("deny handler saw %v: want the decision", got)
	}
}

// A handler that runs across a fixed window's end gives nothing back to the
// next window: its units were spent in the one that ended. Before, the next
// window admitted 20 of 10. Both paths: one policy (the request's state
// keeps its one result) and a composite of two.
func TestRefundAcrossWindowEnd(t *testing.T) {
	for _, ps := range [][]httplimit.Policy{
		{{Name: "window", Limit: sluice.PerMinute(10).WithAlgorithm(sluice.FixedWindow), Cost: 10}},
		{{Name: "window", Limit: sluice.PerMinute(10).WithAlgorithm(sluice.AlignedWindow), Cost: 10},
			{Name: "bucket", Limit: sluice.PerSecond(1000).WithBurst(1000)}},
	} {
		c := newClock()
		m := mustNew(t, frozenLimiter(c), ps)
		var srv *httptest.Server
		var nested, refundErr atomic.Value
		srv = httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/long" {
				return
			}
			c.Add(time.Minute) // the next window: another request spends its 10
			resp, _ := get(t, srv.Client(), srv.URL+"/quick")
			nested.Store(resp.StatusCode)
			if err := httplimit.Refund(r.Context(), 10); err != nil {
				refundErr.Store(err)
			}
		})))
		if resp, _ := get(t, srv.Client(), srv.URL+"/long"); resp.StatusCode != 200 {
			t.Fatalf("%s: first request %d", ps[0].Limit, resp.StatusCode)
		}
		if code, _ := nested.Load().(int); code != 200 {
			t.Fatalf("%s: the next window's request %d, want 200", ps[0].Limit, code)
		}
		if err, _ := refundErr.Load().(error); err != nil {
			t.Fatalf("%s: refund: %v", ps[0].Limit, err)
		}
		if resp, _ := get(t, srv.Client(), srv.URL+"/quick"); resp.StatusCode != 429 {
			t.Errorf("%s: after a refund of the ended window's units: %d, want 429 (the window holds 10 of 10)", ps[0].Limit, resp.StatusCode)
		}
		srv.Close()
	}
}
