package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/memstore"
)

// stepClock is a frozen clock whose Sleep moves it on: waits take no real
// time and their lengths are exact.
type stepClock struct{ *testenv.Clock }

func (c stepClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Add(d)
	return nil
}

// upstream answers with the statuses and Retry-Afters of script in turn (200
// once it runs out) and records the clock's time of each request.
type upstream struct {
	mu     sync.Mutex
	clock  *testenv.Clock
	script []string // "429 3", "503 <http-date>", "200"
	seen   []time.Duration
	start  time.Time
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.seen = append(u.seen, u.clock.Now().Sub(u.start))
	if len(u.script) == 0 {
		return
	}
	var code int
	var ra string
	fmt.Sscanf(u.script[0], "%d", &code)
	if len(u.script[0]) > 4 {
		ra = u.script[0][4:]
	}
	u.script = u.script[1:]
	if ra != "" {
		w.Header().Set("Retry-After", ra)
	}
	w.WriteHeader(code)
}

func (u *upstream) times() []time.Duration {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]time.Duration(nil), u.seen...)
}

func newTransport(t *testing.T, lim *sluice.Limiter, ps []httplimit.Policy, opts ...httplimit.TransportOption) *http.Client {
	t.Helper()
	tr, err := httplimit.NewTransport(lim, ps, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: tr}
}

func status(t *testing.T, c *http.Client, url string) int {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestTransportWaitsForItsPolicies(t *testing.T) {
	c := newClock()
	sc := stepClock{c}
	lim := sluice.New(memstore.New(memstore.WithClock(sc)))
	up := &upstream{clock: c, start: c.Now()}
	srv := httptest.NewServer(up)
	defer srv.Close()
	client := newTransport(t, lim, []httplimit.Policy{
		{Name: "global", Limit: sluice.PerSecond(1).WithBurst(2), Key: httplimit.Static("all")},
		{Name: "per-host", Limit: sluice.PerMinute(100)},
	}, httplimit.WithHoldClock(sc))
	for range 5 {
		if s := status(t, client, srv.URL); s != 200 {
			t.Fatalf("status %d", s)
		}
	}
	if got, want := fmt.Sprint(up.times()), "[0s 0s 1s 2s 3s]"; got != want {
		t.Errorf("upstream saw requests at %s, want %s (burst 2, then 1/s)", got, want)
	}
}

func TestTransportHoldsTheHostForEveryCaller(t *testing.T) {
	c := newClock()
	sc := stepClock{c}
	lim := sluice.New(memstore.New(memstore.WithClock(sc)))
	date := c.Now().Add(10 * time.Second).Format(http.TimeFormat)
	up := &upstream{clock: c, start: c.Now(), script: []string{"429 3", "200", "503 " + date, "200", "429 99999", "200"}}
	srv := httptest.NewServer(up)
	defer srv.Close()
	// Two callers, one store: a Retry-After one of them saw holds both.
	a := newTransport(t, lim, nil, httplimit.WithHoldClock(sc), httplimit.WithMaxHold(time.Minute))
	b := newTransport(t, lim, nil, httplimit.WithHoldClock(sc), httplimit.WithMaxHold(time.Minute))
	want := []int{429, 200, 503, 200, 429, 200}
	for i, cl := range []*http.Client{a, b, a, b, b, a} {
		if s := status(t, cl, srv.URL); s != want[i] {
			t.Fatalf("request %d: status %d, want %d", i, s, want[i])
		}
	}
	// 429 at 0 with Retry-After 3: the other caller waits to 3s; 503 there
	// with a date 10s after the start: held to 10s; 429 with 99999s: held
	// for WithMaxHold's minute.
	if got, want := fmt.Sprint(up.times()), "[0s 3s 3s 10s 10s 1m10s]"; got != want {
		t.Errorf("upstream saw requests at %s, want %s", got, want)
	}
}

func TestTransportHoldBoundedByTheContext(t *testing.T) {
	lim := sluice.New(memstore.New()) // the real clock: the deadline is real
	var calls int
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		mu.Unlock()
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(429)
	}))
	defer srv.Close()
	client := newTransport(t, lim, []httplimit.Policy{{Name: "host", Limit: sluice.PerMinute(100)}})
	if s := status(t, client, srv.URL); s != 429 {
		t.Fatalf("status %d", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	_, err := client.Do(req)
	if !errors.Is(err, sluice.ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("held request: %v, want sluice.ErrDeadline at once", err)
	}
	if calls != 1 {
		t.Errorf("the upstream was called %d times, want once (the held call is not sent)", calls)
	}
	// The rate-limit policy is bounded the same way, and spends nothing.
	lim2 := sluice.New(memstore.New())
	c2 := newTransport(t, lim2, []httplimit.Policy{{Name: "slow", Limit: sluice.PerHour(1), Key: httplimit.Static("x")}})
	srv2 := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv2.Close()
	if s := status(t, c2, srv2.URL); s != 200 {
		t.Fatalf("status %d", s)
	}
	req2, _ := http.NewRequestWithContext(ctx, "GET", srv2.URL, nil)
	if _, err := c2.Do(req2); !errors.Is(err, sluice.ErrDeadline) {
		t.Errorf("over the limit: %v, want sluice.ErrDeadline", err)
	}
}

func TestNewTransportRejectsBadInput(t *testing.T) {
	lim := sluice.New(memstore.New())
	for _, tc := range []struct {
		name string
		lim  *sluice.Limiter
		ps   []httplimit.Policy
		opts []httplimit.TransportOption
	}{
		{"nil limiter", nil, nil, nil},
		{"shadow", lim, []httplimit.Policy{{Name: "a", Limit: sluice.PerSecond(1), Shadow: true}}, nil},
		{"bad limit", lim, []httplimit.Policy{{Name: "a"}}, nil},
		{"nil base", lim, nil, []httplimit.TransportOption{httplimit.WithBase(nil)}},
		{"max hold 0", lim, nil, []httplimit.TransportOption{httplimit.WithMaxHold(0)}},
		// A policy "hold" keyed on the host would share the hold's store key.
		{"the holds' name", lim, []httplimit.Policy{{Name: "hold", Limit: sluice.PerSecond(1)}}, nil},
		{"':' in a name", lim, []httplimit.Policy{{Name: "hold:x", Limit: sluice.PerSecond(1)}}, nil},
	} {
		if tr, err := httplimit.NewTransport(tc.lim, tc.ps, tc.opts...); err == nil || tr != nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}
