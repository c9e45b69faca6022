package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/observe"
)

// BenchmarkMiddleware measures the middleware's own cost in process (no
// network): one policy, and a two-policy composite whose headers need a
// look at each policy; each with no observer and with one that counts.
func BenchmarkMiddleware(b *testing.B) {
	var events atomic.Int64
	counter := observe.Func(func(observe.Event) { events.Add(1) })
	for _, tc := range []struct {
		name string
		ps   []httplimit.Policy
	}{
		{"one-policy", []httplimit.Policy{{Name: "ip", Limit: sluice.PerSecond(1 << 30)}}},
		{"two-policies", []httplimit.Policy{
			{Name: "ip", Limit: sluice.PerSecond(1 << 30)},
			{Name: "user", Limit: sluice.PerSecond(1 << 30), Key: httplimit.Header("X-User")},
		}},
	} {
		for _, obs := range []struct {
			name string
			o    observe.Observer
		}{{"", nil}, {"/observer", counter}} {
			benchMiddleware(b, tc.name+obs.name, tc.ps, httplimit.WithObserver(obs.o))
		}
	}
	// Behind a trusted proxy: the X-Forwarded-For walk.
	benchMiddleware(b, "one-policy/trusted-proxy", []httplimit.Policy{{Name: "ip", Limit: sluice.PerSecond(1 << 30)}},
		httplimit.WithTrustedProxies(netip.MustParsePrefix("192.0.2.0/24")))
}

// BenchmarkMiddlewareUsed measures charging from a response header: one
// policy whose handler says X-Tokens-Used, read (Used) or not; what it
// says is the estimate (nothing to settle) or 3 times it (the difference
// charged: a second store call).
func BenchmarkMiddlewareUsed(b *testing.B) {
	says := func(n string) http.Handler {
		v := []string{n}
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Header()["X-Tokens-Used"] = v })
	}
	plain := []httplimit.Policy{{Name: "tok", Limit: sluice.PerSecond(1 << 30), Cost: 100}}
	used := []httplimit.Policy{{Name: "tok", Limit: sluice.PerSecond(1 << 30), Cost: 100, Used: &httplimit.Used{Header: "X-Tokens-Used"}}}
	benchHandler(b, "bare", nil, says("100")) // no middleware: the handler's own cost
	benchHandler(b, "unread", plain, says("100"))
	benchHandler(b, "used-as-estimated", used, says("100"))
	benchHandler(b, "used-more", used, says("300"))
}

func benchMiddleware(b *testing.B, name string, ps []httplimit.Policy, opts ...httplimit.Option) {
	benchHandler(b, name, ps, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), opts...)
}

func benchHandler(b *testing.B, name string, ps []httplimit.Policy, next http.Handler, opts ...httplimit.Option) {
	b.Run(name, func(b *testing.B) {
		h := next
		if ps != nil {
			m, err := httplimit.New(sluice.New(memstore.New()), ps, opts...)
			if err != nil {
				b.Fatal(err)
			}
			h = m.Handler(next)
		}
		reqs := make([]*http.Request, 256)
		for i := range reqs {
			reqs[i] = httptest.NewRequest("GET", "/", nil)
			reqs[i].RemoteAddr = "192.0.2." + strconv.Itoa(i) + ":1234"
			reqs[i].Header.Set("X-User", "u"+strconv.Itoa(i))
			reqs[i].Header.Set("X-Forwarded-For", "198.51.100.1, 203.0.113."+strconv.Itoa(i)+", 192.0.2.9")
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, reqs[i%len(reqs)])
			if w.Code != 200 {
				b.Fatalf("status %d", w.Code)
			}
		}
	})
}
