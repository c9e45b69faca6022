package httplimit_test

import (
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
	"github.com/sluice-go/sluice/observe"
)

// outcomes records the Events of a door.
type outcomes struct {
	mu sync.Mutex
	os []observe.Outcome
}

func (o *outcomes) Observe(e observe.Event) {
	o.mu.Lock()
	o.os = append(o.os, e.Outcome)
	o.mu.Unlock()
}

func (o *outcomes) count(x observe.Outcome) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, y := range o.os {
		if y == x {
			n++
		}
	}
	return n
}

func getAs(h http.Handler, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "/export", nil)
	r.Header.Set("X-Account", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestConcurrentHoldsForTheWholeRun: two handlers of an account run at
// once, a third is refused 429 with a Retry-After of the held leases'
// lifetime (rounded up), and a slot is free again once a handler ends;
// another account is not affected.
func TestConcurrentHoldsForTheWholeRun(t *testing.T) {
	clock := testenv.NewClock()
	lim := sluice.New(memstore.New(memstore.WithClock(clock)))
	obs := new(outcomes)
	c, err := httplimit.NewConcurrent(lim, httplimit.ConcurrencyPolicy{
		Name: "exports", Limit: sluice.MaxConcurrent(2).WithLifetime(90 * time.Second), Key: httplimit.Header("X-Account"),
	}, httplimit.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	h := c.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
	}))
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if w := getAs(h, "acme"); w.Code != http.StatusOK {
				t.Errorf("a held request answered %d", w.Code)
			}
		})
		<-started
	}
	w := getAs(h, "acme")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "90" {
		t.Fatalf("the third: %d, Retry-After %q; want 429, 90", w.Code, w.Header().Get("Retry-After"))
	}
	go getAs(h, "other")
	<-started // another key holds its own slots
	close(release)
	wg.Wait()
	go getAs(h, "acme")
	<-started // a slot came back when a handler ended
	if obs.count(observe.Allowed) != 4 || obs.count(observe.Denied) != 1 {
		t.Fatalf("events %v, want 4 allowed, 1 denied", obs.os)
	}
}

// TestConcurrentReleasesOnPanic: a handler that panics gives its slot back
// before the panic goes on.
func TestConcurrentReleasesOnPanic(t *testing.T) {
	lim := sluice.New(memstore.New())
	c, err := httplimit.NewConcurrent(lim, httplimit.ConcurrencyPolicy{Name: "one", Limit: sluice.MaxConcurrent(1), Key: httplimit.Header("X-Account")})
	if err != nil {
		t.Fatal(err)
	}
	boom := c.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic did not go on")
			}
		}()
		getAs(boom, "acme")
	}()
	ok := c.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	if w := getAs(ok, "acme"); w.Code != http.StatusOK {
		t.Fatalf("after a panic: %d, want the slot back", w.Code)
	}
}

// TestConcurrentExpired: a handler that outlives its lease's lifetime is
// reported observe.Expired when it ends; a request with no key is 400.
func TestConcurrentExpired(t *testing.T) {
	clock := testenv.NewClock()
	lim := sluice.New(memstore.New(memstore.WithClock(clock)))
	obs := new(outcomes)
	c, err := httplimit.NewConcurrent(lim, httplimit.ConcurrencyPolicy{
		Name: "slow", Limit: sluice.MaxConcurrent(1).WithLifetime(time.Second), Key: httplimit.Header("X-Account"),
	}, httplimit.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	h := c.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { clock.Add(2 * time.Second) }))
	getAs(h, "acme")
	if obs.count(observe.Expired) != 1 {
		t.Fatalf("events %v, want one expired", obs.os)
	}
	r := httptest.NewRequest("GET", "/", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusBadRequest {
		t.Fatalf("no key: %d, want 400", w.Code)
	}
}

func TestNewConcurrentErrors(t *testing.T) {
	lim := sluice.New(memstore.New())
	for _, p := range []httplimit.ConcurrencyPolicy{
		{Name: "", Limit: sluice.MaxConcurrent(1)},
		{Name: "a:b", Limit: sluice.MaxConcurrent(1)},
		{Name: "x", Limit: sluice.MaxConcurrent(0)},
		{Name: "x", Limit: sluice.MaxConcurrent(2), Units: 3},
		{Name: "x", Limit: sluice.MaxConcurrent(2), Units: -1},
	} {
		if _, err := httplimit.NewConcurrent(lim, p); err == nil {
			t.Errorf("%+v: no error", p)
		}
	}
	if _, err := httplimit.NewConcurrent(nil, httplimit.ConcurrencyPolicy{Name: "x", Limit: sluice.MaxConcurrent(1)}); err == nil {
		t.Error("nil Limiter: no error")
	}
}

// A report builder runs at most 2 at once per account: the third request
// is answered 429 until one ends.
func ExampleNewConcurrent() {
	lim := sluice.New(memstore.New())
	c, err := httplimit.NewConcurrent(lim, httplimit.ConcurrencyPolicy{
		Name:  "reports",
		Limit: sluice.MaxConcurrent(2).WithLifetime(5 * time.Minute),
		Key:   httplimit.Header("X-Account"),
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /reports", c.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Build the report: the slot is held until this returns.
		fmt.Fprintln(w, "report built")
	})))
	r := httptest.NewRequest("POST", "/reports", nil)
	r.Header.Set("X-Account", "acme")
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	fmt.Print(w.Code, " ", w.Body.String())
	// Output:
	// 200 report built
}

// TestConcurrentHeadroom: 3 slots with 1 kept for critical requests: two
// ordinary requests run, a third waits its turn with 429, and a critical
// one still gets the reserved slot.
func TestConcurrentHeadroom(t *testing.T) {
	lim := sluice.New(memstore.New())
	c, err := httplimit.NewConcurrent(lim, httplimit.ConcurrencyPolicy{
		Name: "api", Limit: sluice.MaxConcurrent(3).WithHeadroom(1), Key: httplimit.Header("X-Account"),
		Critical: func(r *http.Request) bool { return r.URL.Path == "/checkout" },
	})
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	h := c.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
	}))
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { getAs(h, "acme") })
		<-started
	}
	if w := getAs(h, "acme"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("a third ordinary request: %d, want 429", w.Code)
	}
	wg.Go(func() {
		r := httptest.NewRequest("POST", "/checkout", nil)
		r.Header.Set("X-Account", "acme")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Errorf("the critical request: %d", w.Code)
		}
	})
	<-started // the reserved slot
	close(release)
	wg.Wait()
	if _, err := httplimit.NewConcurrent(lim, httplimit.ConcurrencyPolicy{Name: "x", Limit: sluice.MaxConcurrent(3).WithHeadroom(3)}); err == nil {
		t.Fatal("a reserve of the whole limit: no error")
	}
}
