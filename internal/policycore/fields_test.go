package policycore_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/url"
	"testing"

	"github.com/dunglas/httpsfv"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/policycore"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// item is one policy's figures as both fields carry them.
type item struct {
	name       string
	q, w, r, t int64
}

// fields writes items' RateLimit-Policy and RateLimit values as the doors
// do.
func fields(items []item) (pol, cur string) {
	var p, c []byte
	for i, it := range items {
		if i > 0 {
			p, c = append(p, ", "...), append(c, ", "...)
		}
		p = policycore.AppendPolicy(p, it.name, it.q, it.w)
		c = policycore.AppendLimit(c, it.name, it.r, it.t, it.q)
	}
	return string(p), string(c)
}

// parse reads a field with an independent RFC 9651 parser, and returns its
// items' names (unescaped and percent-decoded) and Integer parameters.
func parse(t *testing.T, field string, params ...string) ([]string, []map[string]int64) {
	t.Helper()
	l, err := httpsfv.UnmarshalList([]string{field})
	if err != nil {
		t.Fatalf("%q is not an RFC 9651 List: %v", field, err)
	}
	var names []string
	var figs []map[string]int64
	for _, m := range l {
		it, ok := m.(httpsfv.Item)
		if !ok {
			t.Fatalf("%q: member %v is not an Item", field, m)
		}
		s, ok := it.Value.(string)
		if !ok {
			t.Fatalf("%q: item %v is not a String", field, it.Value)
		}
		name, err := url.PathUnescape(s)
		if err != nil {
			t.Fatalf("%q: name %q does not percent-decode: %v", field, s, err)
		}
		names = append(names, name)
		f := map[string]int64{}
		for _, p := range params {
			v, ok := it.Params.Get(p)
			n, isInt := v.(int64)
			if !ok || !isInt {
				t.Fatalf("%q: item %q has %s=%v, want an Integer", field, name, p, v)
			}
			f[p] = n
		}
		figs = append(figs, f)
	}
	return names, figs
}

// check parses both fields of items and compares what a client reads with
// what was meant: the names, q and w clamped to Integers, r never above q.
func check(t *testing.T, items []item) {
	t.Helper()
	pol, cur := fields(items)
	pn, pf := parse(t, pol, "q", "w")
	cn, cf := parse(t, cur, "r", "t")
	if len(pn) != len(items) || len(cn) != len(items) {
		t.Fatalf("%d items: read %d and %d from %q and %q", len(items), len(pn), len(cn), pol, cur)
	}
	clamp := func(v int64) int64 { return min(max(v, 0), policycore.MaxInt) }
	for i, it := range items {
		if pn[i] != it.name || cn[i] != it.name {
			t.Errorf("name %q read back as %q and %q (%s / %s)", it.name, pn[i], cn[i], pol, cur)
		}
		if q := clamp(it.q); pf[i]["q"] != q || pf[i]["w"] != clamp(it.w) {
			t.Errorf("%q: q=%d w=%d, want %d and %d", pol, pf[i]["q"], pf[i]["w"], q, clamp(it.w))
		}
		if r := cf[i]["r"]; r > pf[i]["q"] || r != min(clamp(it.r), clamp(it.q)) {
			t.Errorf("%q under %q: r=%d (from r %d, q %d)", cur, pol, r, it.r, it.q)
		}
		if cf[i]["t"] != clamp(it.t) {
			t.Errorf("%q: t=%d, want %d", cur, cf[i]["t"], clamp(it.t))
		}
	}
}

func TestFieldsParse(t *testing.T) {
	check(t, []item{
		{"per-ip", 100, 60, 99, 1},
		{"café", 10, 1, 9, 1},            // UTF-8: percent-encoded
		{"a\tb\x00\x7f\xff", 1, 1, 0, 0}, // controls and a byte that is not UTF-8
		{`say "hi" \ bye`, 5, 5, 5, 5},   // escaped
		{"50%", 5, 5, 5, 5},              // '%' itself is encoded, so that decoding is exact
		{"caf%c3%a9", 5, 5, 5, 5},        // not the same as "café"
		{"big", algo.MaxScaled, math.MaxInt64, algo.MaxScaled, math.MaxInt64},
		{"negative", -1, -1, -5, -1},
		{"r above q", 10, 1, 49, 1},
	})
}

// TestNamesWrittenApart: the encoding is injective, so two policies are
// never shown under one name.
func TestNamesWrittenApart(t *testing.T) {
	seen := map[string]string{}
	for _, n := range []string{"café", "caf%c3%a9", "caf%C3%A9", "50%", "50%25", "a\tb", "a%09b", `a"b`, `a\"b`} {
		s := string(policycore.AppendName(nil, n))
		if was, ok := seen[s]; ok {
			t.Errorf("%q and %q are both written %s", was, n, s)
		}
		seen[s] = n
	}
	if got := string(policycore.AppendName(nil, "café 50%")); got != `"caf%c3%a9 50%25"` {
		t.Errorf("café 50%% is written %s", got)
	}
}

// TestFieldsRandom: random names (any bytes) and figures (any int64) make
// fields an RFC 9651 parser reads back as meant.
func TestFieldsRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(testenv.SeedOr(t, 11), 0))
	figure := func() int64 {
		switch rng.IntN(4) {
		case 0:
			return rng.Int64N(1000)
		case 1:
			return policycore.MaxInt + rng.Int64N(3) - 1
		case 2:
			return -rng.Int64()
		}
		return rng.Int64()
	}
	for range 2000 {
		items := make([]item, 1+rng.IntN(3))
		for i := range items {
			name := make([]byte, 1+rng.IntN(8))
			for j := range name {
				name[j] = byte(rng.IntN(256))
			}
			items[i] = item{string(name), figure(), figure(), figure(), figure()}
		}
		check(t, items)
		if t.Failed() {
			t.Fatalf("items %q", fmt.Sprint(items))
		}
	}
}

func FuzzFields(f *testing.F) {
	f.Add("per-ip", int64(100), int64(60), int64(99), int64(1))
	f.Add("café\t\"\\%", int64(algo.MaxScaled), int64(-1), int64(math.MaxInt64), int64(0))
	f.Fuzz(func(t *testing.T, name string, q, w, r, tt int64) {
		if name == "" {
			return
		}
		check(t, []item{{name, q, w, r, tt}, {"other", 1, 1, 1, 1}})
	})
}

// TestEncoderAllocatesNothing: httplimit writes its fields in a stack
// buffer, one allocation a style; the encoder adds none.
func TestEncoderAllocatesNothing(t *testing.T) {
	var buf [256]byte
	n := testing.AllocsPerRun(100, func() {
		b := policycore.AppendPolicy(buf[:0], "per-ip", 100, 60)
		b = append(b, ", "...)
		_ = policycore.AppendLimit(b, "café", 99, 1, 100)
	})
	if n != 0 {
		t.Errorf("%v allocations a run, want 0", n)
	}
}
