package grpclimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// KeyFunc returns the key a policy counts a call under, and false when the
// call carries none (no IP peer address, a missing metadata field). ctx is
// the call's context and method its full method name
// ("/package.Service/Method"). A call whose key is not found is never
// counted under a shared empty key: see Policy.Optional.
type KeyFunc func(ctx context.Context, method string) (key string, ok bool)

// longKey is the length past which a key read from the call (a metadata
// value, an identity) is replaced by its SHA-256, so that a client cannot make
// the store keep keys of any size.
const longKey = 128

func shorten(s string) string {
	if len(s) > longKey {
		h := sha256.Sum256([]byte(s))
		return "sha256:" + hex.EncodeToString(h[:])
	}
	return s
}

// PeerIP keys a call on its client's address as the Server resolves it (see
// ClientAddr): the peer's IP address, or with trusted proxies the address
// they forwarded. IPv6 addresses are grouped by the Server's prefix (default
// /64, WithIPv6Prefix), so that every address of one /64 shares a budget; an
// IPv4-mapped IPv6 address is read as IPv4. It is a Server policy's key when
// its Key is nil. Not found when the peer has no IP address (a Unix socket,
// an in-memory listener) and on the client side.
func PeerIP() KeyFunc {
	return func(ctx context.Context, _ string) (string, bool) {
		cl := callOf(ctx)
		if cl != nil && cl.client {
			return "", false
		}
		ip := &defaultIP
		if cl != nil {
			ip = &cl.cfg.ip
		}
		a, ok := ip.resolve(ctx)
		if !ok {
			return "", false
		}
		return string(ip.appendKey(nil, a)), true
	}
}

// Metadata keys a call on the values of its metadata field name (an API
// key, a tenant id; the name is case-insensitive), several values joined by
// commas: on a Server, the metadata the client sent; on a Client, the
// metadata the call sends (metadata.AppendToOutgoingContext). Not found when
// the field is absent or blank. A value longer than 128 bytes is keyed by
// its SHA-256.
func Metadata(name string) KeyFunc {
	name = strings.ToLower(strings.TrimSpace(name))
	return func(ctx context.Context, _ string) (string, bool) {
		var vs []string
		if cl := callOf(ctx); cl != nil && cl.client {
			md, _ := metadata.FromOutgoingContext(ctx)
			vs = md.Get(name)
		} else {
			vs = metadata.ValueFromIncomingContext(ctx, name)
		}
		v := strings.TrimSpace(strings.Join(vs, ","))
		if v == "" {
			return "", false
		}
		return shorten(v), true
	}
}

// Method keys a call on its full method name ("/package.Service/Method"), so
// that each method has a budget of its own (or, joined with another key,
// each client and method).
func Method() KeyFunc {
	return func(_ context.Context, method string) (string, bool) {
		return method, method != ""
	}
}

// Target keys an outgoing call on the target of the grpc.ClientConn it is
// made on ("dns:///payments.example:443"): one budget per upstream. It is a
// Client policy's key when its Key is nil; not found on a Server.
func Target() KeyFunc {
	return func(ctx context.Context, _ string) (string, bool) {
		cl := callOf(ctx)
		if cl == nil || !cl.client || cl.target == "" {
			return "", false
		}
		return cl.target, true
	}
}

// FromContext keys a call on the value its context holds under ctxKey: an
// identity an authentication interceptor put there before this one ran. The
// value must be a non-empty string or a fmt.Stringer; anything else is not
// found.
func FromContext(ctxKey any) KeyFunc {
	return func(ctx context.Context, _ string) (string, bool) {
		var s string
		if v, ok := ctx.Value(ctxKey).(string); ok {
			s = v
		} else if v, ok := ctx.Value(ctxKey).(fmt.Stringer); ok {
			s = v.String()
		}
		if s == "" {
			return "", false
		}
		return shorten(s), true
	}
}

// Join keys a call on several keys at once (a user and a method, say):
// found only when every one is found. Each part is escaped, so that two
// different lists of keys never join to the same key.
func Join(keys ...KeyFunc) KeyFunc {
	return func(ctx context.Context, method string) (string, bool) {
		out := make([]byte, 0, 64)
		for i, k := range keys {
			if k == nil {
				return "", false
			}
			s, ok := k(ctx, method)
			if !ok {
				return "", false
			}
			if i > 0 {
				out = append(out, '|')
			}
			for j := 0; j < len(s); j++ {
				switch c := s[j]; c {
				case '|':
					out = append(out, "%7C"...)
				case '%':
					out = append(out, "%25"...)
				default:
					out = append(out, c)
				}
			}
		}
		return string(out), true
	}
}

// Static keys every call on key: one budget shared by all callers. key must
// not be empty.
func Static(key string) KeyFunc {
	return func(context.Context, string) (string, bool) { return key, key != "" }
}

// ipRules is how a Server finds a call's client address.
type ipRules struct {
	proxies []netip.Prefix // trusted proxies, masked, IPv4 unmapped
	field   string         // the forwarding metadata field, lower case
	v6bits  int
}

var defaultIP = ipRules{field: "x-forwarded-for", v6bits: 64}

// ClientAddr returns the address of the client that made the call whose
// server context is ctx, as the Server that admitted it resolves it (its
// trusted proxies), or the peer's address when the call did not pass
// through a Server. IPv4-mapped IPv6 addresses are returned as IPv4. False
// when the peer has no IP address.
func ClientAddr(ctx context.Context) (netip.Addr, bool) {
	ip := &defaultIP
	if cl := callOf(ctx); cl != nil && !cl.client {
		ip = &cl.cfg.ip
	}
	return ip.resolve(ctx)
}

// peerIP reads the IP address of the call's peer, without zone, IPv4-mapped
// addresses as IPv4.
func peerIP(ctx context.Context) (netip.Addr, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return netip.Addr{}, false
	}
	var a netip.Addr
	switch addr := p.Addr.(type) {
	case *net.TCPAddr:
		a, ok = netip.AddrFromSlice(addr.IP)
	default:
		var ap netip.AddrPort
		var err error
		if ap, err = netip.ParseAddrPort(addr.String()); err == nil {
			a, ok = ap.Addr(), true
		} else {
			a, err = netip.ParseAddr(addr.String())
			ok = err == nil
		}
	}
	if !ok || !a.IsValid() {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

func (r *ipRules) trusts(a netip.Addr) bool {
	for _, p := range r.proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// resolve is the peer's address, unless the peer is a trusted proxy: then
// the forwarding field is read. x-forwarded-for (all its values, in order,
// as one comma-separated list) is read from the right: each trusted hop is
// passed over and the first address that is not trusted is the client's.
// When every hop is trusted, the leftmost is the client; an entry that is
// not an address stops the reading, and the last trusted hop is the client.
// Another field (x-real-ip) is read as one address, and only when the
// call carries exactly one value.
func (r *ipRules) resolve(ctx context.Context) (netip.Addr, bool) {
	client, ok := peerIP(ctx)
	if !ok || len(r.proxies) == 0 || !r.trusts(client) {
		return client, ok
	}
	vals := metadata.ValueFromIncomingContext(ctx, r.field)
	if r.field != "x-forwarded-for" {
		if len(vals) == 1 {
			if a, ok := hostAddr(vals[0]); ok {
				return a, true
			}
		}
		return client, true
	}
	// The values from last to first, each from its last entry to its first.
	for i := len(vals) - 1; i >= 0; i-- {
		rest := vals[i]
		for {
			cut := strings.LastIndexByte(rest, ',')
			hop := rest[cut+1:]
			a, ok := hostAddr(hop)
			if !ok {
				return client, true
			}
			if !r.trusts(a) {
				return a, true
			}
			client = a
			if cut < 0 {
				break
			}
			rest = rest[:cut]
		}
	}
	return client, true
}

// hostAddr reads an address written alone, with a port, or in brackets.
func hostAddr(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if ap, err := netip.ParseAddrPort(s); err == nil {
		s = ap.Addr().String()
	} else if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		s = s[1 : len(s)-1]
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// appendKey appends a's key to b: an IPv4 address as it is, an IPv6 address
// as its prefix of r.v6bits.
func (r *ipRules) appendKey(b []byte, a netip.Addr) []byte {
	if a.Is6() {
		if p, err := a.Prefix(r.v6bits); err == nil {
			return p.AppendTo(b)
		}
	}
	return a.AppendTo(b)
}
