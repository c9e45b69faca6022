package httplimit

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// KeyFunc returns the key a policy counts a request under, and false when the
// request carries none (no peer address, a missing header). A request whose
// key is not found is never counted under a shared empty key: see
// Policy.Optional and WithMissingKey.
type KeyFunc func(r *http.Request) (key string, ok bool)

// maxKeyLen bounds a key taken from the request as it is; a longer value (a
// header of a kilobyte) is replaced by its SHA-256, so that a client cannot
// make the store keep large keys.
const maxKeyLen = 128

func bound(s string) string {
	if len(s) <= maxKeyLen {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ClientIP keys a request on its client's address as the Middleware resolves
// it (see ClientAddr): the peer address, or with trusted proxies the address
// they forwarded. An IPv6 address is grouped by the Middleware's IPv6 prefix
// (default /64): every address of one /64 shares one budget. It is the key of
// a Policy whose Key is nil. Not found when the request has no peer address
// (a Unix socket, a handler called outside a server).
func ClientIP() KeyFunc {
	return func(r *http.Request) (string, bool) {
		cfg := defaultIPConfig
		if st := stateOf(r.Context()); st != nil {
			cfg = &st.m.ip
		}
		a, ok := cfg.clientAddr(r)
		if !ok {
			return "", false
		}
		return cfg.group(a), true
	}
}

// Header keys a request on the value of its header name (an API key, a
// tenant id), its several lines joined by commas. Not found when the header
// is absent or empty. A value longer than 128 bytes is keyed by its SHA-256.
func Header(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, bool) {
		vs := r.Header[name]
		v := strings.TrimSpace(strings.Join(vs, ","))
		if v == "" {
			return "", false
		}
		return bound(v), true
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
		var s string
		switch v := r.Context().Value(ctxKey).(type) {
		case string:
			s = v
		case fmt.Stringer:
			s = v.String()
		}
		if s == "" {
			return "", false
		}
		return bound(s), true
	}
}

// Join keys a request on several keys at once (a tenant and a route, say):
// found only when every one is found. The parts are escaped so that two
// different lists never join to one key.
func Join(keys ...KeyFunc) KeyFunc {
	return func(r *http.Request) (string, bool) {
		var b strings.Builder
		for i, k := range keys {
			if k == nil {
				return "", false
			}
			s, ok := k(r)
			if !ok {
				return "", false
			}
			if i > 0 {
				b.WriteByte('|')
			}
			b.WriteString(joinEscaper.Replace(s))
		}
		return b.String(), true
	}
}

var joinEscaper = strings.NewReplacer("%", "%25", "|", "%7C")

// Static keys every request on one key: a global budget shared by all
// clients. key must not be empty.
func Static(key string) KeyFunc {
	return func(*http.Request) (string, bool) { return key, key != "" }
}

// ipConfig is how a Middleware finds the client's address.
type ipConfig struct {
	trusted []netip.Prefix
	header  string // canonical; "" = X-Forwarded-For
	v6bits  int
}

var defaultIPConfig = &ipConfig{v6bits: 64}

const (
	hdrXFF       = "X-Forwarded-For"
	hdrForwarded = "Forwarded"
)

// ClientAddr returns the address of the client that sent r, as the
// Middleware that admitted r resolves it (its trusted proxies and proxy
// header), or the peer address when r did not pass through one. IPv4-mapped
// IPv6 addresses are returned as IPv4. False when r has no usable peer
// address.
func ClientAddr(r *http.Request) (netip.Addr, bool) {
	cfg := defaultIPConfig
	if st := stateOf(r.Context()); st != nil {
		cfg = &st.m.ip
	}
	return cfg.clientAddr(r)
}

// appendIPv4Host appends the address of hostport when it is an IPv4
// address and a port ("192.0.2.1:8080") that netip.ParseAddrPort accepts and
// the address is written as netip writes it (always so: netip refuses
// leading zeros), so that the text is group's key of the address read by
// peerAddr, unparsed. False (b unchanged) for anything else, which
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
// alone).
func peerAddr(r *http.Request) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ap.Addr().WithZone("").Unmap(), true // a zone would match no prefix
	}
	if a, err := netip.ParseAddr(r.RemoteAddr); err == nil {
		return a.WithZone("").Unmap(), true
	}
	return netip.Addr{}, false
}

func (c *ipConfig) isTrusted(a netip.Addr) bool {
	for _, p := range c.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// clientAddr is the peer address, unless the peer is a trusted proxy: then
// the proxy header is read. A list header (X-Forwarded-For, Forwarded) is
// walked from the right, skipping trusted hops: the first untrusted address
// is the client; when every hop is trusted, the leftmost is; an entry that is
// not an address ("unknown", an obfuscated id, garbage) stops the walk and
// the hop that wrote it (the last trusted one) is the client. A single-value
// header is taken as it is when it holds an address.
func (c *ipConfig) clientAddr(r *http.Request) (netip.Addr, bool) {
	peer, ok := peerAddr(r)
	if !ok {
		return netip.Addr{}, false
	}
	if len(c.trusted) == 0 || !c.isTrusted(peer) {
		return peer, true
	}
	switch c.header {
	case "", hdrXFF:
		return c.walk(peer, splitList(r.Header.Values(hdrXFF)), parseXFF), true
	case hdrForwarded:
		return c.walk(peer, splitList(r.Header.Values(hdrForwarded)), parseForwarded), true
	default:
		vs := r.Header.Values(c.header)
		if len(vs) != 1 {
			return peer, true // absent, or sent twice: not one proxy's word
		}
		if a, ok := parseHost(strings.TrimSpace(vs[0])); ok {
			return a, true
		}
		return peer, true
	}
}

func (c *ipConfig) walk(peer netip.Addr, hops []string, parse func(string) (netip.Addr, bool)) netip.Addr {
	last := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := parse(hops[i])
		if !ok {
			return last
		}
		if !c.isTrusted(a) {
			return a
		}
		last = a
	}
	return last
}

// group is the key of address a: IPv4 as it is, IPv6 as its prefix.
func (c *ipConfig) group(a netip.Addr) string {
	var buf [64]byte
	return string(c.appendGroup(buf[:0], a))
}

// appendGroup appends group(a) to b.
func (c *ipConfig) appendGroup(b []byte, a netip.Addr) []byte {
	if a.Is4() {
		return a.AppendTo(b)
	}
	p, err := a.WithZone("").Prefix(c.v6bits)
	if err != nil {
		return a.AppendTo(b)
	}
	return p.AppendTo(b)
}

// splitList splits the lines of a list header at commas outside quoted
// strings.
func splitList(lines []string) []string {
	var out []string
	for _, l := range lines {
		start, quoted := 0, false
		for i := 0; i < len(l); i++ {
			switch l[i] {
			case '\\':
				if quoted {
					i++
				}
			case '"':
				quoted = !quoted
			case ',':
				if !quoted {
					out = append(out, strings.TrimSpace(l[start:i]))
					start = i + 1
				}
			}
		}
		out = append(out, strings.TrimSpace(l[start:]))
	}
	return out
}

func parseXFF(s string) (netip.Addr, bool) { return parseHost(s) }

// parseHost reads an address, possibly with a port or in brackets.
func parseHost(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil && ap.Addr().Zone() == "" {
		return ap.Addr().Unmap(), true
	}
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil && a.Is6() && a.Zone() == "" {
			return a.Unmap(), true
		}
	}
	return netip.Addr{}, false
}

// parseForwarded reads the for= parameter of one RFC 7239 element:
// for=192.0.2.60;proto=http, for="[2001:db8::1]:4711".
func parseForwarded(elem string) (netip.Addr, bool) {
	for _, pair := range strings.Split(elem, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "for") {
			continue
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = strings.ReplaceAll(v[1:len(v)-1], `\`, "")
		}
		return parseHost(v)
	}
	return netip.Addr{}, false
}
