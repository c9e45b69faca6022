package policycore_test

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/internal/policycore"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// TestKeyPrefixInjective: under one prefix, two (name, key) pairs whose
// names pass CheckName never make one store key, whatever the keys hold
// (':' most of all) and whatever the prefix holds.
func TestKeyPrefixInjective(t *testing.T) {
	rng := rand.New(rand.NewPCG(testenv.SeedOr(t, 4), 0))
	const alphabet = "ab:%|"
	word := func(n int) string {
		var b strings.Builder
		for range rng.IntN(n + 1) {
			b.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	for _, prefix := range []string{"", "httplimit:", "a:b:", ":"} {
		seen := map[string][2]string{}
		for range 20000 {
			name, key := word(4), word(5)
			if policycore.CheckName(name) != nil {
				continue
			}
			skey := policycore.KeyPrefix(prefix, name) + key
			if was, ok := seen[skey]; ok && was != [2]string{name, key} {
				t.Fatalf("prefix %q: policy %q key %q and policy %q key %q share the store key %q", prefix, was[0], was[1], name, key, skey)
			}
			seen[skey] = [2]string{name, key}
		}
	}
}

func FuzzKeyPrefix(f *testing.F) {
	f.Add("httplimit:", "tenant", "all:global", "tenant:all", "global")
	f.Add("p", "a", "b:c", "a:b", "c")
	f.Fuzz(func(t *testing.T, prefix, n1, k1, n2, k2 string) {
		if policycore.CheckName(n1) != nil || policycore.CheckName(n2) != nil || (n1 == n2 && k1 == k2) {
			return
		}
		if policycore.KeyPrefix(prefix, n1)+k1 == policycore.KeyPrefix(prefix, n2)+k2 {
			t.Fatalf("policy %q key %q and policy %q key %q share a store key under %q", n1, k1, n2, k2, prefix)
		}
	})
}

func TestBound(t *testing.T) {
	long := strings.Repeat("k", policycore.MaxKeyLen+1)
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"tenant-7", "tenant-7"},
		{strings.Repeat("k", policycore.MaxKeyLen), strings.Repeat("k", policycore.MaxKeyLen)},
		{long, sha(long)},
	} {
		if got := policycore.Bound(tc.in); got != tc.want {
			t.Errorf("Bound(%.20q…) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

type stringer string

func (s stringer) String() string { return string(s) }

func TestValuesAndContextKeys(t *testing.T) {
	for _, tc := range []struct {
		vs   []string
		want string
		ok   bool
	}{
		{nil, "", false},
		{[]string{"  "}, "", false},
		{[]string{" key-1 "}, "key-1", true},
		{[]string{"a", "b"}, "a,b", true},
		{[]string{strings.Repeat("v", 200)}, sha(strings.Repeat("v", 200)), true},
	} {
		if got, ok := policycore.ValuesKey(tc.vs); got != tc.want || ok != tc.ok {
			t.Errorf("ValuesKey(%q) = %q, %v; want %q, %v", tc.vs, got, ok, tc.want, tc.ok)
		}
	}
	for _, tc := range []struct {
		v    any
		want string
		ok   bool
	}{
		{nil, "", false},
		{"", "", false},
		{42, "", false},
		{"user-1", "user-1", true},
		{stringer("user-2"), "user-2", true},
		{stringer(strings.Repeat("u", 129)), sha(strings.Repeat("u", 129)), true},
	} {
		if got, ok := policycore.ContextKey(tc.v); got != tc.want || ok != tc.ok {
			t.Errorf("ContextKey(%v) = %q, %v; want %q, %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
}

// sha is what Bound makes of a long key, computed apart.
func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// TestJoinKeysInjective: two different lists of parts never join to one
// key, whatever the parts hold ('|' and '%' most of all); a part not found
// makes the whole not found.
func TestJoinKeysInjective(t *testing.T) {
	rng := rand.New(rand.NewPCG(testenv.SeedOr(t, 5), 0))
	const alphabet = "a|%7C5"
	seen := map[string][]string{}
	for range 20000 {
		parts := make([]string, 1+rng.IntN(3))
		for i := range parts {
			var b strings.Builder
			for range rng.IntN(4) {
				b.WriteByte(alphabet[rng.IntN(len(alphabet))])
			}
			parts[i] = b.String()
		}
		key, ok := policycore.JoinKeys(len(parts), func(i int) (string, bool) { return parts[i], true })
		if !ok {
			t.Fatalf("%q: not found", parts)
		}
		if was, ok := seen[key]; ok && strings.Join(was, "\x00") != strings.Join(parts, "\x00") {
			t.Fatalf("%q and %q both join to %q", was, parts, key)
		}
		seen[key] = parts
	}
	if k, _ := policycore.JoinKeys(2, func(i int) (string, bool) { return []string{"a|b", "50%"}[i], true }); k != "a%7Cb|50%25" {
		t.Errorf("joined %q", k)
	}
	if _, ok := policycore.JoinKeys(2, func(i int) (string, bool) { return "x", i == 0 }); ok {
		t.Error("a part not found, the whole found")
	}
}
