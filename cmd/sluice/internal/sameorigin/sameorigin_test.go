package sameorigin

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Requests as browsers and programs send them to sluice.example:8080: the
// ones a page of another origin makes a browser send, whatever their body's
// type, are refused before the handler; same-origin pages, top-level
// navigations, programs and reads pass.
func TestHandler(t *testing.T) {
	for _, tc := range []struct {
		name, method string
		hdr          []string // name, value, ...
		pass         bool
	}{
		{"the red team's: no-cors fetch from another site", "POST", []string{"Origin", "https://evil.example", "Content-Type", "text/plain"}, false},
		{"a form of another site", "POST", []string{"Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site", "Content-Type", "application/x-www-form-urlencoded"}, false},
		{"another port of the same host (same-site, not same-origin)", "POST", []string{"Origin", "http://sluice.example:9090", "Sec-Fetch-Site", "same-site"}, false},
		{"a sandboxed page (Origin null)", "POST", []string{"Origin", "null", "Content-Type", "text/plain"}, false},
		{"another site claiming JSON (a CORS preflight would fail anyway)", "PUT", []string{"Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site", "Content-Type", "application/json"}, false},
		{"the console's own page", "POST", []string{"Origin", "http://sluice.example:8080", "Sec-Fetch-Site", "same-origin", "Content-Type", "application/x-www-form-urlencoded"}, true},
		{"the console's own page, a browser without Sec-Fetch-Site", "POST", []string{"Origin", "http://sluice.example:8080", "Content-Type", "application/json"}, true},
		{"typed in the address bar", "POST", []string{"Sec-Fetch-Site", "none"}, true},
		{"curl -d (form type, JSON body)", "POST", []string{"Content-Type", "application/x-www-form-urlencoded"}, true},
		{"a JSON client", "POST", []string{"Content-Type", "application/json"}, true},
		{"a read from another site", "GET", []string{"Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reached := false
			h := Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true }))
			r := httptest.NewRequest(tc.method, "http://sluice.example:8080/v1/take", strings.NewReader(`{"key":"k","limit":"1/1s"}`))
			for i := 0; i+1 < len(tc.hdr); i += 2 {
				r.Header.Set(tc.hdr[i], tc.hdr[i+1])
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			body, _ := io.ReadAll(w.Result().Body)
			if tc.pass {
				if !reached || w.Code != 200 {
					t.Errorf("%d %q, reached %v: want the handler to run", w.Code, body, reached)
				}
				return
			}
			if reached || w.Code != http.StatusForbidden || !strings.Contains(string(body), "another origin") {
				t.Errorf("%d %q, reached %v: want 403 and the handler not run", w.Code, body, reached)
			}
		})
	}
}
