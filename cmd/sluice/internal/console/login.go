package console

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// A browser cannot send an Authorization header when it opens a page, so
// on a service that asks for a bearer token (Options.Token) the console's
// paths (consolePath) also take a session cookie, set by posting the token
// to loginPath from the form a browser is shown. The cookie holds a digest
// of the token, not the token; it is HttpOnly and SameSite=Strict, so
// another site cannot make a browser use it. It opens the console and
// nothing else: the service's API, /metrics and /debug/config still take
// only the bearer token. The service asks the Console through Admits and
// Refuse (serve.Login) about each request without the token.
const (
	loginPath  = "/console/login" // where the sign-in form posts the token
	cookieName = "sluice_session"
)

// consolePath reports whether path is the console's: the page, its assets
// and its JSON endpoints.
func consolePath(path string) bool {
	return path == "/" || strings.HasPrefix(path, "/console/")
}

// sessionValue is the cookie value for token.
func sessionValue(token string) string {
	sum := sha256.Sum256([]byte("sluice console session\x00" + token))
	return fmt.Sprintf("%x", sum[:])
}

// Admits reports whether r, which does not carry the service's bearer
// token, may pass: a sign-in (a POST to loginPath, which the Handler
// checks), or a request for the console's paths with the session cookie.
// Without Options.Token it admits nothing.
func (c *Console) Admits(r *http.Request) bool {
	if c.session == "" {
		return false
	}
	if r.URL.Path == loginPath && r.Method == http.MethodPost {
		return true
	}
	if !consolePath(r.URL.Path) {
		return false
	}
	k, err := r.Cookie(cookieName)
	return err == nil && subtle.ConstantTimeCompare([]byte(k.Value), []byte(c.session)) == 1
}

// Refuse answers a browser that asks for a console page without a
// session, a 401 with the sign-in form, and reports whether it did; it
// leaves every other request to the service's own 401.
func (c *Console) Refuse(w http.ResponseWriter, r *http.Request) bool {
	if c.session == "" || r.Method != http.MethodGet || !consolePath(r.URL.Path) || !strings.Contains(r.Header.Get("Accept"), "text/html") {
		return false
	}
	writeLoginPage(w, false)
	return true
}

// serveLogin checks the token posted from the sign-in form and, when it is
// right, sets the session cookie and sends the browser to the console.
func (c *Console) serveLogin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	token := r.PostFormValue("token")
	if subtle.ConstantTimeCompare([]byte(token), []byte(c.token)) != 1 {
		writeLoginPage(w, true)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: c.session, Path: "/", HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// writeLoginPage answers 401 with the sign-in form, saying so when a token
// was wrong.
func writeLoginPage(w http.ResponseWriter, failed bool) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", login.csp)
	w.WriteHeader(http.StatusUnauthorized)
	msg := ""
	if failed {
		msg = `<p id="login-error" class="error" role="alert">That is not the service's token.</p>`
	}
	io.WriteString(w, strings.Replace(login.html, "<!--error-->", msg, 1))
}

// login is the sign-in page. It carries the console's stylesheet inline:
// the stylesheet is one of the console's paths, which a browser without a
// session cannot fetch. Its policy allows that one style by its digest.
var login = newLoginPage()

type loginPage struct{ html, csp string }

func newLoginPage() loginPage {
	css, _ := files.ReadFile("assets/console.css") // embedded: it is there
	sum := sha256.Sum256(css)
	return loginPage{
		html: strings.Replace(loginHTML, "/*style*/", string(css), 1),
		csp:  "default-src 'none'; style-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
	}
}

// loginHTML asks a browser for the token.
const loginHTML = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>sluice: sign in</title>
<style>/*style*/</style>
</head>
<body>
<header><h1>sluice console</h1></header>
<main id="main">
<section aria-labelledby="login-h">
<h2 id="login-h">Sign in</h2>
<p>This service asks for its HTTP token (the value of <code>--http-token</code>); signing in keeps it for this browser's session.</p>
<!--error-->
<form method="post" action="/console/login" class="login-form">
<div class="field"><label for="token">Token</label>
<input id="token" name="token" type="password" autocomplete="current-password" required autofocus></div>
<button type="submit">Sign in</button>
</form>
</section>
</main>
</body></html>
`
