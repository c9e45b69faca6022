package rlsconfig

import (
	"strings"
	"testing"
)

// load parses one file of YAML for a test.
func load(t *testing.T, src string) *Config {
	t.Helper()
	c, err := Parse(map[string][]byte{"test.yaml": []byte(src)})
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return c
}

// es reads "k=v k2 k3=" as entries, one per word: k2 and k3 have an empty
// value.
func es(s string) []Entry {
	if s == "" {
		return nil
	}
	var out []Entry
	for _, part := range strings.Split(s, " ") {
		k, v, _ := strings.Cut(part, "=")
		out = append(out, Entry{Key: k, Value: v})
	}
	return out
}

func pathOf(r *Rule) string {
	if r == nil {
		return "<none>"
	}
	return r.Path
}

func TestMatch(t *testing.T) {
	edge, err := Load("testdata/edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	order := load(t, `
domain: order
descriptors:
  - key: path
    value: /static/*
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /static/*/img/*.png
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    value: /api/health
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: path
    value: /api/*
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: path
    value: "*/edit"
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: joined_key
    rate_limit: {unit: second, requests_per_unit: 6}
  - key: star*
    rate_limit: {unit: second, requests_per_unit: 7}
`)
	tests := []struct {
		name   string
		c      *Config
		domain string
		in     string
		want   string
	}{
		{"key alone matches any value", edge, "edge", "remote_address=10.0.0.1", "remote_address"},
		{"key alone matches an empty value", edge, "edge", "remote_address", "remote_address"},
		{"exact key and value", edge, "edge", "source_cluster=proxy destination_cluster=billing", "source_cluster=proxy/destination_cluster=billing"},
		{"nested key alone under an exact value", edge, "edge", "source_cluster=proxy destination_cluster=search", "source_cluster=proxy/destination_cluster"},
		{"an unconfigured value at the first level", edge, "edge", "source_cluster=mesh destination_cluster=billing", "<none>"},
		{"descriptor shorter than the configured path", edge, "edge", "source_cluster=proxy", "<none>"},
		{"descriptor longer than the configured path", edge, "edge", "remote_address=10.0.0.1 extra=1", "<none>"},
		{"trailing wildcard", edge, "edge", "path=/api/users", "path=/api/*"},
		{"trailing wildcard matches the empty rest", edge, "edge", "path=/api/", "path=/api/*"},
		{"several wildcards", edge, "edge", "path=/static/v1/img/logo.png", "path=/static/*/img/*.png"},
		{"several wildcards, middle missing", edge, "edge", "path=/static/v1/css/site.css", "path=/static/*"},
		{"wildcard beats the key alone", edge, "edge", "path=/api/x", "path=/api/*"},
		{"key alone when no wildcard matches", edge, "edge", "path=/other", "path"},
		{"a lone star", edge, "edge", "tenant=acme user=bob", "tenant=*/user"},
		{"a lone star matches the empty value", edge, "edge", "tenant user=bob", "tenant=*/user"},
		{"wildcard node without a limit", edge, "edge", "tenant=acme", "<none>"},
		{"unlimited", edge, "edge", "plan=internal", "plan=internal"},
		{"unknown key", edge, "edge", "country=fr", "<none>"},
		{"unknown domain", edge, "nowhere", "remote_address=10.0.0.1", "<none>"},
		{"no entries", edge, "edge", "", "<none>"},
		{"first wildcard in file order wins", order, "order", "path=/static/v1/img/a.png", "path=/static/*"},
		{"exact value beats a wildcard", order, "order", "path=/api/health", "path=/api/health"},
		{"wildcard next to an exact value", order, "order", "path=/api/healthz", "path=/api/*"},
		{"leading wildcard", order, "order", "path=/docs/1/edit", "path=*/edit"},
		{"leading wildcard, no match", order, "order", "path=/docs/1/editor", "<none>"},
		// envoy looks a level up by "key_value": these quirks are kept.
		{"composite key: key and value joined meet a key alone", order, "order", "joined=key", "joined_key"},
		{"composite key: a star in a key is a wildcard", order, "order", "starry=night", "star*"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.c.Resolve(tt.domain, [][]Entry{es(tt.in)})
			if len(got) != 1 {
				t.Fatalf("Resolve returned %d rules for 1 descriptor", len(got))
			}
			if pathOf(got[0]) != tt.want {
				t.Errorf("%s %s: got %s, want %s", tt.domain, tt.in, pathOf(got[0]), tt.want)
			}
			if got[0] != nil && got[0].Domain != tt.domain {
				t.Errorf("rule domain %q, want %q", got[0].Domain, tt.domain)
			}
		})
	}
}

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"a*", "a", true},
		{"a*", "abc", true},
		{"a*", "ba", false},
		{"*", "", true},
		{"*a", "ba", true},
		{"*a", "ab", false},
		{"a*b*c", "abc", true},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxcyyb", false},
		{"a*b*c", "ac", false},
		{"ab*ba", "aba", false}, // prefix and suffix may not overlap
		{"ab*ba", "abba", true},
		{"a**b", "ab", true},
		{"a*b*b*c", "abbc", true},
		{"a*b*b*c", "abc", false},
		{"x*aab", "xaaab", true}, // the greedy scan is exact
		{"x*ab*ab", "xabab", true},
		{"noglob", "noglob", true},
		{"noglob", "noglobs", false},
	}
	for _, tt := range tests {
		parts := strings.Split(tt.pattern, "*")
		bs := make([][]byte, len(parts))
		for i, p := range parts {
			bs[i] = []byte(p)
		}
		if got := globMatch(bs, []byte(tt.s)); got != tt.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tt.pattern, tt.s, got, tt.want)
		}
	}
}

func TestResolveReplaces(t *testing.T) {
	edge, err := Load("testdata/edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	mutual := load(t, `
domain: mutual
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1, name: a, replaces: [{name: b}]}
  - key: b
    rate_limit: {unit: second, requests_per_unit: 1, name: b, replaces: [{name: a}]}
  - key: c
    rate_limit: {unit: second, requests_per_unit: 1, name: c}
  - key: u
    rate_limit: {unlimited: true, name: u}
  - key: v
    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: u}, {name: c}]}
`)
	tests := []struct {
		name   string
		c      *Config
		domain string
		in     []string
		want   []string
	}{
		{"nothing replaces", edge, "edge", []string{"path=/api/x", "remote_address=1"}, []string{"path=/api/*", "remote_address"}},
		{"a named rule is replaced", edge, "edge", []string{"path=/api/x", "source_cluster=proxy destination_cluster=billing"}, []string{"<none>", "source_cluster=proxy/destination_cluster=billing"}},
		{"order does not matter", edge, "edge", []string{"source_cluster=proxy destination_cluster=billing", "path=/api/x"}, []string{"source_cluster=proxy/destination_cluster=billing", "<none>"}},
		{"an unlimited rule replaces too", edge, "edge", []string{"plan=internal", "path=/api/y"}, []string{"plan=internal", "<none>"}},
		{"the same rule twice is not replaced by itself", edge, "edge", []string{"path=/api/a", "path=/api/b"}, []string{"path=/api/*", "path=/api/*"}},
		{"two rules replacing each other both go", mutual, "mutual", []string{"a", "b", "c"}, []string{"<none>", "<none>", "c"}},
		{"an unlimited rule is never replaced", mutual, "mutual", []string{"u", "v", "c"}, []string{"u", "v", "<none>"}},
		{"replaces only what the request matched", mutual, "mutual", []string{"a", "c"}, []string{"a", "c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var in [][]Entry
			for _, s := range tt.in {
				in = append(in, es(s))
			}
			got := tt.c.Resolve(tt.domain, in)
			for i := range tt.want {
				if pathOf(got[i]) != tt.want[i] {
					t.Errorf("descriptor %d (%s): got %s, want %s", i, tt.in[i], pathOf(got[i]), tt.want[i])
				}
			}
		})
	}
}

func TestKey(t *testing.T) {
	edge, err := Load("testdata/edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	key := func(domain, in string) string {
		t.Helper()
		r := edge.Resolve(domain, [][]Entry{es(in)})[0]
		if r == nil {
			t.Fatalf("%s %s matched no rule", domain, in)
		}
		return r.Key(es(in))
	}
	if got, want := key("edge", "remote_address=10.0.0.1"), "edge/remote_address=10.0.0.1"; got != want {
		t.Errorf("key = %q, want %q", got, want)
	}
	if got, want := key("edge", "path=/static/a"), "edge/path=%2Fstatic%2Fa"; got != want {
		t.Errorf("key = %q, want %q", got, want)
	}
	same := []struct{ name, a, b string }{
		{"share_threshold: one counter for every matching value", "path=/api/a", "path=/api/b/c"},
		{"share_threshold: the literal pattern sent is the same counter (as in envoy)", "path=/api/x", "path=/api/*"},
		{"share_threshold on a level above the rule", "tenant=acme user=bob", "tenant=globex user=bob"},
	}
	for _, tt := range same {
		if ka, kb := key("edge", tt.a), key("edge", tt.b); ka != kb {
			t.Errorf("%s: %s -> %q, %s -> %q: want one key", tt.name, tt.a, ka, tt.b, kb)
		}
	}
	if got, want := key("edge", "path=/api/a"), "edge/path=%2Fapi%2F*"; got != want {
		t.Errorf("shared key = %q, want %q", got, want)
	}
	differ := []struct{ name, a, b string }{
		{"values of a key alone", "remote_address=1", "remote_address=2"},
		{"values of a wildcard without share_threshold", "path=/static/a", "path=/static/b"},
		{"the level below a shared level", "tenant=acme user=bob", "tenant=acme user=eve"},
		{"escaped '/'", "source_cluster=proxy destination_cluster=a/b", "source_cluster=proxy destination_cluster=a%2Fb"},
	}
	for _, tt := range differ {
		if ka, kb := key("edge", tt.a), key("edge", tt.b); ka == kb {
			t.Errorf("%s: %s and %s share key %q", tt.name, tt.a, tt.b, ka)
		}
	}
	// Keys are unambiguous where envoy's joined text is not.
	r := &Rule{Domain: "d"}
	pairs := [][2][]Entry{
		{{{"a", "b=c"}}, {{"a=b", "c"}}},
		{{{"a", "b/c=d"}}, {{"a", "b"}, {"c", "d"}}},
		{{{"a_b", "c"}}, {{"a", "b_c"}}},
		{{{"a", "%2F"}}, {{"a", "/"}}},
		{{{"a", ""}}, {{"a", ""}, {"", ""}}},
	}
	for _, p := range pairs {
		if r.Key(p[0]) == r.Key(p[1]) {
			t.Errorf("%v and %v share key %q", p[0], p[1], r.Key(p[0]))
		}
	}
	if (&Rule{Domain: "d/x"}).Key(es("a=b")) == (&Rule{Domain: "d"}).Key(es("x/a=b")) {
		t.Error("a domain with '/' collides with an entry")
	}
	if got, want := r.Key([]Entry{{"user", "{tag}"}}), "d/user=%7Btag%7D"; got != want {
		t.Errorf("key = %q, want %q (braces escaped: no Redis Cluster hash tag from a value)", got, want)
	}
}

func TestRuleFields(t *testing.T) {
	edge, err := Load("testdata/edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]*Rule{}
	for _, r := range edge.Rules() {
		byPath[r.Path] = r
	}
	dest := byPath["source_cluster=proxy/destination_cluster"]
	if dest == nil || !dest.Shadow || !dest.DetailedMetric || dest.Unit != "day" || dest.RequestsPerUnit != 1000 {
		t.Errorf("nested rule: %+v", dest)
	}
	billing := byPath["source_cluster=proxy/destination_cluster=billing"]
	if billing == nil || billing.Name != "billing" || len(billing.Replaces) != 1 || billing.Replaces[0] != "api" || billing.Shadow {
		t.Errorf("billing rule: %+v", billing)
	}
	internal := byPath["plan=internal"]
	if internal == nil || !internal.Unlimited || internal.Limit != (Rule{}).Limit || internal.Unit != "" {
		t.Errorf("unlimited rule: %+v", internal)
	}
	api := byPath["path=/api/*"]
	if api == nil || !api.ShareThreshold || api.Name != "api" {
		t.Errorf("shared rule: %+v", api)
	}
	if u := byPath["tenant=*/user"]; u == nil || !u.ShareThreshold {
		t.Errorf("rule under a shared level: %+v", u)
	}
	if r := byPath["remote_address"]; r == nil || r.ShareThreshold || r.Shadow || r.Name != "" || len(r.Replaces) != 0 {
		t.Errorf("plain rule: %+v", r)
	}
	// Rules are sorted by domain, then path.
	rules := edge.Rules()
	for i := 1; i < len(rules); i++ {
		if rules[i-1].Path >= rules[i].Path {
			t.Errorf("rules out of order: %s before %s", rules[i-1].Path, rules[i].Path)
		}
	}
	if len(rules) != 11 {
		t.Errorf("%d rules, want 11", len(rules))
	}
}
