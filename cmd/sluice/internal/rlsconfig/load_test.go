package rlsconfig

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
)

// aliasBomb is a file whose metadata expands tenfold at each of seven levels.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n  - key: k\n    metadata:\n      a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i <= 7; i++ {
		fmt.Fprintf(&b, "      a%d: &a%d [", i, i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]\n")
	}
	return b.String()
}

// ruleBomb is a file of domain d whose anchors, reused under many parents,
// make 1,110 + 1,000·uses + extra rules from a few kilobytes: 10 rules
// under &l0, 10 copies of l0 under &l1, 10 of l1 under &l2, then uses
// copies of l2 and extra rules of their own.
func ruleBomb(d string, uses, extra int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "domain: %s\ndescriptors:\n  - key: l0\n    descriptors: &l0\n", d)
	for i := range 10 {
		fmt.Fprintf(&b, "      - {key: r%d, rate_limit: {unit: second, requests_per_unit: 1}}\n", i)
	}
	for l := 1; l <= 2; l++ {
		fmt.Fprintf(&b, "  - key: l%d\n    descriptors: &l%d\n", l, l)
		for i := range 10 {
			fmt.Fprintf(&b, "      - {key: n%d, descriptors: *l%d}\n", i, l-1)
		}
	}
	for i := range uses {
		fmt.Fprintf(&b, "  - {key: top%d, descriptors: *l2}\n", i)
	}
	for i := range extra {
		fmt.Fprintf(&b, "  - {key: x%d, rate_limit: {unit: second, requests_per_unit: 1}}\n", i)
	}
	return b.String()
}

// deep is a file with descriptors nested n levels.
func deep(n int) string {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	for i := range n {
		ind := strings.Repeat("  ", 2*i)
		fmt.Fprintf(&b, "%s- key: k%d\n%s  descriptors:\n", ind, i, ind)
	}
	return b.String()
}

// The rules cap bounds a configuration's rules, all its files together: a
// small file of anchors reused under many parents is a load error, not a
// gigabyte of rules, metric series and console rows.
func TestMaxRules(t *testing.T) {
	src := ruleBomb("test", 8, 890)
	c, err := Parse(map[string][]byte{"test.yaml": []byte(src)})
	if err != nil || int64(len(c.Rules())) != limits.Rules.Default {
		t.Fatalf("%d bytes of YAML, %d rules: %v, want them loaded", len(src), limits.Rules.Default, err)
	}
	// One more is refused, and loads with the cap raised (--limit
	// rules=20000), from a file and from xDS alike.
	src = ruleBomb("test", 8, 891)
	if _, err := Parse(map[string][]byte{"test.yaml": []byte(src)}); !errors.Is(err, limits.ErrExceeded) {
		t.Fatalf("10,001 rules: %v, want the cap", err)
	}
	raised := Options{Limits: limits.Table{Rules: 20_000}}
	if c, err := raised.Parse(map[string][]byte{"test.yaml": []byte(src)}); err != nil || len(c.Rules()) != 10_001 {
		t.Fatalf("10,001 rules, the cap raised: %v", err)
	}
	res := xdsResource(t, wideConfig(10_001))
	if _, err := (Options{}).ParseXDS(res); !errors.Is(err, limits.ErrExceeded) {
		t.Fatalf("xDS, 10,001 rules: %v, want the cap", err)
	}
	if c, err := raised.ParseXDS(res); err != nil || len(c.Rules()) != 10_001 {
		t.Fatalf("xDS, 10,001 rules, the cap raised: %v", err)
	}
	// Two files under the bound, together over it: the second is named.
	_, err = Parse(map[string][]byte{"a.yaml": []byte(ruleBomb("a", 5, 0)), "b.yaml": []byte(ruleBomb("b", 5, 0))})
	var e *Error
	if !errors.As(err, &e) || e.File != "b.yaml" || !strings.Contains(e.Msg, "more than 10000 rules") {
		t.Errorf("two files of 6,110 rules: %v, want an *Error in b.yaml naming the bound", err)
	}
}

func TestLoadErrors(t *testing.T) {
	rl := func(body string) string {
		return "domain: test\ndescriptors:\n  - key: k\n    rate_limit: " + body + "\n"
	}
	tests := []struct {
		name string
		src  string
		line int    // 0: not checked
		path string // the Error's Path
		want string // in the message
	}{
		// envoy's own errors, with envoy's messages.
		{"no domain", "descriptors: []\n", 1, "", "config file cannot have empty domain"},
		{"empty domain", "domain: \"\"\ndescriptors: []\n", 1, "", "config file cannot have empty domain"},
		{"empty file", "", 1, "", "config file cannot have empty domain"},
		{"only a comment", "# nothing here\n", 1, "", "config file cannot have empty domain"},
		{"descriptor without key", "domain: test\ndescriptors:\n  - value: v\n", 3, "test", "descriptor has empty key"},
		{"nested descriptor without key", "domain: test\ndescriptors:\n  - key: a\n    descriptors:\n      - value: v\n", 5, "test.a", "descriptor has empty key"},
		{"duplicate key and value", "domain: test\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n", 5, "test.k_v", "duplicate descriptor composite key 'test.k_v'"},
		{"duplicate key alone", "domain: test\ndescriptors:\n  - key: k\n  - key: k\n", 4, "test.k", "duplicate descriptor composite key 'test.k'"},
		{"duplicate nested", "domain: test\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n      - key: b\n", 6, "test.a.b", "duplicate descriptor composite key 'test.a.b'"},
		{"duplicate composite key from joining", "domain: test\ndescriptors:\n  - key: a\n    value: b_c\n  - key: a_b\n    value: c\n", 5, "test.a_b_c", "duplicate descriptor composite key 'test.a_b_c'"},
		{"bad unit", rl("{unit: foo, requests_per_unit: 1}"), 4, "test.k", "invalid rate limit unit 'foo'"},
		{"no unit", rl("{requests_per_unit: 1}"), 4, "test.k", "invalid rate limit unit ''"},
		{"unit unknown", rl("{unit: unknown, requests_per_unit: 1}"), 4, "test.k", "invalid rate limit unit 'unknown'"},
		{"unit plural", rl("{unit: hours, requests_per_unit: 1}"), 4, "test.k", "invalid rate limit unit 'hours': want second, minute, hour, day, week, month or year"},
		{"unlimited with a unit", rl("{unlimited: true, unit: second}"), 4, "test.k", "should not specify rate limit unit when unlimited"},
		{"empty replaces entry", rl("{unit: second, requests_per_unit: 1, name: a, replaces: [{name: \"\"}]}"), 4, "test.k", "should not have an empty replaces entry"},
		{"replaces entry without a name", rl("{unit: second, requests_per_unit: 1, name: a, replaces: [{}]}"), 4, "test.k", "should not have an empty replaces entry"},
		{"replaces itself", rl("{unit: second, requests_per_unit: 1, name: a, replaces: [{name: b}, {name: a}]}"), 4, "test.k", "replaces should not contain name of same descriptor"},
		{"share_threshold without a wildcard", "domain: test\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n", 3, "test.k_v", "share_threshold can only be used with wildcard values (containing '*'), but found key 'k_v'"},
		{"unknown key", "domain: test\ndescriptors:\n  - key: k\n    ratelimit: {unit: second}\n", 4, "", "config error, unknown key 'ratelimit'"},
		{"misspelled key", rl("{unit: second, requestsperunit: 5}"), 4, "", "config error, unknown key 'requestsperunit'"},
		{"unknown top-level key", "domain: test\nversion: 2\n", 2, "", "config error, unknown key 'version'"},
		{"key not a string", "domain: test\n0.25: x\n", 2, "", "config error, key is not of type string: 0.25"},
		{"list of a string", "domain: test\ndescriptors:\n  - a\n", 3, "", "config error, yaml file contains list of type other than map: a"},
		{"replaces of a string", rl("{unit: second, requests_per_unit: 1, replaces: [a]}"), 4, "", "config error, yaml file contains list of type other than map: a"},
		{"bad YAML", "domain: test\ndescriptors: [\n", 0, "", "error loading config file: yaml: line"},
		{"tab indentation", "domain: test\ndescriptors:\n\t- key: k\n", 0, "", "error loading config file: yaml:"},
		// sluice is stricter where envoy silently ignores.
		{"misplaced key", "domain: test\ndescriptors:\n  - key: k\n    unit: second\n", 4, "", "config error, key 'unit' does not belong in a descriptor"},
		{"misplaced key in a rate_limit", rl("{unit: second, requests_per_unit: 1, key: x}"), 4, "", "config error, key 'key' does not belong in a rate_limit"},
		{"key twice", "domain: test\ndomain: other\n", 2, "", "key 'domain' appears twice"},
		{"two documents", "domain: test\n---\ndomain: other\n", 0, "", "more than one YAML document"},
		// wrong kinds of values
		{"file is a list", "- domain: test\n", 1, "", "the file must be a map"},
		{"domain is a list", "domain: [a]\n", 1, "", "domain must be a string, not a list"},
		{"descriptors is a string", "domain: test\ndescriptors: k\n", 2, "", "descriptors must be a list of maps"},
		{"rate_limit is a list", rl("[1]"), 4, "", "rate_limit must be a map"},
		{"bool not a bool", "domain: test\ndescriptors:\n  - key: k\n    shadow_mode: maybe\n", 4, "", "shadow_mode must be true or false, not maybe"},
		{"negative requests_per_unit", rl("{unit: second, requests_per_unit: -1}"), 4, "", "requests_per_unit must be a whole number from 0 to 4294967295, not -1"},
		{"fractional requests_per_unit", rl("{unit: second, requests_per_unit: 1.5}"), 4, "", "requests_per_unit must be a whole number"},
		{"requests_per_unit over uint32", rl("{unit: second, requests_per_unit: 4294967296}"), 4, "", "requests_per_unit must be a whole number"},
		// sluice's extensions
		{"unit and period", rl("{unit: second, period: 1s, requests_per_unit: 1}"), 4, "test.k", "rate_limit has both unit and period"},
		{"bad period", rl("{period: soon, requests_per_unit: 1}"), 4, "test.k", "period 'soon' is not a positive Go duration"},
		{"negative period", rl("{period: -1s, requests_per_unit: 1}"), 4, "test.k", "period '-1s' is not a positive Go duration"},
		{"unknown algorithm", rl("{unit: second, requests_per_unit: 1, algorithm: magic}"), 4, "test.k", "algorithm 'magic'"},
		{"burst on a window", rl("{unit: second, requests_per_unit: 1, burst: 5}"), 4, "test.k", "burst applies to token-bucket, gcra and leaky-bucket, not aligned-window"},
		{"negative burst", rl("{unit: second, requests_per_unit: 1, algorithm: gcra, burst: -5}"), 4, "", "burst must be a whole number from 0"},
		{"burst with no rate", rl("{unit: second, requests_per_unit: 0, algorithm: gcra, burst: 5}"), 4, "test.k", "burst needs a requests_per_unit above 0"},
		{"unlimited with an algorithm", rl("{unlimited: true, algorithm: gcra}"), 4, "test.k", "an unlimited rate_limit takes no algorithm, burst, period, debt or charge"},
		{"unlimited with a charge", rl("{unlimited: true, charge: true}"), 4, "test.k", "an unlimited rate_limit takes no algorithm, burst, period, debt or charge"},
		{"debt on a sliding window", rl("{unit: second, requests_per_unit: 5, algorithm: sliding-window, debt: 5}"), 4, "test.k", "debt applies to token-bucket, gcra, fixed-window and aligned-window (the algorithms that can carry a debt), not sliding-window"},
		{"charge on a leaky bucket", rl("{unit: second, requests_per_unit: 5, algorithm: leaky-bucket, charge: true}"), 4, "test.k", "charge applies to token-bucket, gcra, fixed-window and aligned-window (the algorithms that can carry a debt), not leaky-bucket"},
		{"debt with no rate", rl("{unit: second, requests_per_unit: 0, debt: 5}"), 4, "test.k", "debt needs a requests_per_unit above 0"},
		{"negative debt", rl("{unit: second, requests_per_unit: 1, debt: -5}"), 4, "", "debt must be a whole number from 0"},
		{"charge not a bool", rl("{unit: second, requests_per_unit: 1, charge: tokens}"), 4, "", "charge must be true or false, not tokens"},
		{"charge in quota_mode", "domain: test\ndescriptors:\n  - key: k\n    quota_mode: true\n    rate_limit: {unit: second, requests_per_unit: 1, charge: true}\n", 5, "test.k", "charge cannot be in quota_mode"},
		{"beyond sluice's exact range", rl("{unit: day, requests_per_unit: 100000, algorithm: token-bucket, burst: 100000}"), 4, "test.k", "sluice cannot count 100000 per day exactly with token-bucket"},
		{"token bucket with a zero burst", rl("{unit: second, requests_per_unit: 5, algorithm: token-bucket, burst: 0}"), 4, "test.k", "needs a burst of at least 1"},
		// bounds
		{"alias bomb", aliasBomb(), 0, "", "expands to more than"},
		{"rule bomb", ruleBomb("test", 60, 0), 0, "", "more than 10000 rules (rate_limits, an alias's counted at each use): over the service's limit rules of 10000"},
		{"one rule too many", ruleBomb("test", 8, 891), 0, "", "(--limit rules=N raises it)"},
		{"nested too deep", deep(70), 0, "", "descriptors nested more than 64 deep"},
		{"descriptors that contain themselves", "domain: d\ndescriptors: &x\n  - key: k\n    descriptors: *x\n", 0, "", "descriptors nested more than 64 deep"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse(map[string][]byte{"test.yaml": []byte(tt.src)})
			if err == nil {
				t.Fatalf("loaded (%d rules), want an error with %q", len(c.Rules()), tt.want)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T) is not an *Error", err, err)
			}
			if e.File != "test.yaml" {
				t.Errorf("File = %q", e.File)
			}
			if tt.line != 0 && e.Line != tt.line {
				t.Errorf("Line = %d, want %d (%v)", e.Line, tt.line, err)
			}
			if tt.path != "" && e.Path != tt.path {
				t.Errorf("Path = %q, want %q (%v)", e.Path, tt.path, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "test.yaml") {
				t.Errorf("error %q does not start with the file", err)
			}
		})
	}
}

func TestErrorText(t *testing.T) {
	e := &Error{File: "a.yaml", Line: 4, Path: "d.k_v", Msg: "invalid rate limit unit 'foo'"}
	if got, want := e.Error(), "a.yaml:4: descriptor d.k_v: invalid rate limit unit 'foo'"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	e = &Error{File: "a.yaml", Msg: "error loading config file: yaml: line 2: did not find expected node content"}
	if got, want := e.Error(), "a.yaml: error loading config file: yaml: line 2: did not find expected node content"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestDuplicateDomain(t *testing.T) {
	files := map[string][]byte{
		"b.yaml": []byte("domain: shared\ndescriptors: [{key: x, rate_limit: {unit: second, requests_per_unit: 1}}]\n"),
		"a.yaml": []byte("domain: shared\n"),
	}
	_, err := Parse(files)
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v, want an *Error", err)
	}
	if e.File != "b.yaml" || e.Line != 1 || !strings.Contains(e.Msg, "duplicate domain 'shared' in config file") || !strings.Contains(e.Msg, "a.yaml") {
		t.Errorf("err = %v: want b.yaml:1, envoy's message, and the first file named", err)
	}
}

// With MergeDomains (envoy's MERGE_DOMAIN_CONFIG) files of one domain
// merge in the order of their names: each file's descriptors are matched as
// if written in one, wildcards in that order; a top-level descriptor both
// configure is envoy's error, on the later file.
func TestMergeDomains(t *testing.T) {
	files := map[string][]byte{
		"b.yaml": []byte("domain: shared\ndescriptors:\n  - key: path\n    value: /api/*\n    rate_limit: {unit: second, requests_per_unit: 2}\n  - key: user\n    descriptors:\n      - key: plan\n        rate_limit: {unit: minute, requests_per_unit: 3}\n"),
		"a.yaml": []byte("domain: shared\ndescriptors:\n  - key: path\n    value: /api/v1/*\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: tenant\n    rate_limit: {unit: hour, requests_per_unit: 4}\n"),
		"c.yaml": []byte("domain: other\ndescriptors: [{key: x, rate_limit: {unit: day, requests_per_unit: 5}}]\n"),
	}
	c, err := Options{MergeDomains: true}.Parse(files)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Domains(), " "); got != "other shared" {
		t.Errorf("domains %q, want other shared", got)
	}
	for _, m := range []struct{ entries, want string }{
		{"path=/api/v1/users", "path=/api/v1/*"}, // a.yaml's wildcard first
		{"path=/api/v2/users", "path=/api/*"},
		{"tenant=t1", "tenant"},
		{"user=u1 plan=p", "user/plan"},
	} {
		if r := c.Resolve("shared", [][]Entry{es(m.entries)}); pathOf(r[0]) != m.want {
			t.Errorf("%s: rule %s, want %s", m.entries, pathOf(r[0]), m.want)
		}
	}
	if _, err := Parse(files); err == nil || !strings.Contains(err.Error(), "duplicate domain 'shared'") {
		t.Errorf("without MergeDomains: %v, want the duplicate domain error", err)
	}
	files["d.yaml"] = []byte("domain: shared\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: hour, requests_per_unit: 9}\n")
	_, err = Options{MergeDomains: true}.Parse(files)
	var e *Error
	if !errors.As(err, &e) || e.File != "d.yaml" || e.Msg != "duplicate descriptor composite key 'shared.tenant'" {
		t.Errorf("a top-level descriptor in two merged files: %v, want d.yaml: duplicate descriptor composite key 'shared.tenant'", err)
	}
	dir := t.TempDir()
	for name, data := range map[string][]byte{"a.yaml": files["a.yaml"], "b.yaml": files["b.yaml"]} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if c, err := (Options{MergeDomains: true}).Load(dir); err != nil || len(c.Rules()) != 4 {
		t.Errorf("Load of the directory, merged: %v rules, %v; want 4 and no error", c, err)
	}
}

func TestUnits(t *testing.T) {
	tests := []struct {
		unit string
		want time.Duration
		name string
	}{
		{"second", time.Second, "second"},
		{"SECOND", time.Second, "second"},
		{"Minute", time.Minute, "minute"},
		{"hour", time.Hour, "hour"},
		{"day", 24 * time.Hour, "day"},
		{"week", 7 * 24 * time.Hour, "week"},
		{"month", 30 * 24 * time.Hour, "month"},
		{"year", 365 * 24 * time.Hour, "year"},
	}
	for _, tt := range tests {
		c := load(t, fmt.Sprintf("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: %s, requests_per_unit: 3}\n", tt.unit))
		r := c.Rules()[0]
		checkLimit(t, r, sluice.Limit{Algorithm: sluice.AlignedWindow, Rate: 3, Period: tt.want, Burst: 3}, tt.name)
		if r.RequestsPerUnit != 3 {
			t.Errorf("unit %s: RequestsPerUnit %d, want 3", tt.unit, r.RequestsPerUnit)
		}
	}
}

func TestExtensions(t *testing.T) {
	c := load(t, `
domain: ext
descriptors:
  - key: tb
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token-bucket}
  - key: tb_burst
    rate_limit: {unit: minute, requests_per_unit: 60, algorithm: gcra, burst: 5}
  - key: period
    rate_limit: {period: 1500ms, requests_per_unit: 3}
  - key: leaky
    rate_limit: {period: 1h, requests_per_unit: 100, algorithm: leaky-bucket, burst: 0}
  - key: sliding
    rate_limit: {unit: hour, requests_per_unit: 1000, algorithm: sliding-window}
  - key: zero
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: default
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: aligned-window}
  - key: tokens
    rate_limit: {unit: minute, requests_per_unit: 1000, algorithm: token-bucket, debt: 5000, charge: true}
  - key: owes
    rate_limit: {unit: minute, requests_per_unit: 100, debt: 50}
  - key: no_charge
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: sliding-log, charge: false}
`)
	want := map[string]struct {
		limit sluice.Limit
		unit  string
	}{
		"tb":        {sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 10, Period: time.Second, Burst: 10}, "second"},
		"tb_burst":  {sluice.Limit{Algorithm: sluice.GCRA, Rate: 60, Period: time.Minute, Burst: 5}, "minute"},
		"period":    {sluice.Limit{Algorithm: sluice.AlignedWindow, Rate: 3, Period: 1500 * time.Millisecond, Burst: 3}, ""},
		"leaky":     {sluice.Limit{Algorithm: sluice.LeakyBucket, Rate: 100, Period: time.Hour, Burst: 0}, ""},
		"sliding":   {sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 1000, Period: time.Hour, Burst: 1000}, "hour"},
		"zero":      {sluice.Limit{Algorithm: sluice.AlignedWindow, Rate: 0, Period: time.Second}, "second"},
		"default":   {sluice.Limit{Algorithm: sluice.AlignedWindow, Rate: 2, Period: time.Second, Burst: 2}, "second"},
		"tokens":    {sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 1000, Period: time.Minute, Burst: 1000, Debt: 5000}, "minute"},
		"owes":      {sluice.Limit{Algorithm: sluice.AlignedWindow, Rate: 100, Period: time.Minute, Burst: 100, Debt: 50}, "minute"},
		"no_charge": {sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 100, Period: time.Minute, Burst: 100}, "minute"},
	}
	rules := c.Rules()
	if len(rules) != len(want) {
		t.Fatalf("%d rules, want %d", len(rules), len(want))
	}
	for _, r := range rules {
		w, ok := want[r.Path]
		if !ok {
			t.Errorf("unexpected rule %s", r.Path)
			continue
		}
		checkLimit(t, r, w.limit, w.unit)
		if r.Charge != (r.Path == "tokens") {
			t.Errorf("%s: Charge %v", r.Path, r.Charge)
		}
	}
}

// checkLimit checks a rule's Limit and Unit, and that sluice can enforce the
// limit (unless its rate is 0: every hit over the limit).
func checkLimit(t *testing.T, r *Rule, want sluice.Limit, unit string) {
	t.Helper()
	if r.Limit != want || r.Unit != unit {
		t.Errorf("%s: Limit %v, Unit %q; want %v, %q", r.Path, r.Limit, r.Unit, want, unit)
	}
	if r.Limit.Rate > 0 {
		if err := r.Limit.Validate(); err != nil {
			t.Errorf("%s: %v", r.Path, err)
		}
	}
}

// TestYAMLForms reads what YAML allows beyond the plain form envoy's examples
// use: anchors, merge keys, YAML 1.1 booleans, numbers as values, nulls.
func TestYAMLForms(t *testing.T) {
	c := load(t, `
domain: forms
descriptors:
  - key: port
    value: 8080
    shadow_mode: yes
    rate_limit: &base
      unit: second
      requests_per_unit: 4
  - key: flag
    value: true
    rate_limit:
      <<: *base
      requests_per_unit: 9
  - key: version
    value: 1.5
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: none
    value: ~
    rate_limit:
  - key: nested
    descriptors:
`)
	byPath := map[string]*Rule{}
	for _, r := range c.Rules() {
		byPath[r.Path] = r
	}
	if r := byPath["port=8080"]; r == nil || !r.Shadow || r.Limit.Rate != 4 {
		t.Errorf("port=8080: %+v", r)
	}
	if r := byPath["flag=true"]; r == nil || r.Limit.Rate != 9 || r.Unit != "second" {
		t.Errorf("flag=true (merge key, explicit field wins): %+v", r)
	}
	if r := byPath["version=1.5"]; r == nil {
		t.Error("version=1.5: a float read as text (envoy refuses it)")
	}
	if len(byPath) != 3 {
		t.Errorf("rules %v: a null rate_limit is no limit", slices.Collect(func(yield func(string) bool) {
			for p := range byPath {
				if !yield(p) {
					return
				}
			}
		}))
	}
	if got := c.Resolve("forms", [][]Entry{{{"none", "x"}}, {{"port", "8080"}}, {{"version", "1.5"}}}); got[0] != nil || got[1] == nil || got[2] == nil {
		t.Errorf("Resolve = %v", got)
	}
}

func TestLoadDirectory(t *testing.T) {
	c, err := Load("testdata/dir")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Domains(), []string{"alpha", "beta"}; !slices.Equal(got, want) {
		t.Errorf("Domains = %v, want %v (no .txt, no hidden file, no subdirectory)", got, want)
	}
	if got, want := c.Sources(), []string{filepath.Join("testdata", "dir", "a.yaml"), filepath.Join("testdata", "dir", "b.yml")}; !slices.Equal(got, want) {
		t.Errorf("Sources = %v, want %v", got, want)
	}
	if !c.HasDomain("alpha") || c.HasDomain("gamma") {
		t.Error("HasDomain")
	}
	if r := c.Resolve("beta", [][]Entry{{{"k", "v"}}})[0]; r == nil || r.Unit != "year" || r.Limit.Period != 365*24*time.Hour {
		t.Errorf("beta k=v: %+v", r)
	}
	if err := Check("testdata/dir"); err != nil {
		t.Errorf("Check: %v", err)
	}

	// A broken file anywhere in the directory fails the whole load.
	dir := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("one.yaml", "domain: one\n")
	write("two.yml", "domain: one\n")
	err = Check(dir)
	var e *Error
	if !errors.As(err, &e) || e.File != filepath.Join(dir, "two.yml") || !strings.Contains(e.Msg, "duplicate domain 'one'") {
		t.Errorf("Check = %v, want two.yml's duplicate domain", err)
	}
	write("two.yml", "domain: two\n")
	if err := os.Symlink(filepath.Join(dir, "one.yaml"), filepath.Join(dir, "three.yaml")); err == nil {
		if err := Check(dir); err == nil || !strings.Contains(err.Error(), "three.yaml") {
			t.Errorf("a symbolic link is read like its file: Check = %v", err)
		}
		if err := os.Remove(filepath.Join(dir, "three.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	c, err = Load(dir)
	if err != nil || !slices.Equal(c.Domains(), []string{"one", "two"}) {
		t.Errorf("Load = %v, %v", c, err)
	}

	empty := t.TempDir()
	if c, err := Load(empty); err != nil || len(c.Domains()) != 0 || len(c.Rules()) != 0 {
		t.Errorf("an empty directory: %v, %v; want an empty configuration", c, err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
}

func TestOverride(t *testing.T) {
	entries := []Entry{{"remote_address", "10.0.0.1"}, {"path", "/x"}}
	r, err := Override("edge", entries, 42, "MINUTE")
	if err != nil {
		t.Fatal(err)
	}
	want := sluice.Limit{Algorithm: sluice.AlignedWindow, Rate: 42, Period: time.Minute, Burst: 42}
	if r.Limit != want || r.Unit != "minute" || r.RequestsPerUnit != 42 || r.Name != "" || r.Shadow || len(r.Replaces) != 0 || r.Unlimited {
		t.Errorf("Override = %+v", r)
	}
	if r.Path != "remote_address=10.0.0.1/path=/x" || r.Domain != "edge" {
		t.Errorf("Path %q, Domain %q", r.Path, r.Domain)
	}
	if got, want := r.Key(entries), "edge/remote_address=10.0.0.1/path=%2Fx"; got != want {
		t.Errorf("Key = %q, want %q", got, want)
	}
	// The override's key is the configured rule's key for the same descriptor.
	c, err := Load("testdata/edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	one := []Entry{{"remote_address", "10.0.0.1"}}
	o, err := Override("edge", one, 1, "second")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Resolve("edge", [][]Entry{one})[0]; got == nil || got.Key(one) != o.Key(one) {
		t.Errorf("override key %q differs from the rule's", o.Key(one))
	}
	if r, err := Override("edge", entries, 0, "HOUR"); err != nil || r.Limit.Rate != 0 || r.Limit.Period != time.Hour {
		t.Errorf("zero requests: %+v, %v", r, err)
	}
	for _, bad := range []string{"UNKNOWN", "", "fortnight"} {
		if _, err := Override("edge", entries, 1, bad); err == nil || !strings.Contains(err.Error(), "invalid rate limit unit '"+bad+"': want second, minute, hour, day, week, month or year") {
			t.Errorf("unit %q: err = %v", bad, err)
		}
	}
	// An aligned window only counts: any requests_per_unit envoy can send
	// is exact, whatever the unit.
	if r, err := Override("edge", entries, 1<<32-1, "YEAR"); err != nil || r.Limit.Rate != 1<<32-1 {
		t.Errorf("the largest override per year: %+v, %v", r, err)
	}
}

// metadata is read as envoyproxy/ratelimit reads it (yaml.v2 into a map,
// then google.protobuf.Struct): numbers are float64, YAML 1.1's yes/no/on/off
// are booleans unless quoted, timestamps stay text, nested keys are their
// decoded value's text, merge keys merge; the rule of the descriptor that
// holds the rate_limit carries it.
func TestMetadata(t *testing.T) {
	c := load(t, `
domain: meta
descriptors:
  - key: tenant
    metadata: &common
      team: payments
      budget: {owner: ops}
    descriptors:
      - key: user
        metadata:
          <<: *common
          tier: gold
          weight: 3
          ratio: 0.5
          enabled: yes
          quoted: "no"
          plain: true
          nothing: ~
          since: 2001-12-14
          tags: [a, 1, {x: y}]
          nested: {1: one, 1.0: float, true: t, 0x10: hex}
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: bare
    metadata:
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: empty
    metadata: {}
    rate_limit: {unit: second, requests_per_unit: 1}
`)
	byPath := map[string]*Rule{}
	for _, r := range c.Rules() {
		byPath[r.Path] = r
	}
	want := map[string]any{
		"team": "payments", "budget": map[string]any{"owner": "ops"},
		"tier": "gold", "weight": 3.0, "ratio": 0.5, "enabled": true, "quoted": "no", "plain": true,
		"nothing": nil, "since": "2001-12-14", "tags": []any{"a", 1.0, map[string]any{"x": true}}, // y is YAML 1.1's yes
		"nested": map[string]any{"1": "float", "true": "t", "16": "hex"},
	}
	if got := byPath["tenant/user"].Metadata; !reflect.DeepEqual(got, want) {
		t.Errorf("tenant/user metadata:\n got %#v\nwant %#v", got, want)
	}
	for _, p := range []string{"bare", "empty"} {
		if m := byPath[p].Metadata; m != nil {
			t.Errorf("%s: metadata %v, want nil", p, m)
		}
	}
	for _, src := range []string{
		"domain: d\ndescriptors:\n  - key: k\n    metadata: [a, b]\n",
		"domain: d\ndescriptors:\n  - key: k\n    metadata: text\n",
		"domain: d\ndescriptors:\n  - key: k\n    metadata: {a: {[x]: y}}\n",
		"domain: d\ndescriptors:\n  - key: k\n    metadata: {<<: [a]}\n",
	} {
		if _, err := Parse(map[string][]byte{"d.yaml": []byte(src)}); err == nil || !strings.Contains(err.Error(), "metadata") {
			t.Errorf("%q: %v, want a metadata error", src, err)
		}
	}
	if _, err := Parse(map[string][]byte{"d.yaml": []byte("domain: d\ndescriptors:\n  - key: k\n    metadata: {a: " + strings.Repeat("[", 100) + strings.Repeat("]", 100) + "}\n")}); err == nil || !strings.Contains(err.Error(), "nested more than") {
		t.Errorf("deep metadata: %v", err)
	}
}
