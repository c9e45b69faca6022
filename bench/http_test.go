package bench

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/didip/tollbooth/v7"
	"github.com/go-chi/httprate"
	"github.com/sethvargo/go-limiter/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"
	ulule "github.com/ulule/limiter/v3"
	ululestdlib "github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"

	"github.com/sluice-go/sluice"
	sluicehttp "github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/memstore"
)

// okHandler is the trivial handler every middleware wraps: it writes nothing,
// so the recorder answers 200.
var okHandler = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})

// httpLib wraps okHandler in one library's middleware, keyed on the client
// IP (the request's RemoteAddr) and set to Rate and Burst.
type httpLib struct {
	name string
	wrap func(tb testing.TB, next http.Handler) http.Handler
}

// httpLibs lists the middlewares: Baseline (no middleware) first, then
// sluice, then the peers (HTTPLibs in bench.go describes their set-up).
var httpLibs = []httpLib{
	{Baseline, func(_ testing.TB, next http.Handler) http.Handler { return next }},
	{Ref, func(tb testing.TB, next http.Handler) http.Handler {
		m, err := sluicehttp.New(sluice.New(memstore.New()), []sluicehttp.Policy{
			{Name: "ip", Limit: sluice.PerSecond(Rate).WithBurst(Burst)},
		})
		if err != nil {
			tb.Fatal(err)
		}
		return m.Handler(next)
	}},
	{Ref + "-bare", func(tb testing.TB, next http.Handler) http.Handler {
		// sluice with WithoutDecisionContext: the next handler gets the
		// request unchanged, as the peers pass it (no Refund or
		// DecisionFrom there). A variant of sluice, not a peer.
		m, err := sluicehttp.New(sluice.New(memstore.New()), []sluicehttp.Policy{
			{Name: "ip", Limit: sluice.PerSecond(Rate).WithBurst(Burst)},
		}, sluicehttp.WithoutDecisionContext())
		if err != nil {
			tb.Fatal(err)
		}
		return m.Handler(next)
	}},
	{"httprate", func(_ testing.TB, next http.Handler) http.Handler {
		// httprate's own KeyByIP, which it deprecates only to make the
		// trust model explicit: RemoteAddr's host, IPv6 by /64.
		byIP := func(r *http.Request) (string, error) {
			ip, _, err := net.SplitHostPort(r.RemoteAddr)
			if err != nil {
				ip = r.RemoteAddr
			}
			return httprate.CanonicalizeIP(ip), nil
		}
		return httprate.LimitBy(Burst, Window, byIP)(next)
	}},
	{"sethvargo", func(tb testing.TB, next http.Handler) http.Handler {
		st, err := memorystore.New(&memorystore.Config{Tokens: Burst, Interval: Window})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = st.Close(ctx) })
		m, err := httplimit.NewMiddleware(st, httplimit.IPKeyFunc())
		if err != nil {
			tb.Fatal(err)
		}
		return m.Handle(next)
	}},
	{"tollbooth", func(_ testing.TB, next http.Handler) http.Handler {
		lmt := tollbooth.NewLimiter(Rate, nil).
			SetBurst(Burst).
			SetIPLookups([]string{"RemoteAddr"}). // the peer address only, as the others
			SetIgnoreURL(true)                    // one key per IP, not per IP and path
		return tollbooth.LimitHandler(lmt, next)
	}},
	{"ulule", func(_ testing.TB, next http.Handler) http.Handler {
		lim := ulule.New(ululemem.NewStore(), ulule.Rate{Period: Window, Limit: Burst})
		return ululestdlib.NewMiddleware(lim).Handler(next)
	}},
}

// httpClients is the number of client addresses the requests cycle through:
// each sees far less than its limit, so every request passes.
const httpClients = 256

func httpRequests() []*http.Request {
	reqs := make([]*http.Request, httpClients)
	for i := range reqs {
		reqs[i] = httptest.NewRequest("GET", "/", nil)
		reqs[i].RemoteAddr = "192.0.2." + strconv.Itoa(i) + ":1234"
	}
	return reqs
}

// BenchmarkHTTP measures each middleware's cost per admitted request in
// process: okHandler behind it, a fresh httptest.ResponseRecorder per
// request, the requests' RemoteAddr cycling through httpClients addresses
// (each touched once before the timer starts). The Baseline row is
// okHandler alone: a middleware's overhead is its ns/op (allocs/op) minus
// the baseline's.
func BenchmarkHTTP(b *testing.B) {
	for _, l := range httpLibs {
		b.Run(l.name, func(b *testing.B) {
			h := l.wrap(b, okHandler)
			reqs := httpRequests()
			for _, r := range reqs {
				h.ServeHTTP(httptest.NewRecorder(), r)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, reqs[i%len(reqs)])
				if w.Code != http.StatusOK {
					b.Fatalf("status %d", w.Code)
				}
			}
		})
	}
}

// TestHTTPSameLimit checks that every middleware admits a burst of Burst
// requests from one fresh client at once and refuses past what the refill
// allows, so that BenchmarkHTTP holds them to one limit.
func TestHTTPSameLimit(t *testing.T) {
	for _, l := range httpLibs[1:] {
		t.Run(l.name, func(t *testing.T) {
			h := l.wrap(t, okHandler)
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = "198.51.100.7:4321"
			start := time.Now()
			n := 0
			for range 3 * Burst {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code == http.StatusOK {
					n++
				}
			}
			elapsed := time.Since(start)
			most := Burst + max(int(elapsed.Seconds()*Rate)+1, Burst*(1+int(elapsed/Window)))
			if n < Burst || n > most {
				t.Errorf("%d of %d passed in %v, want %d to %d", n, 3*Burst, elapsed, Burst, most)
			}
		})
	}
}
