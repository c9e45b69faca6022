package serve

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --merge-domain-config (envoy's MERGE_DOMAIN_CONFIG): two files of one
// domain serve as one; a reload that would configure a top-level
// descriptor twice is refused whole and the merged configuration keeps
// serving; without the option the same files do not load.
func TestMergeDomains(t *testing.T) {
	files := map[string]string{
		"a.yaml": "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n",
		"b.yaml": "domain: shop\ndescriptors:\n  - key: cart\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
	}
	dir := writeConfig(t, files)
	ts := start(t, Options{Config: dir, MergeDomains: true}, &fakeClock{t: t0})
	r := ts.call(t, "shop", desc("user=u"), desc("cart=c"))
	want(t, "user (a.yaml)", r.Statuses[0], ok, 1, 2, minute)
	want(t, "cart (b.yaml)", r.Statuses[1], ok, 0, 1, hour)
	if got := codesOf(ts.call(t, "shop", desc("cart=c"))); got != "OVER_LIMIT: OVER_LIMIT" {
		t.Errorf("cart's second call: %s, want OVER_LIMIT", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "c.yaml"), []byte("domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 100}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ts.Reload(); err == nil || !strings.Contains(err.Error(), "c.yaml") || !strings.Contains(err.Error(), "duplicate descriptor composite key 'shop.user'") {
		t.Errorf("reload with user in two merged files: %v, want c.yaml's duplicate descriptor composite key 'shop.user'", err)
	}
	r = ts.call(t, "shop", desc("user=u"))
	want(t, "user after the refused reload", r.Statuses[0], ok, 0, 2, minute)

	if _, err := New(Options{Config: writeConfig(t, files), GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0"}); err == nil || !strings.Contains(err.Error(), "duplicate domain 'shop'") {
		t.Errorf("the same files without MergeDomains: %v, want envoy's duplicate domain error", err)
	}
}
