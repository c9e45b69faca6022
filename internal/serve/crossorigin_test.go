package serve

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// A web page of another site cannot make a visitor's browser decide: the
// red team's no-cors fetch (Origin https://evil.example, text/plain) to
// /v1/take and /json, a cross-site form to the sign-in, and a cross-site
// POST to the console mounted at "/" are refused with 403 and spend nothing;
// programs (no Origin, any Content-Type) and the console's own page pass.
func TestCrossSiteRefused(t *testing.T) {
	reached := 0
	ts, _ := startTest(t, Options{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached++ })})
	take := `{"key": "victim", "limit": "2/1m"}`
	evil := []string{"Origin", "https://evil.example", "Content-Type", "text/plain"}
	for _, path := range []string{"/v1/take", "/json"} {
		body := take
		if path == "/json" {
			body = `{"domain": "test", "descriptors": [{"entries": [{"key": "key1", "value": "value1"}]}]}`
		}
		for _, hdr := range [][]string{evil, {"Sec-Fetch-Site", "cross-site", "Content-Type", "text/plain"}, {"Origin", "http://127.0.0.1:1", "Sec-Fetch-Site", "same-site"}} {
			if resp, out := httpPost(t, ts.base+path, body, hdr...); resp.StatusCode != http.StatusForbidden || !strings.Contains(out, "another origin") {
				t.Errorf("%s %v: %d %s, want 403", path, hdr, resp.StatusCode, out)
			}
		}
	}
	if resp, _ := httpPost(t, ts.base+"/console/api/sim", `{}`, evil...); resp.StatusCode != http.StatusForbidden || reached != 0 {
		t.Errorf("the console: %d, reached %d times; want 403 and never", resp.StatusCode, reached)
	}
	// Nothing was spent: a program's two calls pass (2/1m), the third is
	// refused. curl -d sends a form's type with its JSON; the console's own
	// page sends Sec-Fetch-Site same-origin.
	for i, hdr := range [][]string{
		{"Content-Type", "application/x-www-form-urlencoded"},
		{"Origin", ts.base, "Sec-Fetch-Site", "same-origin", "Content-Type", "application/json"},
		{"Content-Type", "application/json"},
	} {
		resp, out := httpPost(t, ts.base+"/v1/take", take, hdr...)
		var r TakeResponse
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("call %d %v: %d %s", i, hdr, resp.StatusCode, out)
		}
		if want := i < 2; r.Allowed != want {
			t.Errorf("call %d %v: %s, want allowed %v", i, hdr, out, want)
		}
	}
	if resp, _ := httpPost(t, ts.base+"/console/api/sim", `{}`, "Origin", ts.base, "Content-Type", "text/plain"); resp.StatusCode != 200 || reached != 1 {
		t.Errorf("the console from its own origin: %d, reached %d times", resp.StatusCode, reached)
	}

	// With a token, the sign-in form: another site's is refused before the
	// token is looked at, the console's own signs in.
	ts, _ = startTest(t, Options{HTTPToken: "s3cret", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "console") })})
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	login := func(hdr ...string) *http.Response {
		req, _ := http.NewRequest("POST", ts.base+loginPath, strings.NewReader(url.Values{"token": {"s3cret"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := login("Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"); resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
		t.Errorf("sign-in from another site: %d, cookies %v; want 403 and none", resp.StatusCode, resp.Cookies())
	}
	if resp := login("Origin", ts.base, "Sec-Fetch-Site", "same-origin"); resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		t.Errorf("sign-in from the form: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
}
