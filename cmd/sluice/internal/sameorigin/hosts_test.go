package sameorigin

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The Host a request names, against the names a listener answers to: IP
// literals, localhost and the listener's own name always; other names when
// allowed, one by one, by suffix, or all.
func TestHosts(t *testing.T) {
	for _, tc := range []struct {
		own     string
		allowed []string
		pass    []string
		refuse  []string
	}{
		{"127.0.0.1:8080", nil,
			[]string{"127.0.0.1:8080", "127.0.0.1", "127.0.0.1:9", "localhost:8080", "LOCALHOST.:8080", "app.localhost:8080", "[::1]:8080", "[::1]", "::1",
				"10.0.0.5:8080", "[fe80::1%25eth0]:8080", ""},
			[]string{"evil.example:8080", "evil.example", "127.0.0.1.nip.io:8080", "localhost.evil.example:8080", "sluice:8080", "localhost:8080.evil.example"}},
		{"sluice.internal:8080", nil,
			[]string{"sluice.internal:8080", "Sluice.Internal", "sluice.internal.:80"},
			[]string{"evil.example:8080", "api.sluice.internal:8080"}},
		{"0.0.0.0:8080", []string{"sluice", ".example.com", " ratelimit.svc.cluster.local "},
			[]string{"sluice:8080", "example.com", "api.example.com:8080", "a.b.example.com", "ratelimit.svc.cluster.local:8080", "192.168.1.9:8080"},
			[]string{"evil.example:8080", "notexample.com", "sluice.evil.example", "example.com.evil.example"}},
		{"", []string{AnyHost}, []string{"evil.example:8080", "anything"}, nil},
	} {
		h, err := NewHosts(tc.own, tc.allowed)
		if err != nil {
			t.Fatal(err)
		}
		for _, host := range tc.pass {
			if !h.Allows(host) {
				t.Errorf("own %q, allowed %q: Host %q refused", tc.own, tc.allowed, host)
			}
		}
		for _, host := range tc.refuse {
			if h.Allows(host) {
				t.Errorf("own %q, allowed %q: Host %q allowed", tc.own, tc.allowed, host)
			}
		}
	}
	for _, bad := range []string{"http://sluice", "sluice:8080", "*.example.com", "", "a..b", "sl uice"} {
		if _, err := NewHosts("", []string{bad}); err == nil || !strings.Contains(err.Error(), "want a name") {
			t.Errorf("allowed host %q: %v", bad, err)
		}
	}
}

// The red team's request: a page on a rebinding domain, same-origin to
// itself, is refused 421 before the handler, with the flag that would
// allow the name; the probes are not checked.
func TestHostsHandler(t *testing.T) {
	h, err := NewHosts("127.0.0.1:8080", nil)
	if err != nil {
		t.Fatal(err)
	}
	reached := false
	handler := h.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true }),
		func(r *http.Request) bool { return r.URL.Path == "/healthz" })
	for _, tc := range []struct {
		path, host string
		pass       bool
	}{
		{"/v1/acquire", "evil.example:8080", false},
		{"/console/api/live", "evil.example:8080", false},
		{"/v1/acquire", "127.0.0.1:8080", true},
		{"/healthz", "evil.example:8080", true},
	} {
		reached = false
		r := httptest.NewRequest("POST", "http://"+tc.host+tc.path, strings.NewReader(`{}`))
		r.Header.Set("Origin", "http://"+tc.host)
		r.Header.Set("Sec-Fetch-Site", "same-origin")
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		body, _ := io.ReadAll(w.Result().Body)
		if tc.pass != reached || (!tc.pass && (w.Code != http.StatusMisdirectedRequest || !strings.Contains(string(body), "--allowed-hosts evil.example"))) {
			t.Errorf("%s Host %s: %d %q, reached %v", tc.path, tc.host, w.Code, body, reached)
		}
	}
}
