package policycore_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policycore"
	storeapi "github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/internal/testenv"
)

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"a", "per-ip", "tenant all", "50%", "~!#$&'()*+,-./;<=>?@[]^_`{|}", strings.Repeat("x", 64)} {
		if err := policycore.CheckName(ok); err != nil {
			t.Errorf("CheckName(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", strings.Repeat("x", 65), "tenant:all", ":", "a:", `a"b`, `a\b`, "a\tb", "café", "a\x7f"} {
		if err := policycore.CheckName(bad); err == nil {
			t.Errorf("CheckName(%q) accepted it", bad)
		}
	}
}

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

func TestQuota(t *testing.T) {
	for _, tc := range []struct {
		lim  string
		q, w int64
	}{
		{"100/1m", 100, 60},
		{"10/1s token-bucket burst 50", 50, 5},
		{"10/1s gcra burst 50", 50, 5},
		{"3/1s gcra burst 1", 1, 1},
		{"4/1s leaky-bucket burst 3", 4, 1},
		{"1/1h leaky-bucket burst 2", 3, 10800},
		{"30/90s fixed-window", 30, 90},
		{"5/15m sliding-log", 5, 900},
		{"7/1500ms sliding-window", 7, 2},
		{"2/1ms aligned-window", 2, 1}, // w is at least 1
	} {
		l, err := sluice.ParseLimit(tc.lim)
		if err != nil {
			t.Fatal(err)
		}
		p, err := storeapi.Params(l)
		if err != nil {
			t.Fatal(err)
		}
		if q, w := policycore.Quota(p); q != tc.q || w != tc.w {
			t.Errorf("%s: q=%d w=%d, want q=%d w=%d", tc.lim, q, w, tc.q, tc.w)
		}
	}
}
