// Package policycore is what httplimit's and grpclimit's policies, and the
// rules of sluice serve, share: which names a policy may take, how its
// store keys are made from its name, and how its figures are written in
// the RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers-11.
//
// It is internal so that each door keeps its own Policy type and errors;
// the rules themselves live here once.
package policycore

import (
	"fmt"

	"github.com/sluice-go/sluice/algo"
)

// MaxNameLen is the longest policy name, in bytes.
const MaxNameLen = 64

// CheckName reports why n cannot name a policy, or nil: a name is 1 to
// MaxNameLen printable ASCII characters, without '"', '\' or ':'. The
// first two keep it an RFC 9651 String as it is; ':' ends the name in a
// store key (KeyPrefix).
func CheckName(n string) error {
	if n == "" || len(n) > MaxNameLen {
		return fmt.Errorf("name %q: want 1 to %d characters", n, MaxNameLen)
	}
	for i := 0; i < len(n); i++ {
		if c := n[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == ':' {
			return fmt.Errorf("name %q: only printable ASCII, without '\"', '\\' or ':'", n)
		}
	}
	return nil
}

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

// Quota returns the draft-11 figures of a limit that do not change between
// requests: q, the largest cost a fresh key admits at once (its capacity,
// which a RateLimit r never exceeds), and w, the whole seconds (rounded
// up, at least 1) in which a budget spent to nothing comes back to q.
// p must be valid.
func Quota(p algo.Params) (q, w int64) {
	return p.Capacity(), max((p.Refill()+999_999)/1_000_000, 1)
}
