// Package sameorigin holds the two rules by which the service's HTTP
// listener and its web console refuse what a web page makes a visitor's
// browser send them: a request of another origin that may change state
// (Check, Handler), and a request for a name the listener does not serve,
// as a page on a rebinding domain sends (Hosts, in hosts.go).
//
// A web page of another origin must not make a visitor's browser change
// state here (take from a budget, run the playground, sign in). Such a page can send a POST without
// asking first (a form, or fetch in no-cors mode, with Content-Type
// text/plain), so the body's type proves nothing; what the browser says about
// where the request comes from does.
//
// The check is net/http's CrossOriginProtection: a browser names the
// request's site in Sec-Fetch-Site (every browser since 2023), or else in
// Origin. Programs that send neither (curl, SDKs, Envoy, scripts) are not
// browsers acting for a visitor and pass, whatever their Content-Type, so
// envoyproxy/ratelimit's `curl -d … /json` keeps working.
package sameorigin

import (
	"fmt"
	"net/http"
)

// The zero CrossOriginProtection trusts no other origin and bypasses no path.
var protection http.CrossOriginProtection

// Check returns an error, for a 403 Forbidden, when r is a request of a
// method that may change state (any but GET, HEAD and OPTIONS) that a
// browser sends from a page of another origin: Sec-Fetch-Site other than
// same-origin or none, or, from a browser too old to send that, an Origin
// whose host is not the request's Host.
func Check(r *http.Request) error {
	if err := protection.Check(r); err != nil {
		return fmt.Errorf("%s %s refused: a page of another origin (Origin %q, Sec-Fetch-Site %q) cannot send it through a browser; call it from a program, or from the console's own page (%w)",
			r.Method, r.URL.Path, r.Header.Get("Origin"), r.Header.Get("Sec-Fetch-Site"), err)
	}
	return nil
}

// Handler returns h behind Check: a request Check refuses is answered 403
// Forbidden, with Check's error as a plain-text body, and never reaches h.
func Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := Check(r); err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}
