package rlsconfig

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
)

// Resolve returns, for each descriptor of a request to domain, the rule that
// applies after envoy's replaces processing: nil when nothing applies (no
// descriptor matched, or the matched rule is replaced), which envoy answers OK
// with no limit. An unlimited rule is returned even when another rule replaces
// its name, as envoy still answers it as unlimited. An unknown domain gives
// nil for every descriptor.
//
// A descriptor the caller answers with its limit override (Override) must be
// passed as an empty entry list here: envoy takes its replaces from the
// configured rules only.
func (c *Config) Resolve(domain string, descriptors [][]Entry) []*Rule {
	out := make([]*Rule, len(descriptors))
	root := c.domains[domain]
	if root == nil {
		return out
	}
	var replacing []string
	for i, entries := range descriptors {
		r := root.match(entries)
		out[i] = r
		if r != nil {
			replacing = append(replacing, r.Replaces...)
		}
	}
	if len(replacing) == 0 {
		return out
	}
	// Every name is collected before any rule is dropped: two rules that
	// replace each other both go.
	for i, r := range out {
		if r != nil && !r.Unlimited && r.Name != "" && slices.Contains(replacing, r.Name) {
			out[i] = nil
		}
	}
	return out
}

// match walks the tree as envoyproxy/ratelimit does: at each level the
// composite key "key_value" exactly, else the first wildcard (in file order)
// that matches it, else the key alone; the rule is the one on the node
// reached by the descriptor's last entry, and a descriptor longer than the
// configured path matches nothing.
func (root *node) match(entries []Entry) *Rule {
	if n := root.matchNode(entries); n != nil {
		return n.rule
	}
	return nil
}

// matchNode returns the configured descriptor that entries reach (see
// match), or nil.
func (root *node) matchNode(entries []Entry) *node {
	var buf [128]byte
	cur := root
	for i, e := range entries {
		k := append(buf[:0], e.Key...)
		k = append(k, '_')
		k = append(k, e.Value...)
		next := cur.children[string(k)]
		if next == nil {
			for _, w := range cur.wild {
				if globMatch(w.parts, k) {
					next = cur.children[w.key]
					break
				}
			}
		}
		if next == nil {
			next = cur.children[e.Key]
		}
		if next == nil {
			return nil
		}
		if i == len(entries)-1 {
			return next
		}
		if len(next.children) == 0 {
			return nil
		}
		cur = next
	}
	return nil
}

// globMatch reports whether s matches the pattern whose pieces between '*'s
// are parts: each '*' stands for any run of bytes, the empty one included.
func globMatch(parts [][]byte, s []byte) bool {
	if len(parts) == 1 {
		return bytes.Equal(parts[0], s)
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(s) < len(first)+len(last) || !bytes.HasPrefix(s, first) || !bytes.HasSuffix(s, last) {
		return false
	}
	mid := s[len(first) : len(s)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		// The leftmost place of each piece leaves the most room for the
		// rest, so a greedy scan is exact.
		j := bytes.Index(mid, p)
		if j < 0 {
			return false
		}
		mid = mid[j+len(p):]
	}
	return true
}

// Key returns the store key for a descriptor (its entries) that resolved to
// r. It names the domain and every entry, key and value, escaped so that
// distinct descriptors never share a key: "domain/key1=value1/key2=value2",
// with '%', '/', '=', '{' and '}' written %25, %2F, %3D, %7B and %7D (so a
// value cannot pick a Redis Cluster hash tag either). At a level where
// share_threshold applies, the value is the configured wildcard ("files*")
// instead of the one sent, so every value matching it shares one counter, as
// in envoy. A key never begins with '/' (the domain is not empty, and its
// '/' are escaped): sluice serve keeps the keys its HTTP API is given apart
// by beginning them with one.
func (r *Rule) Key(entries []Entry) string { return key(r.Domain, r.levels, entries, "") }

// key is the store key of entries matched through levels, in domain (see
// Rule.Key); a shared wildcard's level is written as shared when it is
// not "" (a named pool's: Concurrency.Key), else as its pattern.
func key(domain string, levels []level, entries []Entry, shared string) string {
	n := len(domain)
	for _, e := range entries {
		n += len(e.Key) + len(e.Value) + 2
	}
	var b strings.Builder
	b.Grow(n + n/4)
	escape(&b, domain)
	for i, e := range entries {
		b.WriteByte('/')
		escape(&b, e.Key)
		b.WriteByte('=')
		v := e.Value
		switch {
		case sharedAt(levels, i, e) && shared != "":
			b.WriteString(shared) // begins with '=', which escape never leaves in a value
			continue
		case sharedAt(levels, i, e):
			v = sharedValue(levels[i].composite, e.Key)
		}
		escape(&b, v)
	}
	return b.String()
}

// sharedValue is the value part of a shared wildcard's composite key, as
// envoy takes it: the key sent and '_' trimmed from its front.
func sharedValue(composite, key string) string {
	if len(composite) > len(key) && strings.HasPrefix(composite, key) && composite[len(key)] == '_' {
		return composite[len(key)+1:]
	}
	return composite
}

func escape(b *strings.Builder, s string) {
	const hex = "0123456789ABCDEF"
	if !strings.ContainsAny(s, "%/={}") {
		b.WriteString(s)
		return
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%', '/', '=', '{', '}':
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		default:
			b.WriteByte(c)
		}
	}
}

// Override builds the rule for a request's per-descriptor limit override:
// requestsPerUnit per unit, unit being the name of envoy's
// RateLimitResponse.RateLimit.Unit ("SECOND" … "YEAR"; any case), counted as
// envoy counts it (sluice.AlignedWindow). The rule has no name, replaces
// nothing, is not in shadow mode, and its key is the descriptor's own. A
// requestsPerUnit of 0 gives a Limit with Rate 0: every hit is over the
// limit. envoy applies an override only for a configured domain (see
// Config.HasDomain).
func Override(domain string, entries []Entry, requestsPerUnit uint32, unit string) (*Rule, error) {
	seconds, ok := unitSeconds[strings.ToUpper(unit)]
	if !ok {
		return nil, fmt.Errorf("rlsconfig: limit override for %s: invalid rate limit unit '%s': want second, minute, hour, day, week, month or year", entryPath(entries), unit)
	}
	rate := int64(requestsPerUnit)
	r := &Rule{
		Domain:          domain,
		Path:            entryPath(entries),
		Unit:            strings.ToLower(unit),
		RequestsPerUnit: rate,
		Limit:           sluice.Limit{Algorithm: sluice.AlignedWindow, Rate: rate, Period: time.Duration(seconds) * time.Second, Burst: rate},
	}
	if rate > 0 {
		if err := r.Limit.Validate(); err != nil {
			return nil, fmt.Errorf("rlsconfig: limit override for %s: sluice cannot count %d per %s exactly: %w", r.Path, rate, r.Unit, err)
		}
	}
	return r, nil
}

// entryPath writes entries as Rule.Path does.
func entryPath(entries []Entry) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('/')
		}
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteByte('=')
			b.WriteString(e.Value)
		}
	}
	return b.String()
}

// How a request's entry reached a configured descriptor: envoy names
// metrics and shares counters by it.
const (
	byKey      = iota // the key alone
	byValue           // key and value exactly
	byWildcard        // a wildcard
)

// how returns how entry e reached level l of a rule's path, as envoy's lookup
// order decides: key and value first, then a wildcard, then the key alone.
func (l *level) how(e Entry) int {
	c := l.composite
	if len(c) == len(e.Key)+1+len(e.Value) && strings.HasPrefix(c, e.Key) && c[len(e.Key)] == '_' && strings.HasSuffix(c, e.Value) {
		return byValue
	}
	if l.wildcard {
		var buf [128]byte
		k := append(buf[:0], e.Key...)
		k = append(k, '_')
		k = append(k, e.Value...)
		if globMatch(l.parts, k) {
			return byWildcard
		}
	}
	return byKey
}

// shared reports whether entry i of a descriptor that resolved to r counts
// under the wildcard pattern instead of its value (share_threshold).
func (r *Rule) shared(i int, e Entry) bool { return sharedAt(r.levels, i, e) }

// sharedAt reports whether entry i, matched through levels, counts under
// the wildcard pattern instead of its value (share_threshold).
func sharedAt(levels []level, i int, e Entry) bool {
	return i < len(levels) && levels[i].share && levels[i].how(e) == byWildcard
}

// StatKey returns envoyproxy/ratelimit's stat name for a descriptor (its
// entries) that resolved to r, before envoy's sanitizing of ':' and '|':
// "domain.key_value.key2", each level named as configured (the wildcard
// pattern for a wildcard, no value for a key alone), except that a level with
// value_to_metric names the value sent. With detailed_metric every level names
// the value sent, "domain.key_value.key2_value2", but a shared wildcard
// (share_threshold) keeps its pattern. An override names the values sent. The
// names are bounded by the configuration unless detailed_metric,
// value_to_metric or an override is used.
func (r *Rule) StatKey(entries []Entry) string {
	anyShared := false
	for i, e := range entries {
		anyShared = anyShared || r.shared(i, e)
	}
	n := len(r.Domain)
	for i, e := range entries {
		n += len(e.Key) + len(e.Value) + 2
		if i < len(r.levels) {
			n += len(r.levels[i].composite)
		}
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(r.Domain)
	for i, e := range entries {
		b.WriteByte('.')
		b.WriteString(e.Key)
		if r.DetailedMetric && !anyShared {
			// envoy's detailed name: "key_value" at every level, the '_'
			// even before an empty value.
			b.WriteByte('_')
			b.WriteString(e.Value)
			continue
		}
		v := e.Value
		if i < len(r.levels) {
			l := &r.levels[i]
			switch how := l.how(e); {
			case r.shared(i, e), !r.DetailedMetric && how == byWildcard && !l.valueToMetric:
				v = sharedValue(l.composite, e.Key)
			case r.DetailedMetric, how == byValue, l.valueToMetric:
				// the value sent
			default:
				v = "" // a key alone
			}
		}
		if v != "" {
			b.WriteByte('_')
			b.WriteString(v)
		}
	}
	return b.String()
}
