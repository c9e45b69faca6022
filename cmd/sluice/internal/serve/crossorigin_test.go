package serve

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// A web page of another site cannot make a visitor's browser decide: the
// red team's no-cors fetch (Origin https://evil.example, text/plain) to
// /v1/take and /json (and /v1/charge and /v1/settle, which spend too), a cross-site form to the sign-in, and a cross-site
// POST to the console mounted at "/" are refused with 403 and spend nothing;
// programs (no Origin, any Content-Type) and the console's own page pass.
func TestCrossSiteRefused(t *testing.T) {
	reached := 0
	ts, _ := startTest(t, Options{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached++ })})
	take := `{"key": "victim", "limit": "2/1m"}`
	evil := []string{"Origin", "https://evil.example", "Content-Type", "text/plain"}
	for path, body := range map[string]string{
		"/v1/take":   take,
		"/v1/charge": `{"key": "victim", "limit": "2/1m", "cost": 2}`,
		"/v1/settle": `{"key": "victim", "limit": "2/1m", "estimate": 0, "actual": 2, "take": {"allowed": true}}`,
		"/json":      `{"domain": "test", "descriptors": [{"entries": [{"key": "key1", "value": "value1"}]}]}`,
	} {
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

	// With a token and a Login, another site's POST is refused before the
	// token or the Login is asked (the console's own sign-in, end to end:
	// internal/cli's TestServeConsoleLogin).
	reached = 0
	ts, _ = startTest(t, Options{HTTPToken: "s3cret", Login: fakeLogin{}, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached++ })})
	if resp, _ := httpPost(t, ts.base+"/console/login", "token=s3cret", "Cookie", "in=1", "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site",
		"Content-Type", "application/x-www-form-urlencoded"); resp.StatusCode != http.StatusForbidden || reached != 0 {
		t.Errorf("a sign-in from another site: %d, reached %d times; want 403 and never", resp.StatusCode, reached)
	}
	if resp, _ := httpPost(t, ts.base+"/console/login", "token=s3cret", "Cookie", "in=1", "Origin", ts.base, "Sec-Fetch-Site", "same-origin",
		"Content-Type", "application/x-www-form-urlencoded"); resp.StatusCode != http.StatusOK || reached != 1 {
		t.Errorf("a sign-in from the form: %d, reached %d times; want 200 and once", resp.StatusCode, reached)
	}
}
