package rlsconfig

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"
)

// FuzzParse: no input panics; a failed load is an *Error naming the file; a
// loaded configuration resolves any descriptor and keys it without panic, and
// every rule it holds is one sluice can enforce, its metadata one Envoy can
// be given.
func FuzzParse(f *testing.F) {
	paths, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		f.Fatal(err)
	}
	more, err := filepath.Glob("testdata/dir/*.y*ml")
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range append(paths, more...) {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"",
		"domain: d\n",
		"domain: d\ndescriptors:\n  - key: k\n    value: v*w*\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: foo}\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, name: a, replaces: [{name: a}]}\n",
		"domain: d\ndescriptors: &x\n  - key: k\n    descriptors: *x\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {<<: {unit: minute}, requests_per_unit: 3, algorithm: gcra, burst: 2}\n",
		"domain: d\n0.25: x\n",
		"domain: d\ndescriptors:\n  - key: t\n    value: '*'\n    share_threshold: true\n    concurrency: {max: 4, lifetime: 30s, name: p}\n    rate_limit: {unit: second, requests_per_unit: 2}\n    descriptors:\n      - key: c\n        concurrency: {headroom: 1}\n",
		"domain: d\n---\ndomain: e\n",
		"domain: [\n",
		"{domain: d, descriptors: [{key: a, descriptors: [{key: b, value: '*', rate_limit: {period: 90s, requests_per_unit: 9}}]}]}",
		"domain: d\ndescriptors:\n  - key: k\n    metadata: &m {a: [1, yes, \"no\", ~, {0x1: x}], b: 2001-12-14}\n    descriptors:\n      - key: j\n        metadata: {<<: *m, c: .inf}\n        rate_limit: {unit: second, requests_per_unit: 1}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(map[string][]byte{"f.yaml": data})
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.File != "f.yaml" || !strings.HasPrefix(err.Error(), "f.yaml") {
				t.Fatalf("error %v (%T) is not an *Error naming f.yaml", err, err)
			}
			return
		}
		// Merged with itself (MERGE_DOMAIN_CONFIG): a domain with rules
		// configures them twice, envoy's error on the later file; one
		// without loads as before.
		m, merr := Options{MergeDomains: true}.Parse(map[string][]byte{"a.yaml": data, "b.yaml": data})
		switch {
		case len(c.Rules()) > 0 && (merr == nil || !strings.HasPrefix(merr.Error(), "b.yaml") || !strings.Contains(merr.Error(), "duplicate descriptor composite key")):
			t.Fatalf("merged with itself: %v, want b.yaml's duplicate descriptor composite key", merr)
		case len(c.Rules()) == 0 && merr == nil && len(m.Rules()) != 0:
			t.Fatalf("merged with itself, no rules alone: %d rules", len(m.Rules()))
		}
		domains := c.Domains()
		for _, r := range c.Rules() {
			if !c.HasDomain(r.Domain) {
				t.Fatalf("rule %s of unlisted domain %q (domains %v)", r.Path, r.Domain, domains)
			}
			if !r.Unlimited && r.Limit.Rate > 0 {
				if err := r.Limit.Validate(); err != nil {
					t.Fatalf("rule %s: %v", r.Path, err)
				}
			}
			// The service turns metadata into a google.protobuf.Struct.
			if _, err := structpb.NewStruct(r.Metadata); r.Metadata != nil && err != nil {
				t.Fatalf("rule %s: metadata %v: %v", r.Path, r.Metadata, err)
			}
		}
		// Descriptors made of the input's words, against every domain.
		words := strings.Fields(string(data))
		if len(words) > 64 {
			words = words[:64]
		}
		var descs [][]Entry
		for i := 0; i+1 < len(words); i += 2 {
			descs = append(descs, []Entry{{Key: strings.Trim(words[i], ":-"), Value: words[i+1]}})
		}
		for _, cc := range c.Concurrencies() {
			if err := cc.Limit.Validate(); err != nil || cc.Limit.Limit < 1 || cc.Limit.Headroom >= cc.Limit.Limit {
				t.Fatalf("concurrency %s: %+v: %v", cc.Path, cc.Limit, err)
			}
		}
		for _, d := range append(domains, "missing") {
			for _, e := range descs {
				if cc := c.ResolveConcurrency(d, e); cc != nil {
					if k := cc.Key(e); strings.Count(k, "/") > len(e) {
						t.Fatalf("concurrency key %q of %v", k, e)
					}
				}
			}
			got := c.Resolve(d, descs)
			if len(got) != len(descs) {
				t.Fatalf("Resolve returned %d rules for %d descriptors", len(got), len(descs))
			}
			for i, r := range got {
				// Every separator in a value is escaped: a key has one '/'
				// per entry.
				if r == nil {
					continue
				}
				if k := r.Key(descs[i]); strings.Count(k, "/") != len(descs[i]) {
					t.Fatalf("key %q of %v", k, descs[i])
				}
			}
		}
	})
}
