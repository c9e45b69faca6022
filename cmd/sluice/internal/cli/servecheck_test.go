package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// serve --check loads the configuration as serve would, says what it
// holds and exits 0, or exits non-zero with the load error: concurrency
// limits included, and what the per-second store cannot take.
func TestServeCheck(t *testing.T) {
	code, out, errs := runCLI(t, "", "serve", "--check", "--config", filepath.Join("..", "..", "..", "..", "examples", "serve"))
	if code != 0 || out != "configuration OK: 1 domains, 5 rules, 1 concurrency limits, from 1 files\n" {
		t.Fatalf("examples/serve: exit %d, %q %q", code, out, errs)
	}
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		body  string
		extra []string
		want  string
	}{
		{"domain: d\ndescriptors:\n  - key: k\n    concurrency: {max: 0}\n", nil, "c.yaml:4: error loading config file: max must be a whole number from 1"},
		{"domain: d\ndescriptors:\n  - key: k\n    concurrency: {max: 2, reserve: 2}\n", nil, "c.yaml:4: descriptor d.k: concurrency reserve 2 out of a max of 2"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n    concurrency: {max: 2}\n", []string{"--store-per-second", "memory"}, "d: descriptor k: its rate_limit is kept in the per-second store"},
	} {
		args := append([]string{"serve", "--check", "--config", write(c.body)}, c.extra...)
		code, out, errs := runCLI(t, "", args...)
		if code == 0 || out != "" || !strings.Contains(errs, c.want) {
			t.Errorf("%q: exit %d, %q %q, want an error with %q", c.body, code, out, errs, c.want)
		}
	}
	// The per-second case loads without a per-second store.
	if code, out, errs := runCLI(t, "", "serve", "--check", "--config", dir); code != 0 || !strings.Contains(out, "1 concurrency limits") {
		t.Errorf("without a per-second store: exit %d, %q %q", code, out, errs)
	}
}
