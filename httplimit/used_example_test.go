package httplimit_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/memstore"
)

// An LLM endpoint limited to 10,000 tokens a minute per API key. A request
// takes an estimate of 500 before the handler; the handler says what it
// used in X-Tokens-Used, and the key is settled to that: 4000 charges
// 3,500 more, 100 gives 400 back. A key charged past its budget owes up to
// Debt tokens, and is refused until it has paid them.
func ExampleUsed() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // a frozen clock keeps the output stable
	lim := sluice.New(memstore.New(memstore.WithClock(frozenClock(now))))
	tpm := sluice.PerMinute(10_000)
	tpm.Debt = 5000
	m, err := httplimit.New(lim, []httplimit.Policy{{
		Name: "tpm", Limit: tpm, Key: httplimit.Header("X-API-Key"),
		Cost: 500, // the estimate
		Used: &httplimit.Used{Header: "X-Tokens-Used"},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Tokens-Used", r.URL.Query().Get("used")) // what the model reported
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, used := range []string{"4000", "100", "9000", "10"} {
		req, _ := http.NewRequest("GET", srv.URL+"?used="+used, nil)
		req.Header.Set("X-API-Key", "k-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		left, _ := lim.Take(context.Background(), "httplimit:tpm:k-1", tpm, 0)
		fmt.Printf("%d (said %s): %d tokens left\n", resp.StatusCode, used, left.Remaining)
	}
	// Output:
	// 200 (said 4000): 6000 tokens left
	// 200 (said 100): 5900 tokens left
	// 200 (said 9000): -3100 tokens left
	// 429 (said 10): -3100 tokens left
}

// A handler that streams, and charges as it goes: each event's tokens,
// added to what the request used. The request is settled when the handler
// returns, a client that left mid-stream included.
func ExampleCharge() {
	lim := sluice.New(memstore.New())
	m, err := httplimit.New(lim, []httplimit.Policy{{
		Name: "tpm", Limit: sluice.PerMinute(10_000), Key: httplimit.Static("all"), Cost: 100,
		Used: &httplimit.Used{}, // only what the handler charges
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, tokens := range []int64{12, 30, 7} {
			fmt.Fprintf(w, "data: {\"tokens\":%d}\n\n", tokens)
			w.(http.Flusher).Flush()
			if err := httplimit.Charge(r.Context(), tokens); err != nil {
				return
			}
		}
	}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/stream", nil))
	left, _ := lim.Take(context.Background(), "httplimit:tpm:all", sluice.PerMinute(10_000), 0)
	fmt.Println(strings.Count(w.Body.String(), "data:"), "events;", 10_000-left.Remaining, "tokens spent")
	// Output:
	// 3 events; 49 tokens spent
}

// Counting by outcome: 5 failed logins a minute per client. Successful
// logins never count; after the fifth failure every login is refused
// until one more failure could count (Retry-After: 12s at 5 a minute).
func Example_failedLogins() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // a frozen clock keeps the output stable
	lim := sluice.New(memstore.New(memstore.WithClock(frozenClock(now))))
	m, err := httplimit.New(lim, []httplimit.Policy{{
		Name: "failed-logins", Limit: sluice.PerMinute(5),
		Count: func(status int) bool { return status == http.StatusUnauthorized || status == http.StatusForbidden },
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	login := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("password") != "secret" {
			http.Error(w, "wrong password", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, "welcome\n")
	}))
	try := func(password string) {
		w := httptest.NewRecorder()
		login.ServeHTTP(w, httptest.NewRequest("POST", "/login?password="+password, nil))
		if ra := w.Header().Get("Retry-After"); ra != "" {
			fmt.Println(password, w.Code, "Retry-After:", ra)
			return
		}
		fmt.Println(password, w.Code)
	}
	for range 3 {
		try("secret")
	}
	for range 5 {
		try("guess")
	}
	try("secret")
	// Output:
	// secret 200
	// secret 200
	// secret 200
	// guess 401
	// guess 401
	// guess 401
	// guess 401
	// guess 401
	// secret 429 Retry-After: 12
}

// A client that keeps to a provider's 100,000 tokens a minute across all
// its processes (one Redis for them all; memory here): each call takes an
// estimate of 1000 tokens, and is settled to the usage the provider
// reports in its streamed answer's last event.
func ExampleNewTransport_usage() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // a frozen clock keeps the output stable
	lim := sluice.New(memstore.New(memstore.WithClock(frozenClock(now))))
	tpm := sluice.PerMinute(100_000)
	t, err := httplimit.NewTransport(lim, []httplimit.Policy{{
		Name: "tpm", Limit: tpm, Key: httplimit.Static("provider"), Cost: 1000,
		Used: &httplimit.Used{JSON: []string{"usage", "total_tokens"}},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"Hello\"}}],\"usage\":null}\n\n")
		io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":1,\"total_tokens\":10}}\n\n")
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	defer provider.Close()
	resp, err := (&http.Client{Transport: t}).Get(provider.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	io.Copy(io.Discard, resp.Body) // the stream, passed through as it comes; settled at its end
	resp.Body.Close()
	left, _ := lim.Take(context.Background(), "httplimit-out:tpm:provider", tpm, 0)
	fmt.Println(100_000-left.Remaining, "tokens spent")
	// Output:
	// 10 tokens spent
}
