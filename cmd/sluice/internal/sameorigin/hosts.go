package sameorigin

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Hosts is the rule against DNS rebinding: the names a listener answers
// to, checked against each request's Host. A page of evil.example whose
// name the attacker then points at 127.0.0.1 (or at a private address)
// makes its visitor's browser send requests to the listener there as the
// page's own, same-origin ones (Host evil.example:PORT, Sec-Fetch-Site
// same-origin), and read the answers; Check, which Go's cross-origin rule
// cannot see, sees that the listener was asked for a name it does not
// serve.
//
// An IP address can never be rebound, so a Host that is one always
// passes, whatever the port (a client that reaches the service by
// 10.0.0.5:8080, a probe by the pod's IP, a port mapped by a container);
// so do localhost and the names under .localhost, which browsers resolve to
// loopback themselves, and the listener's own host when it was given as a
// name. Every other name must be allowed (NewHosts): "sluice.internal",
// ".example.com" for it and every name under it, or "*" for any Host, for
// a listener behind a proxy that routes by name (the proxy then answers
// only for its names). A request with no Host (HTTP/1.0) passes: browsers
// always send one.
type Hosts struct {
	any      bool
	names    map[string]bool // lower case, no trailing dot
	suffixes []string        // ".example.com"
}

// AnyHost is the entry of NewHosts's list that lets every Host through.
const AnyHost = "*"

// NewHosts returns the names a listener answers to: IP literals, localhost
// and the names under .localhost; own, the host of the listener's address
// when it is a name ("sluice.internal:8080"; "" or an address: nothing
// more); and allowed, each a name, ".NAME" for NAME and every name under
// it, or AnyHost.
func NewHosts(own string, allowed []string) (*Hosts, error) {
	h := &Hosts{names: map[string]bool{}}
	if own != "" {
		if host, _, err := net.SplitHostPort(own); err == nil && host != "" {
			h.names[hostName(host)] = true
		}
	}
	for _, a := range allowed {
		a = strings.TrimSpace(a)
		switch {
		case a == AnyHost:
			h.any = true
		case strings.HasPrefix(a, ".") && validName(a[1:]):
			h.suffixes = append(h.suffixes, hostName(a))
		case validName(a):
			h.names[hostName(a)] = true
		default:
			return nil, fmt.Errorf("allowed host %q: want a name (sluice.internal), .NAME for it and the names under it, or %s for any; without a port or a scheme", a, AnyHost)
		}
	}
	return h, nil
}

// validName reports whether s is a DNS name, or an IP literal: letters,
// digits, '-', '_' and dots between labels.
func validName(s string) bool {
	if _, err := netip.ParseAddr(s); err == nil {
		return true
	}
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// hostName is a Host's name: without its port or brackets, in lower case,
// without a trailing dot. A port that is not a number stays in the name,
// which no rule then allows ("localhost:8080.evil.example").
func hostName(host string) string {
	if name, port, err := net.SplitHostPort(host); err == nil && strings.Trim(port, "0123456789") == "" {
		host = name
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

// Allows reports whether the listener answers to host, a Host header's
// value.
func (h *Hosts) Allows(host string) bool {
	if h.any || host == "" {
		return true
	}
	name := hostName(host)
	if _, err := netip.ParseAddr(name); err == nil {
		return true
	}
	if name == "localhost" || strings.HasSuffix(name, ".localhost") || h.names[name] {
		return true
	}
	for _, s := range h.suffixes {
		if name == s[1:] || strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// ErrHost is what Check's errors wrap.
var ErrHost = errors.New("not a name this listener serves")

// Check returns an error, for a 421 Misdirected Request, when r's Host is
// not a name h allows; it names the flag that allows it.
func (h *Hosts) Check(r *http.Request) error {
	if h.Allows(r.Host) {
		return nil
	}
	return fmt.Errorf("the Host %q is %w (an IP address, localhost, or a name of --allowed-hosts): a page whose name was pointed at this address cannot drive it; to reach the service by this name, start it with --allowed-hosts %s", r.Host, ErrHost, hostName(r.Host))
}

// Handler returns next behind Check: a request whose Host h does not allow
// is answered 421 Misdirected Request, with Check's error as a plain-text
// body, and never reaches next; those skip reports true for (the probes)
// are not checked.
func (h *Hosts) Handler(next http.Handler, skip func(*http.Request) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if skip == nil || !skip(r) {
			if err := h.Check(r); err != nil {
				http.Error(w, err.Error(), http.StatusMisdirectedRequest)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
