package grpclimit

import (
	"context"
	"net"
	"net/netip"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sluice-go/sluice/internal/policycore"
)

// KeyFunc returns the key a policy counts a call under, and false when the
// call carries none (no IP peer address, a missing metadata field). ctx is
// the call's context and method its full method name
// ("/package.Service/Method"). A call whose key is not found is never
// counted under a shared empty key: see Policy.Optional.
type KeyFunc func(ctx context.Context, method string) (key string, ok bool)

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
		ip := &noProxies
		if cl != nil {
			ip = &cl.cfg.ip
		}
		return ip.ResolveKey(peerIP(ctx), func(field string) []string { return metadata.ValueFromIncomingContext(ctx, field) })
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
		return policycore.ValuesKey(vs)
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
		return policycore.ContextKey(ctx.Value(ctxKey))
	}
}

// Join keys a call on several keys at once (a user and a method, say):
// found only when every one is found. Each part is escaped, so that two
// different lists of keys never join to the same key.
func Join(keys ...KeyFunc) KeyFunc {
	return func(ctx context.Context, method string) (string, bool) {
		return policycore.JoinKeys(len(keys), func(i int) (string, bool) {
			if keys[i] == nil {
				return "", false
			}
			return keys[i](ctx, method)
		})
	}
}

// Static keys every call on key: one budget shared by all callers. key must
// not be empty.
func Static(key string) KeyFunc {
	return func(context.Context, string) (string, bool) { return key, key != "" }
}

// ClientAddr returns the address of the client that made the call whose
// server context is ctx, as the Server that admitted it resolves it (its
// trusted proxies), or the peer's address when the call did not pass
// through a Server. IPv4-mapped IPv6 addresses are returned as IPv4. False
// when the peer has no IP address.
func ClientAddr(ctx context.Context) (netip.Addr, bool) {
	ip := &noProxies
	if cl := callOf(ctx); cl != nil && !cl.client {
		ip = &cl.cfg.ip
	}
	return ip.Resolve(peerIP(ctx), func(field string) []string { return metadata.ValueFromIncomingContext(ctx, field) })
}

// noProxies is how a call that passed through no Server is read: its
// peer's address, IPv6 by /64.
var noProxies policycore.ClientIP

// peerIP reads the IP address of the call's peer, without zone, IPv4-mapped
// addresses as IPv4; the zero Addr when it has none.
func peerIP(ctx context.Context) netip.Addr {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return netip.Addr{}
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
		return netip.Addr{}
	}
	return a.Unmap().WithZone("")
}
