package policycore

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// KeyPrefix is the head of the store keys of the policy named name, under
// the prefix its middleware or interceptor was given: prefix + name + ":".
// A key is then KeyPrefix(prefix, name) + the request's key, whatever
// bytes that holds.
//
// Under one prefix that is injective when names pass CheckName: the name
// is what lies between the prefix and the first ':' after it, and the
// request's key is the rest, so two policies never share a key, whatever a
// client sends (a header "all:global" under policy "tenant" cannot reach
// policy "tenant:all", which cannot exist). The prefix cannot break it: it
// is one string for every policy of a middleware, cut off whole before the
// name is read. Middlewares that share a store and a prefix share the
// budgets of their policies of one name, as documented.
func KeyPrefix(prefix, name string) string {
	return prefix + name + ":"
}

// MaxKeyLen bounds a key taken from a request as it is (a header, a
// metadata value, an identity): a longer one is keyed by its SHA-256
// (Bound), so that a client cannot make the store keep large keys.
const MaxKeyLen = 128

// Bound returns s when it is at most MaxKeyLen bytes, else "sha256:" and
// its SHA-256 in hex (71 bytes).
func Bound(s string) string {
	if len(s) <= MaxKeyLen {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ValuesKey is the key of a field's values (an HTTP header's lines, a
// metadata field's values): joined by commas, trimmed and bounded. Not
// found when they are absent or blank.
func ValuesKey(vs []string) (string, bool) {
	v := strings.TrimSpace(strings.Join(vs, ","))
	if v == "" {
		return "", false
	}
	return Bound(v), true
}

// ContextKey is the key of a value a request's context holds (an identity
// an earlier middleware set): a non-empty string or fmt.Stringer, bounded.
// Anything else is not found.
func ContextKey(v any) (string, bool) {
	var s string
	switch v := v.(type) {
	case string:
		s = v
	case fmt.Stringer:
		s = v.String()
	}
	if s == "" {
		return "", false
	}
	return Bound(s), true
}

// JoinKeys is the key made of n parts, part(i) giving the i-th: found only
// when every part is. Each part is escaped ('%' as %25, '|' as %7C) and
// the parts are joined by '|', so that two different lists of parts never
// make one key.
func JoinKeys(n int, part func(i int) (string, bool)) (string, bool) {
	var buf [128]byte
	b := buf[:0]
	for i := range n {
		s, ok := part(i)
		if !ok {
			return "", false
		}
		if i > 0 {
			b = append(b, '|')
		}
		for j := 0; j < len(s); j++ {
			switch c := s[j]; c {
			case '|':
				b = append(b, "%7C"...)
			case '%':
				b = append(b, "%25"...)
			default:
				b = append(b, c)
			}
		}
	}
	return string(b), true
}
