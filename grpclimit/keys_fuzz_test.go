package grpclimit

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sluice-go/sluice/internal/policycore"
)

func peerCtx(addr string, xff ...string) context.Context {
	ap := netip.MustParseAddrPort(addr)
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: net.TCPAddrFromAddrPort(ap)})
	md := metadata.MD{}
	for _, v := range xff {
		md.Append("x-forwarded-for", v)
	}
	return metadata.NewIncomingContext(ctx, md)
}

// FuzzForwardedFor: whatever x-forwarded-for says, an untrusted peer keys
// on itself, and a trusted peer's key is an address or an IPv6 /64 that the
// header or the peer holds; never a panic, never an empty key.
func FuzzForwardedFor(f *testing.F) {
	for _, s := range []string{
		"203.0.113.9", "198.51.100.1, 203.0.113.9, 10.1.1.1", "unknown", "", ",,,", "[2001:db8::1]:80",
		"::ffff:192.0.2.1", "fe80::1%eth0", "10.0.0.1:99999", "1.2.3.4, garbage, 10.0.0.2", strings.Repeat("10.0.0.1,", 50),
	} {
		f.Add(s, s)
	}
	c, err := newConfig("", []Option{WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.0/8"))})
	if err != nil {
		f.Fatal(err)
	}
	trusted := &c.ip
	f.Fuzz(func(t *testing.T, a, b string) {
		for _, peerAddr := range []string{"127.0.0.1:5000", "[::ffff:10.9.9.9]:1", "[2001:db8:5::1]:443"} {
			ctx := peerCtx(peerAddr, a, b)
			p := netip.MustParseAddrPort(peerAddr).Addr().Unmap()
			got, ok := ClientAddr(ctx)
			if !ok || got != p {
				t.Fatalf("untrusted peer %s with x-forwarded-for %q, %q resolved %v", peerAddr, a, b, got)
			}
			got, ok = trusted.Resolve(peerIP(ctx), func(f string) []string { return metadata.ValueFromIncomingContext(ctx, f) })
			if !ok || !got.IsValid() || got.Zone() != "" || got.Is4In6() {
				t.Fatalf("trusted peer %s with %q, %q resolved %v %v", peerAddr, a, b, got, ok)
			}
			if !trusted.Proxied(p) && got != p {
				t.Fatalf("untrusted peer %s keyed on %v", peerAddr, got)
			}
			if got != p && !containsAddr(a+","+b, got) {
				t.Fatalf("resolved %v appears nowhere in %q, %q", got, a, b)
			}
			key := string(trusted.AppendKey(nil, got))
			if key == "" {
				t.Fatal("empty key")
			}
			if got.Is6() && !strings.HasSuffix(key, "/64") {
				t.Fatalf("IPv6 key %q not a /64", key)
			}
		}
	})
}

// containsAddr reports whether some comma-separated entry of s reads as a.
func containsAddr(s string, a netip.Addr) bool {
	for _, e := range strings.Split(s, ",") {
		if x, ok := policycore.ParseHost(e); ok && x == a {
			return true
		}
	}
	return false
}

func TestPeerWithoutIP(t *testing.T) {
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.UnixAddr{Name: "/tmp/s", Net: "unix"}})
	if k, ok := PeerIP()(ctx, "/a/b"); ok || k != "" {
		t.Errorf("a Unix peer keyed %q", k)
	}
	if _, ok := PeerIP()(context.Background(), "/a/b"); ok {
		t.Error("no peer: found a key")
	}
	if _, ok := ClientAddr(context.Background()); ok {
		t.Error("no peer: found an address")
	}
}
