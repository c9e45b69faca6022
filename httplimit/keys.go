package httplimit

import (
	"net/http"
	"net/netip"

	"github.com/sluice-go/sluice/internal/policycore"
)

// KeyFunc returns the key a policy counts a request under, and false when the
// request carries none (no peer address, a missing header). A request whose
// key is not found is never counted under a shared empty key: see
// Policy.Optional and WithMissingKey.
type KeyFunc func(r *http.Request) (key string, ok bool)

// ClientIP keys a request on its client's address as the Middleware resolves
// it (see ClientAddr): the peer address, or with trusted proxies the address
// they forwarded. An IPv6 address is grouped by the Middleware's IPv6 prefix
// (default /64): every address of one /64 shares one budget. It is the key of
// a Policy whose Key is nil. Not found when the request has no peer address
// (a Unix socket, a handler called outside a server).
func ClientIP() KeyFunc {
	return func(r *http.Request) (string, bool) {
		return ipOf(r).ResolveKey(peerAddr(r), r.Header.Values)
	}
}

// Header keys a request on the value of its header name (an API key, a
// tenant id), its several lines joined by commas. Not found when the header
// is absent or empty. A value longer than 128 bytes is keyed by its SHA-256.
func Header(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, bool) {
		return policycore.ValuesKey(r.Header[name])
	}
}

// Route keys a request on the ServeMux pattern that matched it
// (http.Request.Pattern, "GET /items/{id}"), so that each route has a budget
// of its own. It is found only once a ServeMux has routed the request: wrap
// each route's handler (mux.Handle(pattern, m.Handler(h))), or use
// MuxRoute to key a middleware that wraps the whole mux. With another router,
// write a KeyFunc that returns its route template.
func Route() KeyFunc {
	return func(r *http.Request) (string, bool) {
		if r.Pattern == "" {
			return "", false
		}
		return r.Pattern, true
	}
}

// MuxRoute keys a request on the pattern mux would route it to, for a
// middleware that wraps the whole mux. Not found when no pattern matches (the
// mux would answer 404 or 405).
func MuxRoute(mux *http.ServeMux) KeyFunc {
	return func(r *http.Request) (string, bool) {
		if r.Pattern != "" {
			return r.Pattern, true
		}
		_, p := mux.Handler(r)
		if p == "" {
			return "", false
		}
		return p, true
	}
}

// FromContext keys a request on a value its context holds under ctxKey: an
// authenticated identity set by an earlier middleware. The value must be a
// non-empty string or a fmt.Stringer; anything else is not found.
func FromContext(ctxKey any) KeyFunc {
	return func(r *http.Request) (string, bool) {
		return policycore.ContextKey(r.Context().Value(ctxKey))
	}
}

// Join keys a request on several keys at once (a tenant and a route, say):
// found only when every one is found. The parts are escaped so that two
// different lists never join to one key.
func Join(keys ...KeyFunc) KeyFunc {
	return func(r *http.Request) (string, bool) {
		return policycore.JoinKeys(len(keys), func(i int) (string, bool) {
			if keys[i] == nil {
				return "", false
			}
			return keys[i](r)
		})
	}
}

// Static keys every request on one key: a global budget shared by all
// clients. key must not be empty.
func Static(key string) KeyFunc {
	return func(*http.Request) (string, bool) { return key, key != "" }
}

// ClientAddr returns the address of the client that sent r, as the
// Middleware that admitted r resolves it (its trusted proxies and proxy
// header), or the peer address when r did not pass through one. IPv4-mapped
// IPv6 addresses are returned as IPv4. False when r has no usable peer
// address.
func ClientAddr(r *http.Request) (netip.Addr, bool) {
	return ipOf(r).Resolve(peerAddr(r), r.Header.Values)
}

// noProxies is how a request that passed through no Middleware is read:
// its peer address, IPv6 by /64.
var noProxies policycore.ClientIP

// ipOf is the rules of the Middleware r passed through, or noProxies.
func ipOf(r *http.Request) *policycore.ClientIP {
	if st := stateOf(r.Context()); st != nil {
		return &st.m.ip
	}
	return &noProxies
}

// appendIPv4Host appends the address of hostport when it is an IPv4
// address and a port ("192.0.2.1:8080") that netip.ParseAddrPort accepts and
// the address is written as netip writes it (always so: netip refuses
// leading zeros), so that the text is the key (AppendKey) of the address
// peerAddr would read, unparsed. False (b unchanged) for anything else, which
// peerAddr decides.
func appendIPv4Host(b []byte, hostport string) ([]byte, bool) {
	fields, digits, val := 0, 0, 0
	i := 0
	for ; i < len(hostport); i++ {
		c := hostport[i]
		switch {
		case c >= '0' && c <= '9':
			if digits == 1 && val == 0 { // a leading zero
				return b, false
			}
			val = val*10 + int(c-'0')
			digits++
			if val > 255 {
				return b, false
			}
			continue
		case c == '.' || c == ':':
		default:
			return b, false
		}
		if digits == 0 {
			return b, false
		}
		fields++
		digits, val = 0, 0
		if c == ':' {
			break
		}
		if fields == 4 {
			return b, false
		}
	}
	if fields != 4 || i >= len(hostport) {
		return b, false // not four fields and a ':'
	}
	port := hostport[i+1:]
	if len(port) == 0 {
		return b, false
	}
	n := 0
	for j := 0; j < len(port); j++ {
		c := port[j]
		if c < '0' || c > '9' {
			return b, false
		}
		if n = n*10 + int(c-'0'); n > 65535 {
			return b, false
		}
	}
	return append(b, hostport[:i]...), true
}

// peerAddr parses r.RemoteAddr ("1.2.3.4:5678", "[::1]:80", or an address
// alone); the zero Addr when it holds none.
func peerAddr(r *http.Request) netip.Addr {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ap.Addr().WithZone("").Unmap() // a zone would match no prefix
	}
	if a, err := netip.ParseAddr(r.RemoteAddr); err == nil {
		return a.WithZone("").Unmap()
	}
	return netip.Addr{}
}
