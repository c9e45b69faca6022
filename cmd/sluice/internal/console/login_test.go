package console

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// The console's sign-in: what Admits lets in without the bearer token, what
// Refuse answers, and the sign-in itself (the service's side: serve's
// TestRequireToken; the two together: cli's TestServeConsoleLogin).
func TestLogin(t *testing.T) {
	c, _ := newTestConsole(t, Options{Token: "s3cret"})
	none, _ := newTestConsole(t, Options{})
	session := cookieName + "=" + sessionValue("s3cret")
	browser := []string{"Accept", "text/html,application/xhtml+xml"}
	for _, tc := range []struct {
		con          *Console
		method, path string
		hdr          []string
		admits       bool
		refuses      bool // Refuse answers with the sign-in form
	}{
		{c, "POST", "/console/login", nil, true, false},
		{c, "GET", "/console/login", browser, false, true},
		{c, "GET", "/", []string{"Cookie", session}, true, false},
		{c, "GET", "/console/api/live", []string{"Cookie", session}, true, false},
		{c, "POST", "/console/api/sim", []string{"Cookie", session}, true, false},
		{c, "GET", "/metrics", []string{"Cookie", session}, false, false},
		{c, "POST", "/v1/take", []string{"Cookie", session}, false, false},
		{c, "GET", "/", []string{"Cookie", cookieName + "=forged"}, false, false},
		{c, "GET", "/", []string{"Cookie", sessionValue("s3cret")}, false, false},
		{c, "GET", "/", browser, false, true},
		{c, "GET", "/console/", browser, false, true},
		{c, "GET", "/", nil, false, false},
		{c, "GET", "/metrics", browser, false, false},
		{c, "POST", "/", browser, false, false},
		{none, "POST", "/console/login", nil, false, false},
		{none, "GET", "/", []string{"Cookie", cookieName + "=" + sessionValue("")}, false, false},
		{none, "GET", "/", browser, false, false},
	} {
		r := httptest.NewRequest(tc.method, tc.path, nil)
		for i := 0; i+1 < len(tc.hdr); i += 2 {
			r.Header.Set(tc.hdr[i], tc.hdr[i+1])
		}
		what := tc.method + " " + tc.path + " " + strings.Join(tc.hdr, " ")
		if tc.con == none {
			what = "without a token: " + what
		}
		if got := tc.con.Admits(r); got != tc.admits {
			t.Errorf("%s: Admits %v, want %v", what, got, tc.admits)
		}
		w := httptest.NewRecorder()
		got := tc.con.Refuse(w, r)
		answered := w.Code == http.StatusUnauthorized && strings.Contains(w.Body.String(), `action="/console/login"`)
		if got != tc.refuses || answered != tc.refuses || (!got && w.Body.Len() > 0) {
			t.Errorf("%s: Refuse %v, answered %d %.60q; want %v", what, got, w.Code, w.Body.String(), tc.refuses)
		}
	}

	// The sign-in: the right token sets the session and goes to the page;
	// a wrong one shows the form again; without a token there is none.
	post := func(con *Console, token string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/console/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		con.Handler().ServeHTTP(w, r)
		return w
	}
	w := post(c, "s3cret")
	cookies := w.Result().Cookies()
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/" || len(cookies) != 1 {
		t.Fatalf("the right token: %d %q, cookies %v", w.Code, w.Header().Get("Location"), cookies)
	}
	if k := cookies[0]; k.Name+"="+k.Value != session || !k.HttpOnly || k.SameSite != http.SameSiteStrictMode || k.Path != "/" || k.Secure {
		t.Errorf("cookie %+v: want %s, HttpOnly, SameSite=Strict, Path /, not Secure over plain HTTP", k, session)
	}
	if w := post(c, "wrong"); w.Code != http.StatusUnauthorized || len(w.Result().Cookies()) != 0 || !strings.Contains(w.Body.String(), `action="/console/login"`) {
		t.Errorf("a wrong token: %d, cookies %v", w.Code, w.Result().Cookies())
	}
	if w := post(none, ""); w.Code != http.StatusNotFound || len(w.Result().Cookies()) != 0 {
		t.Errorf("without a token: %d, cookies %v; want 404 and none", w.Code, w.Result().Cookies())
	}
}
