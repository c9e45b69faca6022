package httplimit_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/redisstore"
	"github.com/sluice-go/sluice/store"
)

// errLog keeps what WithErrorLog is given.
type errLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errLog) log(_ *http.Request, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *errLog) take() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.errs
	l.errs = nil
	return e
}

// left is what key has left under l, by a look.
func leftOf(t testing.TB, lim *sluice.Limiter, key string, l sluice.Limit) int64 {
	t.Helper()
	r, err := lim.Take(context.Background(), key, l, 0)
	if err != nil {
		t.Fatal(err)
	}
	return r.Remaining
}

// serveOnce sends r through h and returns the recorder.
func serveOnce(h http.Handler, user string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-User", user)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestUsedSettlesExactly: an estimate of 500 is brought to what the
// response says, from a header, a trailer, a JSON body, a function or the
// handler's charges: 4000 charges 3,500 more, 100 gives 400 back.
func TestUsedSettlesExactly(t *testing.T) {
	tokens := sluice.PerHour(100_000)
	tokens.Debt = 10_000
	for _, tc := range []struct {
		name    string
		used    httplimit.Used
		respond func(w http.ResponseWriter, r *http.Request, n string)
	}{
		{"header", httplimit.Used{Header: "X-Tokens-Used"}, func(w http.ResponseWriter, _ *http.Request, n string) {
			w.Header().Set("X-Tokens-Used", n)
		}},
		{"declared-trailer", httplimit.Used{Header: "x-tokens-used"}, func(w http.ResponseWriter, _ *http.Request, n string) {
			w.Header().Set("Trailer", "X-Tokens-Used")
			io.WriteString(w, "body")
			w.Header().Set("X-Tokens-Used", n)
		}},
		{"trailer-prefix", httplimit.Used{Header: "X-Tokens-Used"}, func(w http.ResponseWriter, _ *http.Request, n string) {
			io.WriteString(w, "body")
			w.Header().Set(http.TrailerPrefix+"x-tokens-used", n)
		}},
		{"json", httplimit.Used{JSON: []string{"usage", "total_tokens"}}, func(w http.ResponseWriter, _ *http.Request, n string) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"c1","choices":[{"text":"hi"}],`)
			fmt.Fprintf(w, `"usage":{"prompt_tokens":1,"total_tokens":%s}}`, n)
		}},
		{"sse", httplimit.Used{JSON: []string{"usage", "total_tokens"}}, func(w http.ResponseWriter, _ *http.Request, n string) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n")
			w.(http.Flusher).Flush()
			fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"total_tokens\":%s}}\n\ndata: [DONE]\n\n", n)
		}},
		{"func", httplimit.Used{Func: func(_ *http.Request, resp *httplimit.Response) (int64, bool) {
			n, err := strconv.ParseInt(resp.Header.Get("X-Units"), 10, 64)
			return n, err == nil && resp.StatusCode == http.StatusAccepted
		}}, func(w http.ResponseWriter, _ *http.Request, n string) {
			w.Header().Set("X-Units", n)
			w.WriteHeader(http.StatusAccepted)
		}},
		{"handler", httplimit.Used{}, func(w http.ResponseWriter, r *http.Request, n string) {
			u, _ := strconv.ParseInt(n, 10, 64)
			if err := httplimit.Charge(r.Context(), u/2); err != nil {
				panic(err)
			}
			if err := httplimit.ChargePolicy(r.Context(), "tokens", u-u/2); err != nil {
				panic(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := frozenLimiter(newClock())
			var logged errLog
			m := mustNew(t, lim, []httplimit.Policy{{Name: "tokens", Limit: tokens, Key: httplimit.Header("X-User"), Cost: 500, Used: &tc.used}},
				httplimit.WithErrorLog(logged.log))
			h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tc.respond(w, r, r.Header.Get("X-Said"))
			}))
			for _, step := range []struct {
				user, said string
				left       int64
			}{
				{"a", "4000", 96_000}, {"b", "100", 99_900}, {"a", "500", 95_500}, {"b", "0", 99_900},
			} {
				w := serveOnce(h, step.user, "X-Said", step.said)
				if w.Code >= 300 {
					t.Fatalf("status %d: %s", w.Code, w.Body)
				}
				if l := leftOf(t, lim, "httplimit:tokens:"+step.user, tokens); l != step.left {
					t.Errorf("%s said %s: %d left, want %d", step.user, step.said, l, step.left)
				}
			}
			if errs := logged.take(); len(errs) > 0 {
				t.Errorf("logged %v", errs)
			}
		})
	}
}

// TestUsedSaysNothingOrWrong: a response that says nothing leaves the
// estimate; one that says it wrong is logged, leaves the estimate, and is
// answered as the handler answered.
func TestUsedSaysNothingOrWrong(t *testing.T) {
	lim := frozenLimiter(newClock())
	var logged errLog
	l := sluice.PerHour(1000)
	m := mustNew(t, lim, []httplimit.Policy{
		{Name: "hdr", Limit: l, Key: httplimit.Header("X-User"), Cost: 10, Used: &httplimit.Used{Header: "X-Used"}},
		{Name: "json", Limit: l, Key: httplimit.Header("X-User"), Cost: 10, Used: &httplimit.Used{JSON: []string{"usage", "n"}}},
	}, httplimit.WithErrorLog(logged.log))
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header.Get("X-Say"); v != "" {
			w.Header()["X-Used"] = strings.Split(v, "|")
		}
		io.WriteString(w, r.Header.Get("X-Body"))
	}))
	for _, tc := range []struct {
		say, body string
		logs      []string
	}{
		{"", "", nil},
		{"", `{"usage":{}}`, []string{`policy "json": what the response used: no ["usage" "n"] in the JSON`}},
		{"-5", `<html>`, []string{`policy "hdr": what the response used: X-Used: "-5" is not a whole number`, `policy "json": what the response used: not JSON`}},
		{"1|2", `{"usage":{"n":"3"}}`, []string{`X-Used sent 2 times`, `["usage" "n"] is a string, not a number`}},
	} {
		user := "u" + tc.say + tc.body
		w := serveOnce(h, user, "X-Say", tc.say, "X-Body", tc.body)
		if w.Code != 200 || w.Body.String() != tc.body {
			t.Errorf("%q %q: answered %d %q", tc.say, tc.body, w.Code, w.Body)
		}
		for _, p := range []string{"hdr", "json"} {
			if got := leftOf(t, lim, "httplimit:"+p+":"+user, l); got != 990 {
				t.Errorf("%q %q: %s has %d left, want the estimate's 990", tc.say, tc.body, p, got)
			}
		}
		errs := logged.take()
		if len(errs) != len(tc.logs) {
			t.Errorf("%q %q: logged %v, want %q", tc.say, tc.body, errs, tc.logs)
			continue
		}
		for i, want := range tc.logs {
			if !strings.Contains(errs[i].Error(), want) {
				t.Errorf("%q %q: logged %q, want %q", tc.say, tc.body, errs[i], want)
			}
		}
	}
}

// TestChargeErrors: Charge outside a request, without a policy that reads
// what was used, for a name that has none, or once the handler returned.
func TestChargeErrors(t *testing.T) {
	lim := frozenLimiter(newClock())
	late := make(chan error, 1)
	var errs []error
	m := mustNew(t, lim, []httplimit.Policy{
		{Name: "used", Limit: sluice.PerHour(100), Used: &httplimit.Used{}},
		{Name: "plain", Limit: sluice.PerHour(100)},
	})
	var ctx context.Context
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx = r.Context()
		errs = append(errs, httplimit.Charge(r.Context(), -1), httplimit.ChargePolicy(r.Context(), "plain", 1),
			httplimit.ChargePolicy(r.Context(), "", 1), httplimit.ChargePolicy(r.Context(), "used", 3))
	}))
	serveOnce(h, "")
	late <- httplimit.Charge(ctx, 5)
	if len(errs) != 4 || errs[0] == nil || !errors.Is(errs[1], httplimit.ErrNoDecision) || errs[2] == nil || errs[3] != nil {
		t.Errorf("errors %v", errs)
	}
	if err := <-late; err == nil || !strings.Contains(err.Error(), "settled") {
		t.Errorf("a charge after the handler: %v", err)
	}
	if err := httplimit.Charge(context.Background(), 1); !errors.Is(err, httplimit.ErrNoDecision) {
		t.Errorf("outside a request: %v", err)
	}
	if l := leftOf(t, lim, "httplimit:used:192.0.2.1", sluice.PerHour(100)); l != 97 {
		t.Errorf("%d left, want 97", l)
	}
	m2 := mustNew(t, lim, []httplimit.Policy{{Name: "plain", Limit: sluice.PerHour(100)}})
	serveOnce(m2.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := httplimit.Charge(r.Context(), 1); !errors.Is(err, httplimit.ErrNoDecision) {
			t.Errorf("no policy with a Used: %v", err)
		}
	})), "")
}

// TestStreamLeftMidway: a client that hangs up in the middle of an event
// stream is charged what was sent until then (a real server, a real
// connection closed).
func TestStreamLeftMidway(t *testing.T) {
	lim := sluice.New(memstore.New())
	l := sluice.PerHour(1000)
	m := mustNew(t, lim, []httplimit.Policy{{Name: "tokens", Limit: l, Key: httplimit.Static("all"), Cost: 1, Used: &httplimit.Used{}}})
	proceed := make(chan struct{})
	sse := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; ; i++ {
			fmt.Fprintf(w, "data: {\"n\":%d}\n\n", i)
			w.(http.Flusher).Flush()
			if err := httplimit.Charge(r.Context(), 10); err != nil {
				t.Error(err)
			}
			select {
			case <-proceed:
			case <-r.Context().Done(): // the client is gone
				return
			}
		}
	})
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.Handler(sse).ServeHTTP(w, r) // settled before it returns
		close(done)
	}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for i := range 3 {
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if line == "\n" {
				break
			}
		}
		if i < 2 {
			proceed <- struct{}{}
		}
	}
	resp.Body.Close() // hangs up: the connection closes with the stream unfinished
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler never saw the client leave")
	}
	if left := leftOf(t, lim, "httplimit:tokens:all", l); left != 1000-30 {
		t.Errorf("%d left after 3 events of 10 sent, want 970", left)
	}
}

// loginHandler answers 200 to the password "right", else 401.
var loginHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Password") != "right" {
		http.Error(w, "wrong password", http.StatusUnauthorized)
		return
	}
	io.WriteString(w, "welcome")
})

// TestFailedLoginsCount: 5 failed logins a minute per client, then
// refusal until one more could count; successful logins never count.
func TestFailedLoginsCount(t *testing.T) {
	for _, alg := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.FixedWindow, sluice.AlignedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			c := newClock()
			lim := frozenLimiter(c)
			limit := sluice.PerMinute(5).WithAlgorithm(alg)
			m := mustNew(t, lim, []httplimit.Policy{{
				Name: "failed-logins", Limit: limit,
				Count: func(status int) bool { return status == http.StatusUnauthorized || status == http.StatusForbidden },
			}})
			h := m.Handler(loginHandler)
			for i := range 20 {
				if w := serveOnce(h, "", "X-Password", "right"); w.Code != 200 {
					t.Fatalf("login %d: %d", i, w.Code)
				}
			}
			for i := range 5 {
				w := serveOnce(h, "", "X-Password", "wrong")
				if w.Code != http.StatusUnauthorized {
					t.Fatalf("failed login %d: %d", i, w.Code)
				}
				if got, want := w.Header().Get("RateLimit"), fmt.Sprintf(`"failed-logins";r=%d;`, 5-i); !strings.HasPrefix(got, want) {
					t.Errorf("failed login %d: RateLimit %q, want %s... (a look: before this one counts)", i, got, want)
				}
			}
			w := serveOnce(h, "", "X-Password", "right")
			want, _ := lim.Take(context.Background(), "httplimit:failed-logins:192.0.2.1", limit, 1)
			if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != strconv.FormatInt(int64((want.RetryAfter+time.Second-1)/time.Second), 10) {
				t.Errorf("after 5 failures: %d, Retry-After %q; want 429 and %v", w.Code, w.Header().Get("Retry-After"), want.RetryAfter)
			}
			c.Add(want.RetryAfter)
			if w := serveOnce(h, "", "X-Password", "right"); w.Code != 200 {
				t.Errorf("once one more could count: %d", w.Code)
			}
		})
	}
}

// TestDebtRefusedUntilPaid: a response that used more than the budget
// leaves the key in debt: the next request is refused until it is paid,
// and the headers never show a negative remaining.
func TestDebtRefusedUntilPaid(t *testing.T) {
	c := newClock()
	lim := frozenLimiter(c)
	l := sluice.PerMinute(60)
	l.Debt = 120
	m := mustNew(t, lim, []httplimit.Policy{{Name: "tokens", Limit: l, Cost: 10, Used: &httplimit.Used{Header: "X-Tokens-Used"}}},
		httplimit.WithHeaders(httplimit.HeadersDraft11, httplimit.HeadersXRateLimit))
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Tokens-Used", "150")
	}))
	if w := serveOnce(h, ""); w.Code != 200 {
		t.Fatal(w.Code)
	}
	// 150 of 60: 90 owed. The next request's 10 pass once 100 came back:
	// 100s at one a second.
	w := serveOnce(h, "")
	if w.Code != 429 || w.Header().Get("Retry-After") != "100" {
		t.Errorf("in debt: %d, Retry-After %q; want 429 and 100", w.Code, w.Header().Get("Retry-After"))
	}
	if got := w.Header().Get("RateLimit"); !strings.HasPrefix(got, `"tokens";r=0;`) || w.Header().Get("X-RateLimit-Remaining") != "0" {
		t.Errorf("in debt: RateLimit %q, X-RateLimit-Remaining %q; want 0", got, w.Header().Get("X-RateLimit-Remaining"))
	}
	c.Add(100 * time.Second)
	if w := serveOnce(h, ""); w.Code != 200 {
		t.Errorf("debt paid: %d", w.Code)
	}
}

// failCharges is a store whose charges fail: settling is all that breaks.
type failCharges struct{ *memstore.Store }

func (f failCharges) Run(ctx context.Context, ops []store.Op) {
	for i := range ops {
		if ops[i].Kind == store.Charge {
			ops[i].Err = fmt.Errorf("%w: charges are down", sluice.ErrStoreUnavailable)
			continue
		}
		f.Store.Run(ctx, ops[i:i+1])
	}
}

// TestSettleFailureLeavesTheResponse: a charge the store fails is logged,
// and the response is the handler's.
func TestSettleFailureLeavesTheResponse(t *testing.T) {
	lim := sluice.New(failCharges{memstore.New()})
	var logged errLog
	m := mustNew(t, lim, []httplimit.Policy{{Name: "tokens", Limit: sluice.PerHour(1000), Used: &httplimit.Used{Header: "X-Tokens-Used"}}},
		httplimit.WithErrorLog(logged.log))
	w := serveOnce(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Tokens-Used", "40")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "made")
	})), "")
	if w.Code != http.StatusCreated || w.Body.String() != "made" {
		t.Errorf("answered %d %q", w.Code, w.Body)
	}
	if errs := logged.take(); len(errs) != 1 || !errors.Is(errs[0], sluice.ErrStoreUnavailable) || !strings.Contains(errs[0].Error(), `policy "tokens": charge`) {
		t.Errorf("logged %v", errs)
	}
}

func TestUsedAndCountRejected(t *testing.T) {
	lim := frozenLimiter(newClock())
	count := func(int) bool { return true }
	for _, tc := range []struct {
		p    httplimit.Policy
		want string
	}{
		{httplimit.Policy{Name: "a", Limit: sluice.PerMinute(5).WithAlgorithm(sluice.SlidingLog), Used: &httplimit.Used{}}, `policy "a": charging what was used (Used) needs an algorithm that can be charged`},
		{httplimit.Policy{Name: "b", Limit: sluice.PerMinute(5).WithAlgorithm(sluice.LeakyBucket), Count: count}, `policy "b": counting by outcome (Count) needs an algorithm that can be charged`},
		{httplimit.Policy{Name: "c", Limit: sluice.PerMinute(5), Used: &httplimit.Used{Header: "X", JSON: []string{"n"}}}, "set one of Header, JSON and Func"},
		{httplimit.Policy{Name: "d", Limit: sluice.PerMinute(5), Used: &httplimit.Used{Header: "X Used"}}, `Header "X Used": not a field name`},
		{httplimit.Policy{Name: "e", Limit: sluice.PerMinute(5), Used: &httplimit.Used{Header: "X", MaxBytes: 10}}, "MaxBytes 10"},
		{httplimit.Policy{Name: "f", Limit: sluice.PerMinute(5), Used: &httplimit.Used{JSON: []string{}}}, "empty path"},
		{httplimit.Policy{Name: "g", Limit: sluice.PerMinute(5), Used: &httplimit.Used{JSON: []string{"\U0001F600"}}}, "Basic Multilingual Plane"},
	} {
		if _, err := httplimit.New(lim, []httplimit.Policy{tc.p}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %s", tc.p.Name, err, tc.want)
		}
	}
	if _, err := httplimit.NewTransport(lim, []httplimit.Policy{{Name: "x", Limit: sluice.PerMinute(5), Count: count}}); err == nil || !strings.Contains(err.Error(), "not supported outbound") {
		t.Errorf("a Transport that counts: %v", err)
	}
}

// TestUsedOnRedis settles through redisstore: two policies' charges in
// one composite, a refund; it skips, saying so, while redisstore cannot
// charge.
func TestUsedOnRedis(t *testing.T) {
	srv := redistest.Standalone(t)
	st, err := redisstore.New(srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	lim := sluice.New(st)
	var logged errLog
	l := sluice.PerHour(1000)
	l.Debt = 500
	w := l.WithAlgorithm(sluice.FixedWindow)
	prefix := fmt.Sprintf("used-%d:", time.Now().UnixNano())
	m := mustNew(t, lim, []httplimit.Policy{
		{Name: "tokens", Limit: l, Key: httplimit.Header("X-User"), Cost: 100, Used: &httplimit.Used{Header: "X-Tokens-Used"}},
		{Name: "window", Limit: w, Key: httplimit.Header("X-User"), Cost: 100, Used: &httplimit.Used{Header: "X-Tokens-Used"}},
	}, httplimit.WithErrorLog(logged.log), httplimit.WithKeyPrefix(prefix))
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Tokens-Used", r.Header.Get("X-Said"))
	}))
	serveOnce(h, "a", "X-Said", "1200")
	for _, err := range logged.take() {
		if errors.Is(err, errors.ErrUnsupported) {
			t.Skipf("SKIPPED LOUDLY: redisstore cannot charge yet (%v); this test runs once it can", err)
		}
		t.Fatal(err)
	}
	serveOnce(h, "b", "X-Said", "30")
	if errs := logged.take(); len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, tc := range []struct {
		key   string
		limit sluice.Limit
		want  int64
	}{
		{"tokens:a", l, -200}, {"window:a", w, -200}, {"tokens:b", l, 970}, {"window:b", w, 970},
	} {
		if got := leftOf(t, lim, prefix+tc.key, tc.limit); got != tc.want {
			t.Errorf("%s: %d left, want %d", tc.key, got, tc.want)
		}
	}
	if rec := serveOnce(h, "a", "X-Said", "1"); rec.Code != http.StatusTooManyRequests {
		t.Errorf("a key in debt on Redis: %d", rec.Code)
	}
}
