package rlsconfig

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

// concFile is a domain of pools and classes: a pool per tenant whose
// priority classes share it, a pool per wildcard path shared by every
// value, and a pool with a rate limit.
const concFile = `domain: jobs
descriptors:
  - key: tenant
    concurrency: {max: 10, lifetime: 30s, name: tenants}
    descriptors:
      - key: priority
        value: critical
        concurrency: {headroom: 0}
      - key: priority
        concurrency: {headroom: 2, name: batch}
        descriptors:
          - key: user
            concurrency: {max: 3}
  - key: path
    value: /export/*
    share_threshold: true
    concurrency: {max: 4, name: exports}
  - key: report
    rate_limit: {unit: minute, requests_per_unit: 100}
    concurrency: {max: 2}
  - key: plain
    rate_limit: {unit: second, requests_per_unit: 5}
`

// A request's descriptor resolves to the concurrency of the descriptor it
// reaches; a class holds its pool's key with its own headroom; a
// share_threshold wildcard keys every value alike, by its pool's name; a rate_limit of the
// same descriptor comes with it; a descriptor without concurrency (or a
// rate_limit alone) has none, and the rate rules are as without the
// extension.
func TestResolveConcurrency(t *testing.T) {
	c := load(t, concFile)
	tests := []struct {
		entries string
		path    string // "" when none
		key     string
		limit   sluice.Concurrency
		rate    bool
	}{
		{"tenant=acme", "tenant", "jobs/tenant=acme", sluice.Concurrency{Limit: 10, Lifetime: 30 * time.Second}, false},
		{"tenant=acme priority=critical", "tenant/priority=critical", "jobs/tenant=acme", sluice.Concurrency{Limit: 10, Lifetime: 30 * time.Second}, false},
		{"tenant=acme priority=low", "tenant/priority", "jobs/tenant=acme", sluice.Concurrency{Limit: 10, Lifetime: 30 * time.Second, Headroom: 2}, false},
		{"tenant=acme priority=low user=ann", "tenant/priority/user", "jobs/tenant=acme/priority=low/user=ann", sluice.Concurrency{Limit: 3}, false},
		{"path=/export/a.csv", "path=/export/*", "jobs/path==exports", sluice.Concurrency{Limit: 4}, false},
		{"path=/export/b.csv", "path=/export/*", "jobs/path==exports", sluice.Concurrency{Limit: 4}, false},
		{"report=q3", "report", "jobs/report=q3", sluice.Concurrency{Limit: 2}, true},
		{"plain=x", "", "", sluice.Concurrency{}, false},
		{"path=/import/a", "", "", sluice.Concurrency{}, false},
		{"tenant=acme priority=low user=ann x=y", "", "", sluice.Concurrency{}, false},
		{"", "", "", sluice.Concurrency{}, false},
	}
	for _, tt := range tests {
		got := c.ResolveConcurrency("jobs", es(tt.entries))
		if tt.path == "" {
			if got != nil {
				t.Errorf("%q: %s, want none", tt.entries, got.Path)
			}
			continue
		}
		if got == nil {
			t.Errorf("%q: none, want %s", tt.entries, tt.path)
			continue
		}
		if got.Path != tt.path || got.Key(es(tt.entries)) != tt.key || got.Limit != tt.limit || (got.Rate != nil) != tt.rate {
			t.Errorf("%q: %s key %q %+v rate %v, want %s %q %+v %v", tt.entries, got.Path, got.Key(es(tt.entries)), got.Limit, got.Rate != nil, tt.path, tt.key, tt.limit, tt.rate)
		}
	}
	if got := c.ResolveConcurrency("other", es("tenant=acme")); got != nil {
		t.Errorf("unknown domain: %s", got.Path)
	}
	// The rate rules are the rate_limits alone.
	rules := c.Resolve("jobs", [][]Entry{es("tenant=acme"), es("report=q3"), es("plain=x")})
	if rules[0] != nil || pathOf(rules[1]) != "report" || pathOf(rules[2]) != "plain" || len(c.Rules()) != 2 {
		t.Errorf("rate rules: %s %s %s (%d rules)", pathOf(rules[0]), pathOf(rules[1]), pathOf(rules[2]), len(c.Rules()))
	}
	if r := c.ResolveConcurrency("jobs", es("report=q3")); r.Rate != rules[1] {
		t.Errorf("report's rate: %p, want the rule %p", r.Rate, rules[1])
	}
	var paths []string
	for _, cc := range c.Concurrencies() {
		paths = append(paths, cc.Path+"@"+cc.Pool+":"+cc.Name)
	}
	want := "path=/export/*@path=/export/*:exports report@report: tenant@tenant:tenants tenant/priority@tenant:batch tenant/priority/user@tenant/priority/user: tenant/priority=critical@tenant:"
	if got := strings.Join(paths, " "); got != want {
		t.Errorf("Concurrencies:\n%s\nwant\n%s", got, want)
	}
}

// A concurrency that cannot be enforced, or that is combined with what
// makes no sense for it, is a load error that says why, on its line.
func TestConcurrencyErrors(t *testing.T) {
	one := func(body string) string {
		return "domain: test\ndescriptors:\n  - key: k\n    concurrency: " + body + "\n"
	}
	tests := []struct {
		name string
		src  string
		line int
		path string
		want string
	}{
		{"zero max", one("{max: 0}"), 4, "", "max must be a whole number from 1 to 1125899906842624, not 0"},
		{"negative max", one("{max: -3}"), 4, "", "max must be a whole number from 1"},
		{"max over the exact range", one("{max: 1125899906842625}"), 4, "", "max must be a whole number from 1 to 1125899906842624"},
		{"max not a number", one("{max: ten}"), 4, "", "max must be a whole number"},
		{"max a float", one("{max: 2.5}"), 4, "", "max must be a whole number"},
		{"negative headroom", one("{max: 3, headroom: -1}"), 4, "", "headroom must be a whole number from 0"},
		{"headroom the whole pool", one("{max: 3, headroom: 3}"), 4, "test.k", "concurrency headroom 3 out of a max of 3"},
		{"headroom and reserve", one("{max: 3, headroom: 1, reserve: 1}"), 4, "", "both headroom and reserve (its deprecated name)"},
		{"empty", one("{}"), 4, "test.k", "concurrency needs max"},
		{"name alone", one("{name: x}"), 4, "test.k", "concurrency needs max"},
		{"class without a pool", one("{headroom: 1}"), 4, "test.k", "no descriptor above it has a concurrency max"},
		{"class with a lifetime", "domain: test\ndescriptors:\n  - key: k\n    concurrency: {max: 3}\n    descriptors:\n      - key: c\n        concurrency: {headroom: 1, lifetime: 5s}\n", 7, "test.k.c", "takes its pool's lifetime"},
		{"class's headroom over its pool", "domain: test\ndescriptors:\n  - key: k\n    concurrency: {max: 3}\n    descriptors:\n      - key: c\n        concurrency: {headroom: 5}\n", 7, "test.k.c", "headroom 5 out of a max of 3"},
		{"bad lifetime", one("{max: 3, lifetime: soon}"), 4, "test.k", "lifetime 'soon' is not a Go duration of at least 1ms"},
		{"zero lifetime", one("{max: 3, lifetime: 0s}"), 4, "test.k", "lifetime '0s'"},
		{"negative lifetime", one("{max: 3, lifetime: -1s}"), 4, "test.k", "lifetime '-1s'"},
		{"lifetime over a day", one("{max: 3, lifetime: 25h}"), 4, "test.k", "lifetime: 25h, over the service's limit lifetime of 24h (--limit lifetime=DURATION raises it)"},
		{"lifetime not whole µs", one("{max: 3, lifetime: 1.5ms1ns}"), 4, "test.k", "whole microseconds"},
		{"shared wildcard unnamed", "domain: test\ndescriptors:\n  - key: k\n    value: a*\n    share_threshold: true\n    concurrency: {max: 3}\n", 6, "test.k_a*", "under a shared wildcard (share_threshold) needs a name"},
		{"unknown key", one("{max: 3, limit: 4}"), 4, "", "config error, unknown key 'limit'"},
		{"envoy's key in it", one("{max: 3, unit: second}"), 4, "", "key 'unit' does not belong in a concurrency"},
		{"not a map", one("10"), 4, "", "concurrency must be a map, not \"10\""},
		{"shadow_mode", "domain: test\ndescriptors:\n  - key: k\n    shadow_mode: true\n    concurrency: {max: 3}\n", 5, "test.k", "concurrency cannot be in shadow_mode"},
		{"quota_mode", "domain: test\ndescriptors:\n  - key: k\n    quota_mode: true\n    concurrency: {max: 3}\n", 5, "test.k", "concurrency cannot be in quota_mode"},
		{"max on a rate_limit", "domain: test\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, max: 3}\n", 4, "", "unknown key 'max'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(map[string][]byte{"test.yaml": []byte(tt.src)})
			e, ok := err.(*Error)
			if !ok {
				t.Fatalf("error %v (%T), want an *Error", err, err)
			}
			if !strings.Contains(e.Msg, tt.want) || e.Line != tt.line || (tt.path != "" && e.Path != tt.path) {
				t.Errorf("got %q (line %d, path %q), want %q on line %d, path %q", err, e.Line, e.Path, tt.want, tt.line, tt.path)
			}
		})
	}
}

// A null concurrency is none, as a null rate_limit is; an unlimited
// rate_limit beside a concurrency is no rate limit for its leases;
// configurations of many concurrency limits are bounded like rules.
func TestConcurrencyForms(t *testing.T) {
	c := load(t, "domain: d\ndescriptors:\n  - key: a\n    concurrency:\n  - key: b\n    rate_limit: {unlimited: true}\n    concurrency: {max: 1}\n")
	if c.ResolveConcurrency("d", es("a=1")) != nil || len(c.Concurrencies()) != 1 {
		t.Fatalf("null concurrency: %d", len(c.Concurrencies()))
	}
	if r := c.ResolveConcurrency("d", es("b=1")); r == nil || r.Rate == nil || !r.Rate.Unlimited || r.Limit.Lifetime != 0 {
		t.Fatalf("b: %+v", r)
	}
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n  - key: k\n    descriptors: &l\n")
	for i := range 101 {
		b.WriteString("      - {key: c" + string(rune('a'+i%26)) + strings.Repeat("x", i/26) + ", concurrency: {max: 1}}\n")
	}
	for i := range 100 {
		b.WriteString("  - {key: t" + strings.Repeat("y", i) + ", descriptors: *l}\n")
	}
	_, err := Parse(map[string][]byte{"d.yaml": []byte(b.String())})
	if err == nil || !strings.Contains(err.Error(), "more than 10000 concurrency limits") {
		t.Fatalf("101·100 concurrency limits: %v", err)
	}
}

// reserve, headroom's old name, still loads, and the configuration names
// where it is used.
func TestReserveDeprecated(t *testing.T) {
	c := load(t, strings.ReplaceAll(concFile, "headroom:", "reserve:"))
	got := c.ResolveConcurrency("jobs", es("tenant=acme priority=low"))
	if got == nil || got.Limit.Headroom != 2 {
		t.Fatalf("a class with reserve: 2 resolves to %+v, want a headroom of 2", got)
	}
	dep := c.Deprecations()
	if len(dep) != 2 || !strings.Contains(dep[0], "test.yaml:8: descriptor jobs.tenant.priority_critical: concurrency reserve is deprecated: call it headroom") {
		t.Errorf("Deprecations() = %q, want the two classes', the first at line 8", dep)
	}
	if dep := load(t, concFile).Deprecations(); len(dep) != 0 {
		t.Errorf("with headroom, Deprecations() = %q, want none", dep)
	}
}
