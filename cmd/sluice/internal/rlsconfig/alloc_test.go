package rlsconfig

import "testing"

// TestAllocs: a request's resolution allocates only its answer, a key only
// its string; the walk of the tree, wildcards included, allocates nothing.
func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	c, err := Load("testdata/edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	req := [][]Entry{
		es("remote_address=10.0.0.1"),
		es("path=/static/v1/img/logo.png"),
		es("source_cluster=proxy destination_cluster=search"),
		es("tenant=acme user=bob"),
	}
	rules := c.Resolve("edge", req)
	for i, r := range rules {
		if r == nil {
			t.Fatalf("descriptor %d matched nothing", i)
		}
	}
	for name, tt := range map[string]struct {
		f    func()
		want float64
	}{
		"Resolve":                 {func() { c.Resolve("edge", req) }, 1},
		"Key":                     {func() { rules[1].Key(req[1]) }, 1},
		"Key of a shared level":   {func() { rules[3].Key(req[3]) }, 1},
		"StatKey of a wildcard":   {func() { rules[1].StatKey(req[1]) }, 1},
		"Resolve, unknown domain": {func() { c.Resolve("nowhere", req) }, 1},
	} {
		if n := testing.AllocsPerRun(200, tt.f); n > tt.want {
			t.Errorf("%s: %v allocations, want at most %v", name, n, tt.want)
		}
	}
}

func BenchmarkResolveAndKey(b *testing.B) {
	c, err := Load("testdata/edge.yaml")
	if err != nil {
		b.Fatal(err)
	}
	req := [][]Entry{
		es("remote_address=10.0.0.1"),
		es("path=/static/v1/img/logo.png"),
		es("source_cluster=proxy destination_cluster=search"),
	}
	b.ReportAllocs()
	for b.Loop() {
		for i, r := range c.Resolve("edge", req) {
			if r != nil {
				_ = r.Key(req[i])
			}
		}
	}
}
