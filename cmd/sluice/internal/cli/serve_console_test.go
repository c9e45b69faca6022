package cli

import (
	"context"
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
	var lns [2]net.Listener
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
	}
	base := "http://" + lns[1].Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runServe(ctx, serve.Options{GRPCListener: lns[0], HTTPListener: lns[1], HTTPToken: "s3cret", NoWatch: true,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, true)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runServe: %v", err)
		}
	}()
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
