package serve

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// fakeLogin admits the requests with a cookie "in", and answers the
// refused requests for /page itself.
type fakeLogin struct{}

func (fakeLogin) Admits(r *http.Request) bool {
	_, err := r.Cookie("in")
	return err == nil
}

func (fakeLogin) Refuse(w http.ResponseWriter, r *http.Request) bool {
	if r.URL.Path != "/page" {
		return false
	}
	w.WriteHeader(http.StatusUnauthorized)
	io.WriteString(w, "sign in")
	return true
}

// requireToken lets the probes, the bearer token and what the Login admits
// through; a refused request is the Login's to answer if it will, else a
// 401 that asks for the token; without a Login only the token opens.
func TestRequireToken(t *testing.T) {
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "in") })
	for _, c := range []struct {
		login  Login
		path   string
		hdr    []string
		code   int
		body   string
		asking bool // WWW-Authenticate set
	}{
		{fakeLogin{}, "/healthz", nil, 200, "in", false},
		{fakeLogin{}, "/readyz", nil, 200, "in", false},
		{fakeLogin{}, "/healthcheck", nil, 200, "in", false},
		{fakeLogin{}, "/metrics", []string{"Authorization", "Bearer s3cret"}, 200, "in", false},
		{fakeLogin{}, "/metrics", []string{"Authorization", "Bearer wrong"}, 401, "a bearer token is required", true},
		{fakeLogin{}, "/metrics", []string{"Authorization", "s3cret"}, 401, "a bearer token is required", true},
		{fakeLogin{}, "/metrics", []string{"Cookie", "in=1"}, 200, "in", false},
		{fakeLogin{}, "/page", nil, 401, "sign in", true},
		{fakeLogin{}, "/other", nil, 401, "a bearer token is required", true},
		{nil, "/page", nil, 401, "a bearer token is required", true},
		{nil, "/page", []string{"Cookie", "in=1"}, 401, "a bearer token is required", true},
		{nil, "/page", []string{"Authorization", "Bearer s3cret"}, 200, "in", false},
	} {
		req := httptest.NewRequest("GET", c.path, nil)
		for i := 0; i+1 < len(c.hdr); i += 2 {
			req.Header.Set(c.hdr[i], c.hdr[i+1])
		}
		w := httptest.NewRecorder()
		requireToken("s3cret", c.login, next).ServeHTTP(w, req)
		asking := w.Header().Get("WWW-Authenticate") == `Bearer realm="sluice"`
		if w.Code != c.code || !strings.HasPrefix(w.Body.String(), c.body) || asking != c.asking {
			t.Errorf("login %T, %s %v: %d %q (asking for the token: %v), want %d %q (%v)",
				c.login, c.path, c.hdr, w.Code, w.Body.String(), asking, c.code, c.body, c.asking)
		}
	}
}

// On the listener: with a token, a Login's way in opens what it admits and
// its refusals answer as it answers them.
func TestLoginMounted(t *testing.T) {
	ts, _ := startTest(t, Options{HTTPToken: "s3cret", Login: fakeLogin{}, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "console") })})
	if code, body := httpGet(t, ts.base+"/page"); code != 401 || body != "sign in" {
		t.Errorf("/page without a session: %d %q", code, body)
	}
	if code, body := httpGet(t, ts.base+"/page", "Cookie", "in=1"); code != 200 || body != "console" {
		t.Errorf("/page with a session: %d %q", code, body)
	}
	if code, _ := httpGet(t, ts.base+"/metrics"); code != 401 {
		t.Errorf("/metrics without a session: %d, want 401", code)
	}
}
