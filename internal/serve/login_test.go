package serve

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// A browser cannot send the bearer token: it is shown a form, posts the
// token, and gets a session cookie that opens the console and nothing else.
func TestConsoleLogin(t *testing.T) {
	ts, _ := startTest(t, Options{HTTPToken: "s3cret", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "console") })})
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path, body string, hdr ...string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, ts.base+path, strings.NewReader(body))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	const form = "application/x-www-form-urlencoded"

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
	resp, _ = do("POST", "/console/login", url.Values{"token": {"s3cret"}}.Encode(), "Content-Type", form)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" || len(resp.Cookies()) != 1 {
		t.Fatalf("the right token: %d %q, cookies %v", resp.StatusCode, resp.Header.Get("Location"), resp.Cookies())
	}
	c := resp.Cookies()[0]
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || strings.Contains(c.Value, "s3cret") {
		t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict, no token in it", c)
	}
	cookie := c.Name + "=" + c.Value
	if resp, body := do("GET", "/", "", "Cookie", cookie); resp.StatusCode != 200 || body != "console" {
		t.Errorf("the console with the session: %d %q", resp.StatusCode, body)
	}
	if resp, _ := do("GET", "/console/api/live", "", "Cookie", cookie); resp.StatusCode == 401 {
		t.Errorf("the console's JSON with the session: 401")
	}
	for _, p := range []string{"/metrics", "/debug/config"} {
		if resp, _ := do("GET", p, "", "Cookie", cookie); resp.StatusCode != 401 {
			t.Errorf("%s with only the session: %d, want 401", p, resp.StatusCode)
		}
	}
	if resp, _ := do("POST", "/v1/take", `{"key":"k","limit":"1/1s"}`, "Cookie", cookie); resp.StatusCode != 401 {
		t.Errorf("/v1/take with only the session: %d, want 401", resp.StatusCode)
	}
	if resp, _ := do("GET", "/", "", "Cookie", cookieName+"=forged"); resp.StatusCode != 401 {
		t.Errorf("a forged session: %d, want 401", resp.StatusCode)
	}
}
