package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/httplimit"
)

type outerKey struct{}

// TestSingleDecisionOnDemand checks the decision of a request admitted by
// one policy, which is made only when asked for: DecisionFrom's figures are
// the decision's, one Decision however often it is asked, Refund works
// before and after it and from a goroutine that outlives the handler, and
// the next handler's request is the one that came, with its context's
// values.
func TestSingleDecisionOnDemand(t *testing.T) {
	c := newClock()
	lim := frozenLimiter(c)
	limit := sluice.PerHour(1).WithBurst(10)
	type seen struct {
		d1, d2  *httplimit.Decision
		err     error
		outer   any
		method  string
		addr    string
		header  string
		lateErr error
		lateDec bool
	}
	got := make(chan seen, 1)
	var late sync.WaitGroup
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var s seen
		s.err = httplimit.Refund(r.Context(), 1) // before DecisionFrom
		s.d1, _ = httplimit.DecisionFrom(r.Context())
		s.d2, _ = httplimit.DecisionFrom(r.Context())
		s.outer = r.Context().Value(outerKey{})
		s.method, s.addr, s.header = r.Method, r.RemoteAddr, r.Header.Get("X-Test")
		ctx := r.Context()
		late.Add(1)
		go func() { // outlives the handler
			defer late.Done()
			time.Sleep(time.Millisecond)
			s.lateErr = httplimit.RefundPolicy(ctx, "p", 1)
			d, ok := httplimit.DecisionFrom(ctx)
			s.lateDec = ok && d == s.d1
			got <- s
		}()
	})
	m := mustNew(t, lim, []httplimit.Policy{{Name: "p", Limit: limit, Cost: 3}})
	h := m.Handler(next)
	r := httptest.NewRequest("POST", "/x", nil)
	r.RemoteAddr = "192.0.2.7:1234"
	r.Header.Set("X-Test", "v")
	r = r.WithContext(context.WithValue(r.Context(), outerKey{}, "outer"))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	late.Wait()
	s := <-got
	if w.Code != 200 || w.Header().Get("RateLimit") != `"p";r=7;t=10800` {
		t.Fatalf("answer %d, RateLimit %q", w.Code, w.Header().Get("RateLimit"))
	}
	if s.err != nil || s.lateErr != nil || !s.lateDec {
		t.Fatalf("refunds %v, %v; the late goroutine's decision the same: %v", s.err, s.lateErr, s.lateDec)
	}
	if s.d1 == nil || s.d1 != s.d2 {
		t.Fatalf("DecisionFrom gave %p then %p: want one Decision", s.d1, s.d2)
	}
	d := s.d1
	if !d.Allowed || len(d.Refused) != 0 || d.Missing != "" || !d.Result.Allowed || d.Result.Remaining != 7 ||
		d.Result.ResetAfter != 3*time.Hour || d.Result.RetryAfter != 0 || d.Result.Delay != 0 || d.Result.Degraded {
		t.Fatalf("decision %+v", *d)
	}
	want := httplimit.PolicyResult{Name: "p", Key: "192.0.2.7", Cost: 3, Quota: 10, Window: 36000, Remaining: 7, Reset: 10800}
	if len(d.Policies) != 1 || d.Policies[0] != want {
		t.Fatalf("policies %+v, want %+v", d.Policies, want)
	}
	if s.outer != "outer" || s.method != "POST" || s.addr != "192.0.2.7:1234" || s.header != "v" {
		t.Fatalf("next handler's request: %+v", s)
	}
	// Both refunds reached the store: 10 - 3 + 1 + 1.
	if res, err := lim.Take(context.Background(), "httplimit:p:192.0.2.7", limit, 0); err != nil || res.Remaining != 9 {
		t.Fatalf("after the refunds: %+v %v, want 9 left", res, err)
	}
}

// TestSingleDecisionOfNoCost checks that a request admitted at cost 0 has
// spent nothing to refund, and that with no headers its Decision has no
// policy numbers, as when it is made at once.
func TestSingleDecisionOfNoCost(t *testing.T) {
	lim := frozenLimiter(newClock())
	var err error
	var d *httplimit.Decision
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err = httplimit.Refund(r.Context(), 1)
		d, _ = httplimit.DecisionFrom(r.Context())
	})
	m := mustNew(t, lim, []httplimit.Policy{{Name: "p", Limit: sluice.PerHour(1),
		CostFunc: func(*http.Request) (int64, error) { return 0, nil }}}, httplimit.WithHeaders())
	r := httptest.NewRequest("GET", "/", nil)
	m.Handler(next).ServeHTTP(httptest.NewRecorder(), r)
	if !errors.Is(err, httplimit.ErrNoDecision) {
		t.Errorf("Refund after a cost of 0: %v, want ErrNoDecision", err)
	}
	if d == nil || !d.Allowed || d.Policies != nil || d.Result.Remaining != 1 {
		t.Errorf("decision %+v", d)
	}
}

// TestHeadersStayStructuredIntegers checks that a quota larger than an RFC
// 9651 Integer can hold is sent as the largest one, so that the fields
// still parse.
func TestHeadersStayStructuredIntegers(t *testing.T) {
	lim := frozenLimiter(newClock())
	huge := sluice.Per(1<<50, time.Second).WithAlgorithm(sluice.FixedWindow)
	m := mustNew(t, lim, []httplimit.Policy{{Name: "p", Limit: huge}})
	w := httptest.NewRecorder()
	m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	for _, f := range []string{"RateLimit-Policy", "RateLimit"} {
		items, err := parseSFList(w.Header().Get(f))
		if err != nil || len(items) != 1 {
			t.Fatalf("%s %q: %v", f, w.Header().Get(f), err)
		}
	}
	if got := w.Header().Get("RateLimit"); got != `"p";r=999999999999999;t=1` {
		t.Errorf("RateLimit %q", got)
	}
}

// TestWithoutDecisionContextSlowPaths checks the answers that make a
// request's state late with WithoutDecisionContext and the default key: a
// missing key, a refusal, a store error.
func TestWithoutDecisionContextSlowPaths(t *testing.T) {
	lim := frozenLimiter(newClock())
	var missing, denied string
	onMissing := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, ok := httplimit.DecisionFrom(r.Context())
		if ok {
			missing = d.Missing
		}
		w.WriteHeader(http.StatusTeapot)
	})
	deny := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d, ok := httplimit.DecisionFrom(r.Context()); ok && !d.Allowed && len(d.Policies) == 1 {
			denied = d.Refused[0]
		}
	})
	m := mustNew(t, lim, []httplimit.Policy{{Name: "p", Limit: sluice.PerHour(1)}},
		httplimit.WithoutDecisionContext(), httplimit.WithMissingKey(onMissing), httplimit.WithDenyHandler(deny))
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = ""
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusTeapot || missing != "p" {
		t.Errorf("no peer address: %d, missing %q", w.Code, missing)
	}
	r.RemoteAddr = "192.0.2.1:1"
	for i, want := range []int{200, 429} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != want || w.Header().Get("RateLimit") == "" {
			t.Errorf("request %d: %d, RateLimit %q; want %d", i, w.Code, w.Header().Get("RateLimit"), want)
		}
	}
	if denied != "p" {
		t.Errorf("deny handler saw %q refuse", denied)
	}
}

// TestConcurrentRefunds checks that refunds made at once from several
// goroutines give back what the request spent and no more.
func TestConcurrentRefunds(t *testing.T) {
	lim := frozenLimiter(newClock())
	limit := sluice.PerHour(1).WithBurst(10)
	var errs [8]error
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() { errs[i] = httplimit.Refund(r.Context(), 1) })
		}
		wg.Wait()
	})
	m := mustNew(t, lim, []httplimit.Policy{{Name: "p", Limit: limit, Cost: 4}})
	r := httptest.NewRequest("GET", "/", nil)
	w := httptest.NewRecorder()
	m.Handler(next).ServeHTTP(w, r)
	for i, err := range errs {
		if err != nil {
			t.Errorf("refund %d: %v", i, err)
		}
	}
	if res, err := lim.Take(context.Background(), "httplimit:p:192.0.2.1", limit, 0); err != nil || res.Remaining != 10 {
		t.Errorf("after 8 refunds of 1 on a cost of 4: %+v %v, want 10 left", res, err)
	}
}
