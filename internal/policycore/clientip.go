package policycore

import (
	"fmt"
	"net/netip"
	"strings"
)

// ClientIP is how a door finds the address of the client behind a request:
// the peer's address, unless the peer is a trusted proxy; then the
// forwarding field the proxies set (SetField). Its zero value trusts no
// proxy and groups IPv6 addresses by /64 (DefaultIPv6Bits).
//
// The doors read the peer's address and the field's values, each from its
// own transport; the rules are here, once.
type ClientIP struct {
	trusted []netip.Prefix // masked, IPv4-mapped prefixes as IPv4
	field   string         // as the door spells it
	list    listFormat
	v6bits  int // 0 is DefaultIPv6Bits
}

// DefaultIPv6Bits is the prefix IPv6 clients are grouped by unless a door
// is told otherwise: one /64 is what one customer of an ISP gets, so that
// one client cannot take a budget per address.
const DefaultIPv6Bits = 64

// listFormat is how a forwarding field is read.
type listFormat uint8

const (
	// xffList: X-Forwarded-For, addresses separated by commas.
	xffList listFormat = iota
	// forwardedList: RFC 7239 Forwarded, elements separated by commas,
	// each with its address in a for= parameter.
	forwardedList
	// single: one address, in a field that holds one value (X-Real-IP,
	// CF-Connecting-IP).
	single
)

// Trust adds prefixes to the trusted proxies: what both doors'
// WithTrustedProxies do. An IPv4-mapped prefix (::ffff:10.0.0.0/104) is
// read as IPv4, as peer addresses are.
func (c *ClientIP) Trust(prefixes []netip.Prefix) error {
	for _, p := range prefixes {
		if !p.IsValid() {
			return fmt.Errorf("WithTrustedProxies: invalid prefix %v", p)
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		c.trusted = append(c.trusted, p.Masked())
	}
	return nil
}

// SetField names the field trusted proxies set, as the door's transport
// spells it: what both doors' WithProxyHeader do. X-Forwarded-For and
// Forwarded (any case) are lists walked from the right; any other field is
// read as one address. A name with a space, a colon or a line break names
// no field.
func (c *ClientIP) SetField(name string) error {
	if name == "" || strings.ContainsAny(name, " \t:\r\n") {
		return fmt.Errorf("WithProxyHeader(%q): not a field name", name)
	}
	c.field = name
	switch {
	case name == "" || strings.EqualFold(name, "X-Forwarded-For"):
		c.list = xffList
	case strings.EqualFold(name, "Forwarded"):
		c.list = forwardedList
	default:
		c.list = single
	}
	return nil
}

// SetIPv6Prefix groups IPv6 clients by their prefix of bits (1 to 128:
// 128 keys each address alone): what both doors' WithIPv6Prefix do.
func (c *ClientIP) SetIPv6Prefix(bits int) error {
	if bits < 1 || bits > 128 {
		return fmt.Errorf("WithIPv6Prefix(%d): not in 1..128", bits)
	}
	c.v6bits = bits
	return nil
}

// TrustsProxies reports whether any proxy is trusted: with none, every
// peer's address is its client's.
func (c *ClientIP) TrustsProxies() bool { return len(c.trusted) > 0 }

// Proxied reports whether a request from peer may be forwarded: there are
// trusted proxies and peer is one of them.
func (c *ClientIP) Proxied(peer netip.Addr) bool {
	return len(c.trusted) > 0 && c.trusts(peer)
}

// Resolve returns the address of the client that sent a request from peer
// (false when peer is not valid: the request came from no IP address):
// peer itself, unless it is a trusted proxy; then the client its
// forwarding field names (Client), whose values it reads with values, and
// only then.
func (c *ClientIP) Resolve(peer netip.Addr, values func(field string) []string) (netip.Addr, bool) {
	if !peer.IsValid() {
		return netip.Addr{}, false
	}
	if !c.Proxied(peer) {
		return peer, true
	}
	return c.Client(peer, values(c.field)), true
}

// ResolveKey is the key (AppendKey) of the client Resolve finds.
func (c *ClientIP) ResolveKey(peer netip.Addr, values func(field string) []string) (string, bool) {
	a, ok := c.Resolve(peer, values)
	if !ok {
		return "", false
	}
	var buf [64]byte
	return string(c.AppendKey(buf[:0], a)), true
}

func (c *ClientIP) trusts(a netip.Addr) bool {
	for _, p := range c.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Client returns the address of the client behind peer, a trusted proxy
// (Proxied), whose forwarding field holds values (each line or metadata
// value, in the order received).
//
// A list (X-Forwarded-For, Forwarded) is one list across its values, read
// from the right: each trusted hop is passed over, and the first address
// that is not trusted is the client's. When every hop is trusted, the
// leftmost is the client. An entry that is not an address ("unknown", an
// obfuscated id, garbage) stops the walk: the hop that wrote it, the last
// trusted one, is the client. Entries are split at every comma, quoted or
// not: a quote the client opens must not swallow the entries its proxies
// added after it, and no address holds a comma.
//
// A single-value field is taken as it is when it holds exactly one value
// that is an address; else the peer is the client.
func (c *ClientIP) Client(peer netip.Addr, values []string) netip.Addr {
	if c.list == single {
		if len(values) == 1 {
			if a, ok := ParseHost(values[0]); ok {
				return a
			}
		}
		return peer // absent, or sent twice: not one proxy's word
	}
	last := peer
	for i := len(values) - 1; i >= 0; i-- {
		rest := values[i]
		for {
			cut := strings.LastIndexByte(rest, ',')
			a, ok := c.parseHop(rest[cut+1:])
			if !ok {
				return last
			}
			if !c.trusts(a) {
				return a
			}
			last = a
			if cut < 0 {
				break
			}
			rest = rest[:cut]
		}
	}
	return last
}

func (c *ClientIP) parseHop(s string) (netip.Addr, bool) {
	if c.list == forwardedList {
		return parseForwarded(s)
	}
	return ParseHost(s)
}

// AppendKey appends the key of client address a to b: an IPv4 address as
// it is, an IPv6 address as its prefix ("2001:db8:1:2::/64"), so that
// every address of one prefix shares one budget.
func (c *ClientIP) AppendKey(b []byte, a netip.Addr) []byte {
	if a.Is4() {
		return a.AppendTo(b)
	}
	bits := c.v6bits
	if bits == 0 {
		bits = DefaultIPv6Bits
	}
	p, err := a.WithZone("").Prefix(bits)
	if err != nil {
		return a.AppendTo(b)
	}
	return p.AppendTo(b)
}

// ParseHost reads an address written alone, with a port, or in brackets
// (an IPv6 address), around spaces: the forms proxies write. IPv4-mapped
// addresses are returned as IPv4; an address with a zone is refused (it
// would match no prefix and key nobody).
func ParseHost(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	a, err := netip.ParseAddr(s)
	if err != nil {
		a = hostPort(s)
	}
	if !a.IsValid() || a.Zone() != "" {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// hostPort reads an address with a port, or an IPv6 address in brackets;
// the zero Addr when s is neither.
func hostPort(s string) netip.Addr {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr()
	}
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil && a.Is6() {
			return a
		}
	}
	return netip.Addr{}
}

// parseForwarded reads the for= parameter of one RFC 7239 element:
// for=192.0.2.60;proto=http, for="[2001:db8::1]:4711".
func parseForwarded(elem string) (netip.Addr, bool) {
	for rest := elem; rest != ""; {
		var pair string
		pair, rest, _ = strings.Cut(rest, ";")
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "for") {
			continue
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = strings.ReplaceAll(v[1:len(v)-1], `\`, "")
		}
		return ParseHost(v)
	}
	return netip.Addr{}, false
}
