package policycore_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/internal/policycore"
)

// trusting is a ClientIP that trusts 10.0.0.0/8, 127.0.0.0/8 and
// 192.168.0.0/16 (given IPv4-mapped) and reads field.
func trusting(t testing.TB, field string) *policycore.ClientIP {
	t.Helper()
	var c policycore.ClientIP
	err := c.Trust([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::ffff:192.168.0.0/112")})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetField(field); err != nil {
		t.Fatal(err)
	}
	return &c
}

// TestClientWalk: the walk itself, one step a row. The peer, 10.0.0.2,
// is a trusted proxy; values are the forwarding field's lines.
func TestClientWalk(t *testing.T) {
	peer := netip.MustParseAddr("10.0.0.2")
	for _, tc := range []struct {
		field  string
		values []string
		want   string
	}{
		// X-Forwarded-For, read from the right.
		{"X-Forwarded-For", []string{"203.0.113.7, 10.0.0.1, 10.0.0.3"}, "203.0.113.7"},
		{"X-Forwarded-For", []string{"198.51.100.1, 203.0.113.7, 10.0.0.1"}, "203.0.113.7"},     // the left part is the client's own word
		{"X-Forwarded-For", []string{"198.51.100.1", "203.0.113.7", "10.0.0.1"}, "203.0.113.7"}, // several lines are one list
		{"x-forwarded-for", []string{"198.51.100.1", "203.0.113.7, 10.0.0.1"}, "203.0.113.7"},   // metadata spells it in lower case
		{"X-Forwarded-For", []string{"10.0.0.9, 10.0.0.1"}, "10.0.0.9"},                         // all trusted: the leftmost
		{"X-Forwarded-For", []string{"garbage, 10.0.0.1"}, "10.0.0.1"},                          // not an address: the hop that wrote it
		{"X-Forwarded-For", []string{"garbage"}, "10.0.0.2"},                                    // ... the peer, when it wrote it
		{"X-Forwarded-For", []string{"203.0.113.7, , 10.0.0.1"}, "10.0.0.1"},                    // an empty entry stops it too
		{"X-Forwarded-For", []string{"203.0.113.7", ""}, "10.0.0.2"},                            // ... and an empty line
		{"X-Forwarded-For", nil, "10.0.0.2"},                                                    // no field: the peer
		{"X-Forwarded-For", []string{"::ffff:203.0.113.9, 192.168.1.1"}, "203.0.113.9"},         // mapped read as IPv4, trusted mapped prefix
		{"X-Forwarded-For", []string{"::ffff:10.1.1.1, 203.0.113.9"}, "203.0.113.9"},
		{"X-Forwarded-For", []string{"  203.0.113.7:4711 ,10.0.0.1"}, "203.0.113.7"}, // port and spaces
		{"X-Forwarded-For", []string{"[2001:db8:1:2::77]:443"}, "2001:db8:1:2::77"},
		{"X-Forwarded-For", []string{"[2001:db8::1]"}, "2001:db8::1"},
		{"X-Forwarded-For", []string{"[203.0.113.7]"}, "10.0.0.2"},          // brackets are for IPv6
		{"X-Forwarded-For", []string{"fe80::1%eth0, 10.0.0.1"}, "10.0.0.1"}, // a zone keys nobody
		{"X-Forwarded-For", []string{"203.0.113.7:99999"}, "10.0.0.2"},
		// A quote is not the client's to open: what its proxies appended
		// after it is read as they wrote it.
		{"X-Forwarded-For", []string{`"198.51.100.7, 203.0.113.9, 10.0.0.1`}, "203.0.113.9"},
		{"X-Forwarded-For", []string{`198.51.100.7, "x\", 203.0.113.9`}, "203.0.113.9"},
		// Forwarded (RFC 7239): the for= of each element.
		{"Forwarded", []string{`for=198.51.100.1, for="[2001:db8::1]:4711";proto=https, for=10.0.0.1;by=10.0.0.3`}, "2001:db8::1"},
		{"forwarded", []string{`For="203.0.113.5:80"`}, "203.0.113.5"},
		{"Forwarded", []string{`proto=http;for=203.0.113.5;by=10.0.0.3`}, "203.0.113.5"},
		{"Forwarded", []string{`for=unknown, for=10.0.0.3`}, "10.0.0.3"},
		{"Forwarded", []string{`for=_hidden`}, "10.0.0.2"},
		{"Forwarded", []string{`proto=https`}, "10.0.0.2"}, // no for=
		{"Forwarded", []string{`for="198.51.100.7, for=203.0.113.9`}, "203.0.113.9"},
		{"Forwarded", []string{"for=10.0.0.5", "for=10.0.0.6"}, "10.0.0.5"},
		// A single-value field: one value that is an address, else the peer.
		{"CF-Connecting-IP", []string{" 203.0.113.8 "}, "203.0.113.8"},
		{"x-real-ip", []string{"[2001:db8::8]:1"}, "2001:db8::8"},
		{"X-Real-IP", []string{"10.0.0.7"}, "10.0.0.7"}, // trusted or not: the proxy's word
		{"X-Real-IP", []string{"nonsense"}, "10.0.0.2"},
		{"X-Real-IP", []string{"203.0.113.8", "198.51.100.1"}, "10.0.0.2"}, // sent twice: not one proxy's word
		{"X-Real-IP", []string{"203.0.113.8, 198.51.100.1"}, "10.0.0.2"},
		{"X-Real-IP", nil, "10.0.0.2"},
	} {
		c := trusting(t, tc.field)
		if !c.Proxied(peer) {
			t.Fatalf("%s: the peer %v is not trusted", tc.field, peer)
		}
		if got := c.Client(peer, tc.values); got != netip.MustParseAddr(tc.want) {
			t.Errorf("%s: %q: client %v, want %s", tc.field, tc.values, got, tc.want)
		}
	}
}

func TestProxied(t *testing.T) {
	var none policycore.ClientIP
	c := trusting(t, "X-Forwarded-For")
	for _, tc := range []struct {
		peer    string
		trusted bool
	}{
		{"10.1.2.3", true},
		{"127.0.0.1", true},
		{"192.168.3.4", true}, // trusted as ::ffff:192.168.0.0/112
		{"11.0.0.1", false},
		{"2001:db8::1", false},
	} {
		a := netip.MustParseAddr(tc.peer)
		if got := c.Proxied(a); got != tc.trusted {
			t.Errorf("Proxied(%s) = %v, want %v", a, got, tc.trusted)
		}
		if none.Proxied(a) {
			t.Errorf("no trusted proxy: Proxied(%s)", a)
		}
	}
	if err := c.Trust([]netip.Prefix{{}}); err == nil {
		t.Error("Trust accepted an invalid prefix")
	}
}

// TestResolve: the field is read only for a trusted peer, and only the
// field named; no peer address, no client.
func TestResolve(t *testing.T) {
	c := trusting(t, "X-Real-IP")
	read := 0
	values := func(field string) []string {
		read++
		if field != "X-Real-IP" {
			t.Errorf("read field %q", field)
		}
		return []string{"203.0.113.4"}
	}
	if a, ok := c.Resolve(netip.Addr{}, values); ok || a.IsValid() {
		t.Errorf("no peer: %v, %v", a, ok)
	}
	if a, ok := c.Resolve(netip.MustParseAddr("198.51.100.1"), values); !ok || a.String() != "198.51.100.1" || read != 0 {
		t.Errorf("untrusted peer: %v, %v (field read %d times)", a, ok, read)
	}
	if k, ok := c.ResolveKey(netip.MustParseAddr("10.0.0.1"), values); !ok || k != "203.0.113.4" || read != 1 {
		t.Errorf("trusted peer: key %q, %v (field read %d times)", k, ok, read)
	}
	if k, ok := c.ResolveKey(netip.MustParseAddr("2001:db8::1:2:3:4"), values); !ok || k != "2001:db8::/64" {
		t.Errorf("IPv6 peer: key %q, %v", k, ok)
	}
}

func TestAppendKey(t *testing.T) {
	var c policycore.ClientIP
	var c128 policycore.ClientIP
	if err := c128.SetIPv6Prefix(128); err != nil {
		t.Fatal(err)
	}
	for _, bits := range []int{0, 129, -1} {
		if err := c128.SetIPv6Prefix(bits); err == nil {
			t.Errorf("SetIPv6Prefix(%d) accepted", bits)
		}
	}
	for _, tc := range []struct {
		c    *policycore.ClientIP
		a    string
		want string
	}{
		{&c, "203.0.113.7", "203.0.113.7"},
		{&c, "2001:db8:aa:bb:1:2:3:4", "2001:db8:aa:bb::/64"},
		{&c, "2001:db8:aa:bb::ffff", "2001:db8:aa:bb::/64"},
		{&c, "fe80::1%eth0", "fe80::/64"},
		{&c128, "2001:db8::5", "2001:db8::5/128"},
		{&c128, "203.0.113.7", "203.0.113.7"},
	} {
		if got := string(tc.c.AppendKey([]byte("p:"), netip.MustParseAddr(tc.a))); got != "p:"+tc.want {
			t.Errorf("AppendKey(%s) = %q, want %q", tc.a, got, "p:"+tc.want)
		}
	}
}

// FuzzClient: whatever the field holds, the client is the peer or an
// address one of its entries names, unzoned and IPv4 unmapped; never a
// panic.
func FuzzClient(f *testing.F) {
	for _, s := range []string{
		"203.0.113.9", "198.51.100.1, 203.0.113.9, 10.1.1.1", "unknown", "", ",,,", "[2001:db8::1]:80",
		`for="[2001:db8::1]:4711";proto=https, for=10.0.0.1`, `"`, `for="\"`, "::ffff:192.0.2.1", "fe80::1%eth0",
		strings.Repeat("10.0.0.1,", 50),
	} {
		f.Add(s, s)
	}
	peer := netip.MustParseAddr("10.0.0.2")
	f.Fuzz(func(t *testing.T, a, b string) {
		for _, field := range []string{"X-Forwarded-For", "Forwarded", "X-Real-IP"} {
			got := trusting(t, field).Client(peer, []string{a, b})
			if !got.IsValid() || got.Zone() != "" || got.Is4In6() {
				t.Fatalf("%s: %q, %q: client %v", field, a, b, got)
			}
			if got != peer && !strings.Contains(a+b, strings.TrimPrefix(got.String(), "::ffff:")) && !named(a+","+b, got) {
				t.Fatalf("%s: %q, %q: client %v appears nowhere", field, a, b, got)
			}
		}
	})
}

// named reports whether an entry of list (split at commas, and at ';' and
// '=' for Forwarded) reads as a.
func named(list string, a netip.Addr) bool {
	for _, e := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == ';' || r == '=' || r == '"' || r == '\\' }) {
		if x, ok := policycore.ParseHost(e); ok && x == a {
			return true
		}
	}
	return false
}
