package httplimit_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/observe"
)

// frozenClock is a sluice.Clock that stands still.
type frozenClock time.Time

func (c frozenClock) Now() time.Time { return time.Time(c) }

func (frozenClock) Sleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

// Two budgets on one API, decided as one: 3 requests a minute per client IP,
// and 100 a minute per API key. The fourth request is refused with 429, a
// Retry-After and the RateLimit headers of both policies.
func ExampleNew() {
	// A frozen clock keeps the output stable.
	lim := sluice.New(memstore.New(memstore.WithClock(frozenClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))))

	m, err := httplimit.New(lim, []httplimit.Policy{
		{Name: "per-ip", Limit: sluice.PerMinute(3)},
		{Name: "per-key", Limit: sluice.PerMinute(100), Key: httplimit.Header("X-API-Key")},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello\n")
	})
	srv := httptest.NewServer(m.Handler(mux))
	defer srv.Close()

	for i := 1; i <= 4; i++ {
		req, _ := http.NewRequest("GET", srv.URL+"/hello", nil)
		req.Header.Set("X-API-Key", "k-123")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit"))
		if resp.StatusCode == http.StatusTooManyRequests {
			fmt.Println("Retry-After:", resp.Header.Get("Retry-After"))
			fmt.Println("RateLimit-Policy:", resp.Header.Get("RateLimit-Policy"))
			fmt.Print(string(body))
		}
	}
	// Output:
	// 200 "per-ip";r=2;t=20, "per-key";r=99;t=1
	// 200 "per-ip";r=1;t=40, "per-key";r=98;t=2
	// 200 "per-ip";r=0;t=60, "per-key";r=97;t=2
	// 429 "per-ip";r=0;t=60, "per-key";r=97;t=2
	// Retry-After: 20
	// RateLimit-Policy: "per-ip";q=3;w=60, "per-key";q=100;w=60
	// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"refused by policy \"per-ip\"; retry in 20s","violated-policies":["per-ip"]}
}

// An API client that keeps to 2 calls a second per host (bursts of 2),
// whatever its callers do. The third call waits for its turn; a 429 with
// Retry-After from the API would hold the host for every client sharing the
// store.
func ExampleNewTransport() {
	lim := sluice.New(memstore.New())
	t, err := httplimit.NewTransport(lim, []httplimit.Policy{
		{Name: "per-host", Limit: sluice.PerSecond(2)},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "pong")
	}))
	defer api.Close()
	client := &http.Client{Transport: t}

	start := time.Now()
	for range 3 {
		resp, err := client.Get(api.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode)
	}
	fmt.Println("the third call waited:", time.Since(start) >= 400*time.Millisecond)
	// Output:
	// 200
	// 200
	// 200
	// the third call waited: true
}

// Every policy's outcome of every request, reported to an observer: here a
// function that prints them (package promobserve counts them in Prometheus
// metrics instead). The second request is refused by "per-ip"; "per-key",
// which would have granted it, reports nothing for it.
func ExampleWithObserver() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // a frozen clock keeps the output stable
	lim := sluice.New(memstore.New(memstore.WithClock(frozenClock(now))))
	show := observe.Func(func(e observe.Event) {
		fmt.Println(e.Source, e.Policy, e.Outcome, "store call", e.Latency > 0)
	})
	m, err := httplimit.New(lim, []httplimit.Policy{
		{Name: "per-ip", Limit: sluice.PerMinute(1)},
		{Name: "per-key", Limit: sluice.PerMinute(100), Key: httplimit.Header("X-API-Key")},
		{Name: "trial", Limit: sluice.PerMinute(1), Key: httplimit.Header("X-API-Key"), Shadow: true},
	}, httplimit.WithObserver(show))
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	for range 2 {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.Header.Set("X-API-Key", "k-123")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println("->", resp.StatusCode)
	}
	// Output:
	// http per-ip allowed store call true
	// http per-key allowed store call true
	// http trial allowed store call true
	// -> 200
	// http per-ip denied store call true
	// http trial shadow_denied store call true
	// -> 429
}
