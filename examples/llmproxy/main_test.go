package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testsupport/childproc"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/memstore"
)

// upstream is a fake OpenAI-compatible API on a loopback port. It answers
// a chat completion with the usage its client chose (X-Test-Tokens): one
// JSON document, or for a streamed request events, the last of them (when
// the request asks for it) with the usage, then [DONE]. It flushes its
// answers, so that they go chunked (TestAcrossProcesses relies on it).
type upstream struct {
	*httptest.Server
	mu     sync.Mutex
	served []served
}

// served is a request the upstream answered.
type served struct {
	ID, Auth   string // X-Test-ID, Authorization
	Tokens     int64
	Stream     bool
	AskedUsage bool // stream_options.include_usage
	Body       map[string]json.RawMessage
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Stream        bool `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	var body map[string]json.RawMessage
	b, _ := io.ReadAll(r.Body)
	tokens, err := strconv.ParseInt(r.Header.Get("X-Test-Tokens"), 10, 64)
	if err != nil || json.Unmarshal(b, &req) != nil || json.Unmarshal(b, &body) != nil {
		http.Error(w, "not a chat completion of the test", http.StatusBadRequest)
		return
	}
	u.mu.Lock()
	u.served = append(u.served, served{ID: r.Header.Get("X-Test-ID"), Auth: r.Header.Get("Authorization"),
		Tokens: tokens, Stream: req.Stream, AskedUsage: req.StreamOptions.IncludeUsage, Body: body})
	u.mu.Unlock()
	usage := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`, tokens/3, tokens-tokens/3, tokens)
	flush := w.(http.Flusher).Flush
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":%s}`, usage)
		flush()
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for _, s := range []string{"Hel", "lo"} {
		fmt.Fprintf(w, "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}],\"usage\":null}\n\n", s)
		flush()
	}
	if req.StreamOptions.IncludeUsage {
		fmt.Fprintf(w, "data: {\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":%s}\n\n", usage)
	}
	io.WriteString(w, "data: [DONE]\n\n")
	flush()
}

// seen returns what the upstream answered so far.
func (u *upstream) seen() []served {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.served)
}

// chatBody is a chat completion's body; opts, when not "", its
// stream_options.
func chatBody(maxTokens int64, stream bool, opts string) []byte {
	b := fmt.Sprintf(`{"model":"test-model","messages":[{"role":"user","content":"Say hello"}],"max_tokens":%d`, maxTokens)
	if stream {
		b += `,"stream":true`
	}
	if opts != "" {
		b += `,"stream_options":` + opts
	}
	return []byte(b + "}")
}

// answer is what a client got.
type answer struct {
	Status int
	Header http.Header
	Body   string
}

// retryAfter is the answer's Retry-After, in seconds; -1 when it has none.
func retryAfter(a answer) int {
	n, err := strconv.Atoi(a.Header.Get("Retry-After"))
	if err != nil {
		return -1
	}
	return n
}

// violated is the policies a refusal's problem names.
func (a answer) violated() []string {
	var p struct {
		Violated []string `json:"violated-policies"`
	}
	_ = json.Unmarshal([]byte(a.Body), &p)
	return p.Violated
}

// send posts a chat completion to the proxy at base with the Authorization
// auth (none when ""), the upstream told to report tokens used; it reads
// the answer to its end.
func send(c *http.Client, base, auth, id string, body []byte, tokens int64) (answer, error) {
	req, err := http.NewRequest("POST", base+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Test-Tokens", strconv.FormatInt(tokens, 10))
	req.Header.Set("X-Test-ID", id)
	resp, err := c.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}, err
}

// local is a proxy in this process, limited in memory on a clock the test
// moves.
type local struct {
	base   string
	up     *upstream
	lim    *sluice.Limiter
	clock  *testenv.Clock
	limits Limits
}

func newLocal(t *testing.T, l Limits) *local {
	p := &local{up: newUpstream(t), clock: testenv.NewClock(), limits: l}
	p.lim = sluice.New(memstore.New(memstore.WithClock(p.clock)))
	u, err := url.Parse(p.up.URL)
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewProxy(u, p.lim, l)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	p.base = srv.URL
	return p
}

// send sends body as key ("Bearer key"), the upstream told to report
// tokens used.
func (p *local) send(t *testing.T, key string, body []byte, tokens int64) answer {
	t.Helper()
	a, err := send(http.DefaultClient, p.base, "Bearer "+key, "", body, tokens)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// left is what key has left of its tokens; negative, its debt.
func (p *local) left(t *testing.T, key string) int64 {
	t.Helper()
	k, _ := apiKey(&http.Request{Header: http.Header{"Authorization": {"Bearer " + key}}})
	tpm := sluice.Per(p.limits.Tokens, p.limits.Period)
	tpm.Debt = p.limits.Debt
	r, err := p.lim.Take(context.Background(), "httplimit:tpm:"+k, tpm, 0)
	if err != nil {
		t.Fatal(err)
	}
	return r.Remaining
}

func TestInspect(t *testing.T) {
	for _, c := range []struct {
		body, sent string // sent "": the body as it came
		answer     int64  // the estimate's, beside a token for every 4 bytes
	}{
		{`{"max_tokens":100}`, "", 100},
		{`{"max_completion_tokens":50,"max_tokens":100}`, "", 50},
		{`{}`, "", defaultMaxTokens},
		{`not json`, "", defaultMaxTokens},
		{`{"max_tokens":"100"}`, "", defaultMaxTokens},
		{`{"max_tokens":-5}`, "", 0},
		{`{"stream":false}`, "", defaultMaxTokens},
		{`{"stream":true,"stream_options":{"include_usage":true}}`, "", defaultMaxTokens},
		{`{"stream":true}`, `{"stream":true,"stream_options":{"include_usage":true}}`, defaultMaxTokens},
		{`{"stream":true,"stream_options":null}`, `{"stream":true,"stream_options":{"include_usage":true}}`, defaultMaxTokens},
		{`{"stream":true,"stream_options":{"include_usage":false,"x":[1]}}`, `{"stream":true,"stream_options":{"include_usage":true,"x":[1]}}`, defaultMaxTokens},
		{`[1,2]`, "", defaultMaxTokens},
	} {
		sent, tokens := inspect([]byte(c.body))
		want := int64(len(c.body))/4 + c.answer
		if string(sent) != cmp.Or(c.sent, c.body) || tokens != want {
			t.Errorf("inspect(%s) = %s, %d; want %s, %d", c.body, sent, tokens, cmp.Or(c.sent, c.body), want)
		}
	}
	if sent, tokens := inspect(nil); len(sent) != 0 || tokens != 0 {
		t.Errorf("inspect of no body = %q, %d; want nothing, 0", sent, tokens)
	}
}

// A request without a bearer token is answered 401, and goes nowhere.
func TestMissingKey(t *testing.T) {
	p := newLocal(t, Limits{Requests: 10, Tokens: 10_000, Period: time.Minute})
	for _, auth := range []string{"", "Basic dXNlcjpwYXNz", "Bearer", "Bearer   ", "sk-test"} {
		a, err := send(http.DefaultClient, p.base, auth, "", chatBody(10, false, ""), 10)
		if err != nil {
			t.Fatal(err)
		}
		if a.Status != http.StatusUnauthorized || a.Header.Get("WWW-Authenticate") != "Bearer" {
			t.Errorf("Authorization %q: %d %q, want 401 with WWW-Authenticate: Bearer", auth, a.Status, a.Header.Get("WWW-Authenticate"))
		}
	}
	if n := len(p.up.seen()); n != 0 {
		t.Fatalf("the upstream saw %d requests without a key", n)
	}
}

// The requests per minute: the 4th request of a key allowed 3 a minute is
// refused, for 20s; another key's pass.
func TestRequestsPerMinute(t *testing.T) {
	p := newLocal(t, Limits{Requests: 3, Tokens: 100_000, Period: time.Minute})
	for i := 1; i <= 4; i++ {
		a := p.send(t, "sk-a", chatBody(10, i%2 == 0, ""), 20)
		want := fmt.Sprintf(`"rpm";r=%d;`, 3-i)
		if i == 4 {
			want = `"rpm";r=0;`
			if a.Status != http.StatusTooManyRequests || a.Header.Get("Retry-After") != "20" || !slices.Equal(a.violated(), []string{"rpm"}) {
				t.Fatalf("request 4: %d, Retry-After %q, %s; want 429, 20, refused by rpm", a.Status, a.Header.Get("Retry-After"), a.Body)
			}
		} else if a.Status != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, a.Status, a.Body)
		}
		if rl := a.Header.Get("RateLimit"); !strings.HasPrefix(rl, want) {
			t.Errorf("request %d: RateLimit: %s, want %s...", i, rl, want)
		}
		if pol := a.Header.Get("RateLimit-Policy"); pol != `"rpm";q=3;w=60, "tpm";q=100000;w=60` {
			t.Errorf("request %d: RateLimit-Policy: %s", i, pol)
		}
	}
	if a := p.send(t, "sk-b", chatBody(10, false, ""), 20); a.Status != http.StatusOK {
		t.Fatalf("another key: %d %s", a.Status, a.Body)
	}
	if n := len(p.up.seen()); n != 4 {
		t.Fatalf("the upstream saw %d requests, want 4", n)
	}
}

// Each request is settled to the usage the upstream reports, streamed or
// not; a stream that does not ask for its usage is sent asking for it,
// the rest of its body as it came.
func TestSettle(t *testing.T) {
	p := newLocal(t, Limits{Requests: 100, Tokens: 10_000, Debt: 1000, Period: time.Minute})
	for i, c := range []struct {
		name   string
		body   []byte
		tokens int64
		opts   string // the stream_options the upstream sees
	}{
		{"plain", chatBody(100, false, ""), 40, ""},
		{"plain, past the estimate", chatBody(10, false, ""), 900, ""},
		{"stream", chatBody(100, true, ""), 70, `{"include_usage":true}`},
		{"stream asking for usage", chatBody(100, true, `{"include_usage":true}`), 80, `{"include_usage":true}`},
		{"stream refusing usage", chatBody(100, true, `{"include_usage":false,"x":1}`), 90, `{"include_usage":true,"x":1}`},
	} {
		key := fmt.Sprintf("sk-settle-%d", i)
		a := p.send(t, key, c.body, c.tokens)
		if a.Status != http.StatusOK || !strings.Contains(a.Body, fmt.Sprintf(`"total_tokens":%d}`, c.tokens)) {
			t.Fatalf("%s: %d %s", c.name, a.Status, a.Body)
		}
		if left := p.left(t, key); left != 10_000-c.tokens {
			t.Errorf("%s: %d tokens left, want %d", c.name, left, 10_000-c.tokens)
		}
		seen := p.up.seen()
		got := seen[len(seen)-1].Body
		var want map[string]json.RawMessage
		if err := json.Unmarshal(c.body, &want); err != nil {
			t.Fatal(err)
		}
		if string(got["stream_options"]) != c.opts {
			t.Errorf("%s: the upstream saw stream_options %s, want %s", c.name, got["stream_options"], c.opts)
		}
		delete(got, "stream_options")
		delete(want, "stream_options")
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: the upstream saw %s, want %s", c.name, got, want)
		}
	}
}

// A key in debt is refused until the debt is paid and the request's
// estimate has come back: Retry-After says when.
func TestDebt(t *testing.T) {
	l := Limits{Requests: 100, Tokens: 1000, Debt: 5000, Period: time.Minute}
	p := newLocal(t, l)
	if a := p.send(t, "sk-d", chatBody(100, false, ""), 3000); a.Status != http.StatusOK {
		t.Fatalf("first request: %d %s", a.Status, a.Body)
	}
	if left := p.left(t, "sk-d"); left != -2000 {
		t.Fatalf("%d tokens left after 3000 of 1000, want -2000", left)
	}
	body := chatBody(100, true, "")
	_, est := inspect(body)
	wait := time.Duration(2000+est) * l.Period / time.Duration(l.Tokens) // the debt's refill and the estimate's
	retry := int64((wait + time.Second - 1) / time.Second)
	a := p.send(t, "sk-d", body, 50)
	if a.Status != http.StatusTooManyRequests || a.Header.Get("Retry-After") != strconv.FormatInt(retry, 10) ||
		!slices.Equal(a.violated(), []string{"tpm"}) || !strings.Contains(a.Header.Get("RateLimit"), `"tpm";r=0;`) {
		t.Fatalf("in debt: %d, Retry-After %q, RateLimit %q, %s; want 429, %d, tpm r=0", a.Status, a.Header.Get("Retry-After"), a.Header.Get("RateLimit"), a.Body, retry)
	}
	p.clock.Add(time.Duration(retry-1) * time.Second)
	if a := p.send(t, "sk-d", body, 50); a.Status != http.StatusTooManyRequests || a.Header.Get("Retry-After") != "1" {
		t.Fatalf("a second before Retry-After: %d, Retry-After %q; want 429, 1", a.Status, a.Header.Get("Retry-After"))
	}
	p.clock.Add(time.Second)
	if a := p.send(t, "sk-d", body, 50); a.Status != http.StatusOK {
		t.Fatalf("at Retry-After: %d %s", a.Status, a.Body)
	}
	if n := len(p.up.seen()); n != 2 {
		t.Fatalf("the upstream saw %d requests, want 2", n)
	}
}

// A body past maxBody, and an estimate past the tpm limit's burst, are
// answered 413.
func TestTooLarge(t *testing.T) {
	p := newLocal(t, Limits{Requests: 100, Tokens: 10_000, Period: time.Minute})
	big := append(chatBody(10, false, "")[:1], bytes.Repeat([]byte(" "), maxBody)...)
	for _, body := range [][]byte{big, chatBody(20_000, false, "")} {
		if a := p.send(t, "sk-big", body, 10); a.Status != http.StatusRequestEntityTooLarge {
			t.Errorf("%d bytes: %d %s, want 413", len(body), a.Status, a.Body)
		}
	}
	if n := len(p.up.seen()); n != 0 {
		t.Fatalf("the upstream saw %d requests", n)
	}
}

// The load of TestAcrossProcesses: loadKeys API keys, each sent to by
// loadClients clients in each of loadProcs proxy processes over one Redis,
// for loadRun, under loadLimits: a bucket of 1000 tokens refilled at 1000
// a second, and a debt allowance of 600.
var loadLimits = Limits{Requests: 100_000, Tokens: 1000, Debt: loadDebt, Period: time.Second}

const (
	loadProcs   = 2
	loadKeys    = 3
	loadClients = 2
	loadRun     = 3 * time.Second
	loadDebt    = 600
	// loadOver is the most a request uses past its estimate. A key in
	// debt admits nothing, so its debt is owed by the requests in flight
	// when it last had tokens: at most loadProcs·loadClients of them (a
	// client sends its next request once its last is settled), owing
	// loadOver each, all of the allowance. No charge is forgiven, so what
	// the upstream reports is what the store counted.
	loadOver = loadDebt / (loadProcs * loadClients)
	// clockSlack allows for the Redis server's clock, which times the
	// decisions, and this process's, which times the spans.
	clockSlack = 2 * time.Millisecond

	childEnv = "LLMPROXY_TEST_CHILD"
	addrMark = "llmproxy-listening: "
)

// childConfig is what a child process of TestAcrossProcesses runs.
type childConfig struct {
	Upstream, Redis string
	Limits          Limits
}

// admitted is a request the proxy let through, as its client saw it: sent
// at Sent, its answer read to its end at Done (both since the run's
// start), its estimate and the tokens the upstream reported.
type admitted struct {
	ID               string
	Sent, Done       time.Duration
	Estimate, Tokens int64
}

// TestAcrossProcesses runs the proxy in two processes over one Redis,
// sends to both from clients of three API keys a mix of streamed and plain
// requests, each using between half its estimate and loadOver past it,
// and checks, per key, the tokens the upstream reported for the requests
// the proxies admitted against the bound of SEMANTICS.md ("Charges and
// debt"): in every span [a, b], the tokens taken and charged ≤ the
// bucket's burst + what it refills in b − a + the debt allowance + the
// tokens refunded.
//
// The store decides at times this process does not see, but each request
// spends within the span its client knows: it is taken after the client
// sent it, and settled before the client read its answer to the end (the
// proxy's handler settles before it returns, and a chunked answer ends
// only then). So the check counts, in each span from one request's Sent
// to another's Done, the tokens of the requests wholly inside it (what
// they spent in all: their estimate, plus the charge or less the refund),
// and allows, beside the bound, the refunds of those that overlap it: a
// request taken before the span and settled in it gives back its refund
// there. And the limit is reached: each key is refused by the tpm policy.
func TestAcrossProcesses(t *testing.T) {
	if _, child := childproc.Config(childEnv); child {
		t.Skip("in a child process")
	}
	srv := redistest.Standalone(t)
	up := newUpstream(t)
	env, err := json.Marshal(childConfig{Upstream: up.URL, Redis: srv.Addr(), Limits: loadLimits})
	if err != nil {
		t.Fatal(err)
	}
	var bases []string
	var children []*childproc.Child
	for range loadProcs {
		addr := make(chan string, 1)
		c := childproc.Start(t, "TestProxyChild", []string{childEnv + "=" + string(env)}, 2*time.Minute, func(line string) bool {
			a, ok := strings.CutPrefix(line, addrMark)
			if ok {
				addr <- a
			}
			return ok
		})
		c.WaitReady(t, 30*time.Second)
		bases, children = append(bases, <-addr), append(children, c)
	}
	seed := testenv.Seed(t)
	reqs, refused := runLoad(t, seed, bases)
	for i, c := range children {
		c.CloseInput()
		err := c.Wait()
		if out := c.Output(); err != nil || regexp.MustCompile(`(?m)^\d{4}/\d\d/\d\d `).MatchString(out) {
			t.Errorf("proxy process %d: %v, and logged:\n%s", i, err, out)
		}
	}
	checkServed(t, up.seen(), reqs)
	for k := range loadKeys {
		key := loadKey(seed, k)
		checkBound(t, key, reqs[key], loadLimits)
		t.Logf("%s: %d refusals by tpm, %d by rpm", key, refused[key]["tpm"], refused[key]["rpm"])
		if refused[key]["tpm"] == 0 || refused[key]["rpm"] != 0 {
			t.Errorf("%s: refused %v times; want the tpm limit reached, and the rpm limit not", key, refused[key])
		}
	}
}

func loadKey(seed uint64, k int) string { return fmt.Sprintf("sk-load-%d-%d", seed, k) }

// runLoad sends the load to the proxies at bases, and returns the requests
// admitted and the refusals by policy, per key.
func runLoad(t *testing.T, seed uint64, bases []string) (map[string][]admitted, map[string]map[string]int) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * loadKeys * loadClients}}
	defer client.CloseIdleConnections()
	reqs := map[string][]admitted{}
	refused := map[string]map[string]int{}
	for k := range loadKeys {
		refused[loadKey(seed, k)] = map[string]int{}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	start := time.Now()
	for i := range loadKeys * loadProcs * loadClients {
		key, base := loadKey(seed, i%loadKeys), bases[i/loadKeys%loadProcs]
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, uint64(i)))
			for n := 0; time.Since(start) < loadRun; n++ {
				opts := []string{"", `{"include_usage":true}`}[r.IntN(2)]
				body := chatBody(20+r.Int64N(180), r.IntN(2) == 0, opts)
				_, est := inspect(body)
				tokens := est/2 + r.Int64N(est-est/2+loadOver+1) // from est/2 to est + loadOver
				id := fmt.Sprintf("%d/%d", i, n)
				sent := time.Since(start)
				a, err := send(client, base, "Bearer "+key, id, body, tokens)
				done := time.Since(start)
				mu.Lock()
				switch {
				case err != nil:
					errs = append(errs, err)
				case a.Status == http.StatusOK && strings.Contains(a.Body, fmt.Sprintf(`"total_tokens":%d}`, tokens)):
					reqs[key] = append(reqs[key], admitted{id, sent, done, est, tokens})
				case a.Status == http.StatusTooManyRequests && retryAfter(a) >= 1 && len(a.violated()) > 0:
					for _, p := range a.violated() {
						refused[key][p]++
					}
				default:
					errs = append(errs, fmt.Errorf("%d, Retry-After %q: %s", a.Status, a.Header.Get("Retry-After"), a.Body))
				}
				mu.Unlock()
				if err != nil || a.Status != http.StatusOK {
					time.Sleep(time.Duration(r.Int64N(int64(10 * time.Millisecond))))
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d requests failed; the first: %v", len(errs), errs[0])
	}
	return reqs, refused
}

// checkServed checks that the upstream served exactly the requests the
// clients saw admitted, each streamed one asking for its usage.
func checkServed(t *testing.T, seen []served, reqs map[string][]admitted) {
	byID := map[string]served{}
	for _, s := range seen {
		byID[s.ID] = s
		if s.Stream && !s.AskedUsage {
			t.Errorf("request %s: a stream sent upstream without stream_options.include_usage", s.ID)
		}
	}
	n := 0
	for key, rs := range reqs {
		for _, r := range rs {
			if s, ok := byID[r.ID]; !ok || s.Auth != "Bearer "+key || s.Tokens != r.Tokens {
				t.Errorf("request %s of %s, %d tokens: the upstream saw %+v", r.ID, key, r.Tokens, s)
			}
			n++
		}
	}
	if n != len(seen) {
		t.Errorf("the upstream served %d requests, the clients saw %d admitted", len(seen), n)
	}
}

// checkBound checks key's admitted requests against the bound (see
// TestAcrossProcesses), and logs the figures.
func checkBound(t *testing.T, key string, reqs []admitted, l Limits) {
	if len(reqs) == 0 {
		t.Errorf("%s: no request admitted", key)
		return
	}
	allowance := func(span time.Duration) int64 { // the bucket's burst, its refill and the debt allowance
		return l.Tokens + int64((span+clockSlack)*time.Duration(l.Tokens)/l.Period) + l.Debt
	}
	var total, over int64
	var closest, closestIn, perPeriod int64 = -1 << 62, 0, 0
	var worst string
	for _, a := range reqs {
		for _, b := range reqs {
			if b.Done < a.Sent {
				continue
			}
			from, to := a.Sent, b.Done
			var in, refunds int64
			for _, r := range reqs {
				switch {
				case r.Sent >= from && r.Done <= to:
					in += r.Tokens
				case r.Sent <= to && r.Done >= from && r.Tokens < r.Estimate:
					refunds += r.Estimate - r.Tokens
				}
			}
			bound := allowance(to-from) + refunds
			if in > bound {
				over++
			}
			if in-bound > closest {
				closest, closestIn = in-bound, in
				worst = fmt.Sprintf("%d tokens admitted in [%v, %v], bound %d (%d refunded around it)", in, from, to, bound, refunds)
			}
			if to-from <= l.Period {
				perPeriod = max(perPeriod, in)
			}
		}
		total += a.Tokens
	}
	if over > 0 {
		t.Errorf("%s: %d spans past the bound; the worst: %s", key, over, worst)
	}
	first, last := reqs[0].Sent, reqs[0].Done
	for _, r := range reqs {
		first, last = min(first, r.Sent), max(last, r.Done)
	}
	t.Logf("%s: %d requests admitted, %d tokens in %v (bound %d); at most %d in a span of %v or less (bound %d); closest span: %d tokens, %d under its bound",
		key, len(reqs), total, (last - first).Round(time.Millisecond), allowance(last-first), perPeriod, l.Period, allowance(l.Period), closestIn, -closest)
	// Under a saturating load the key is admitted its rate over the run,
	// and goes into debt: some span has more than the burst and the refill.
	if closest <= -l.Debt && testenv.Timing(t, "a key went into debt") {
		t.Errorf("%s: no span had more tokens than the burst and the refill: the debt allowance is not checked", key)
	}
	if want := int64(loadRun) * l.Tokens / int64(l.Period) * 8 / 10; total < want && testenv.Timing(t, "a key admitted 80% of its rate over the run") {
		t.Errorf("%s: %d tokens admitted over the run, want at least %d", key, total, want)
	}
}

// TestProxyChild is one proxy process of TestAcrossProcesses: it serves
// on a loopback port, which it prints, until its input is closed.
func TestProxyChild(t *testing.T) {
	raw, ok := childproc.Config(childEnv)
	if !ok {
		t.Skip("a child process of TestAcrossProcesses")
	}
	var cfg childConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	up, err := url.Parse(cfg.Upstream)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := newLimiter(cfg.Redis)
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewProxy(up, lim, cfg.Limits)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	defer srv.Close()
	fmt.Println(addrMark + "http://" + ln.Addr().String())
	childproc.Ready()
	for {
		if _, err := childproc.ReadLine(); err != nil {
			return
		}
	}
}
