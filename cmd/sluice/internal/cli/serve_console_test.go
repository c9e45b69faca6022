package cli

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/cmd/sluice/internal/serve"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// With --http-token, the console's sign-in on the service: a browser, which
// cannot send the bearer token, is shown a form, posts the token, and gets
// a session cookie that opens the console and nothing else; a sign-in
// another site's page makes a browser post is refused.
func TestServeConsoleLogin(t *testing.T) {
	base := serveWithConsole(t, serve.Options{HTTPToken: "s3cret"})
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path, body string, hdr ...string) (*http.Response, string) {
		t.Helper()
		return testenv.Do(t, client, method, base+path, body, hdr...)
	}
	const form = "application/x-www-form-urlencoded"
	signIn := url.Values{"token": {"s3cret"}}.Encode()

	resp, body := do("GET", "/", "", "Accept", "text/html,application/xhtml+xml")
	if resp.StatusCode != 401 || !strings.Contains(body, `action="/console/login"`) {
		t.Fatalf("a browser without a session: %d\n%s", resp.StatusCode, body)
	}
	if resp, _ := do("GET", "/metrics", "", "Accept", "text/html"); resp.StatusCode != 401 {
		t.Errorf("/metrics from a browser: %d, want 401", resp.StatusCode)
	}
	resp, _ = do("POST", "/console/login", url.Values{"token": {"wrong"}}.Encode(), "Content-Type", form)
	if resp.StatusCode != 401 || len(resp.Cookies()) != 0 {
		t.Errorf("a wrong token: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	resp, _ = do("POST", "/console/login", signIn, "Content-Type", form, "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site")
	if resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
		t.Errorf("a sign-in from another site: %d, cookies %v; want 403 and none", resp.StatusCode, resp.Cookies())
	}
	resp, _ = do("POST", "/console/login", signIn, "Content-Type", form, "Origin", base, "Sec-Fetch-Site", "same-origin")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" || len(resp.Cookies()) != 1 {
		t.Fatalf("the right token: %d %q, cookies %v", resp.StatusCode, resp.Header.Get("Location"), resp.Cookies())
	}
	c := resp.Cookies()[0]
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || strings.Contains(c.Value, "s3cret") {
		t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict, no token in it", c)
	}
	cookie := c.Name + "=" + c.Value
	if resp, body := do("GET", "/", "", "Cookie", cookie); resp.StatusCode != 200 || !strings.Contains(body, "<html") {
		t.Errorf("the console with the session: %d %.200q", resp.StatusCode, body)
	}
	if resp, _ := do("GET", "/console/api/live", "", "Cookie", cookie); resp.StatusCode != 200 {
		t.Errorf("the console's JSON with the session: %d", resp.StatusCode)
	}
	for _, p := range []string{"/metrics", "/debug/config"} {
		if resp, _ := do("GET", p, "", "Cookie", cookie); resp.StatusCode != 401 {
			t.Errorf("%s with only the session: %d, want 401", p, resp.StatusCode)
		}
	}
	if resp, _ := do("POST", "/v1/take", `{"key":"k","limit":"1/1s"}`, "Cookie", cookie); resp.StatusCode != 401 {
		t.Errorf("/v1/take with only the session: %d, want 401", resp.StatusCode)
	}
	if resp, _ := do("GET", "/", "", "Cookie", c.Name+"=forged"); resp.StatusCode != 401 {
		t.Errorf("a forged session: %d, want 401", resp.StatusCode)
	}
	if resp, _ := do("GET", "/", "", "Authorization", "Bearer s3cret"); resp.StatusCode != 200 {
		t.Errorf("the console with the token: %d", resp.StatusCode)
	}
}

// serveWithConsole runs the service of o with its console on loopback
// listeners until the test ends, and returns its HTTP base URL.
func serveWithConsole(t *testing.T, o serve.Options) string {
	t.Helper()
	base, _ := serveWithConsoleAddrs(t, o)
	return base
}

// serveWithConsoleAddrs is serveWithConsole, and also returns the gRPC
// listener's address.
func serveWithConsoleAddrs(t *testing.T, o serve.Options) (base, grpcAddr string) {
	t.Helper()
	var lns [2]net.Listener
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
	}
	o.GRPCListener, o.HTTPListener, o.NoWatch = lns[0], lns[1], true
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runServe(ctx, o, true) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runServe: %v", err)
		}
	})
	return "http://" + lns[1].Addr().String(), lns[0].Addr().String()
}

// Takes by key show in Live as the rule (take), their refused keys among
// the refused keys, as acquires by key show as (acquire): the red team's
// 94k by-key takes, 47k refused, showed as nothing and "No refusals
// recently".
func TestServeConsoleTakeByKey(t *testing.T) {
	base := serveWithConsole(t, serve.Options{KeyForm: true})
	for range 6 {
		testenv.Do(t, http.DefaultClient, "POST", base+"/v1/take", `{"key": "partner:acme", "limit": "2/1m"}`)
	}
	testenv.Do(t, http.DefaultClient, "POST", base+"/v1/take", `{"key": "partner:acme", "limit": "two a minute"}`) // decides nothing
	testenv.Do(t, http.DefaultClient, "POST", base+"/v1/acquire", `{"key": "exports", "limit": 1, "lifetime": "1m"}`)
	testenv.Do(t, http.DefaultClient, "POST", base+"/v1/acquire", `{"key": "exports", "limit": 1, "lifetime": "1m"}`)
	resp, body := testenv.Do(t, http.DefaultClient, "GET", base+"/console/api/live", "")
	var live struct {
		Rules []struct {
			Rule   string `json:"rule"`
			Totals struct {
				Allowed int64 `json:"allowed"`
				Denied  int64 `json:"denied"`
				Error   int64 `json:"error"`
			} `json:"totals"`
		} `json:"rules"`
		Top []struct {
			Rule  string `json:"rule"`
			Key   string `json:"key"`
			Count int64  `json:"count"`
		} `json:"top"`
	}
	if err := json.Unmarshal([]byte(body), &live); resp.StatusCode != 200 || err != nil {
		t.Fatalf("%d %v %.300s", resp.StatusCode, err, body)
	}
	got := map[string][3]int64{}
	for _, r := range live.Rules {
		got[r.Rule] = [3]int64{r.Totals.Allowed, r.Totals.Denied, r.Totals.Error}
	}
	if got[serve.TakePolicy] != [3]int64{2, 4, 0} || got[serve.AcquirePolicy] != [3]int64{1, 1, 0} {
		t.Errorf("Live's rules: %v, want (take) 2 allowed and 4 denied, (acquire) 1 and 1", got)
	}
	refused := map[string]int64{}
	for _, r := range live.Top {
		refused[r.Rule+" "+r.Key] = r.Count
	}
	if refused["(take) partner:acme"] != 4 || refused["(acquire) exports"] != 1 {
		t.Errorf("Live's refused keys: %v", refused)
	}
	// The page lists them too, without the script.
	_, page := testenv.Do(t, http.DefaultClient, "GET", base+"/", "")
	if !strings.Contains(page, "partner:acme") || strings.Contains(page, "No refusals recently") {
		t.Errorf("the page does not list partner:acme among the refused keys")
	}
}

// The step-through and the playground have URLs of their own: GET shows
// the page there (their forms post to them).
func TestServeConsoleURLs(t *testing.T) {
	base := serveWithConsole(t, serve.Options{KeyForm: true})
	for _, p := range []string{"/console/steps", "/console/playground"} {
		resp, body := testenv.Do(t, http.DefaultClient, "GET", base+p, "")
		if resp.StatusCode != 200 || !strings.Contains(body, `<form id="steps-form" method="post" action="/console/steps#steps">`) {
			t.Errorf("GET %s: %d %.200q", p, resp.StatusCode, body)
		}
	}
}

// The console is behind the service's Host check: a page on a rebinding
// domain reads none of it and runs nothing (421), as with the HTTP API;
// the names --allowed-hosts gives pass.
func TestServeConsoleRebinding(t *testing.T) {
	var f serveFlags
	fs := f.define()
	if err := fs.Parse([]string{"--allowed-hosts", "sluice.internal, .example.com"}); err != nil {
		t.Fatal(err)
	}
	o, done, err := f.options(io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	done()
	if strings.Join(o.AllowedHosts, " ") != "sluice.internal .example.com" {
		t.Fatalf("--allowed-hosts: %q", o.AllowedHosts)
	}
	base := serveWithConsole(t, serve.Options{AllowedHosts: o.AllowedHosts})
	port := base[strings.LastIndexByte(base, ':'):]
	do := func(method, path, host, ctype, body string) int {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		req.Header.Set("Origin", "http://"+host)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	const form = "application/x-www-form-urlencoded"
	for _, c := range []struct{ method, path, ctype, body string }{
		{"GET", "/", "", ""},
		{"GET", "/console/api/live", "", ""},
		{"GET", "/console/api/config", "", ""},
		{"GET", "/console/steps", "", ""},
		{"POST", "/console/steps", form, "requests=0ms"},
		{"POST", "/console/api/sim", "application/json", "{}"},
		{"GET", "/console/assets/console.js", "", ""},
	} {
		if code := do(c.method, c.path, "evil.example"+port, c.ctype, c.body); code != http.StatusMisdirectedRequest {
			t.Errorf("%s %s, Host evil.example: %d, want 421", c.method, c.path, code)
		}
		for _, host := range []string{"127.0.0.1" + port, "localhost" + port, "sluice.internal" + port, "console.example.com" + port} {
			// 503: a run asked for while the last rests (one at a time).
			if code := do(c.method, c.path, host, c.ctype, c.body); code != 200 && code != http.StatusServiceUnavailable {
				t.Errorf("%s %s, Host %s: %d, want 200", c.method, c.path, host, code)
			}
		}
	}
}
