package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// serve --check loads the configuration as serve would, says what it
// holds and exits 0, or exits non-zero with the load error: concurrency
// limits included, and what the per-second store cannot take.
func TestServeCheck(t *testing.T) {
	code, out, errs := runCLI(t, "", "serve", "--check", "--config", filepath.Join("..", "..", "..", "..", "examples", "serve"))
	if code != 0 || out != "configuration OK: 2 domains, 7 rules, 1 concurrency limits, from 2 files\nserve would listen on gRPC 127.0.0.1:8081 and HTTP 127.0.0.1:8080, over memory\n" {
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
		{"domain: d\ndescriptors:\n  - key: k\n    concurrency: {max: 2, headroom: 2}\n", nil, "c.yaml:4: descriptor d.k: concurrency headroom 2 out of a max of 2"},
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
	// Every flag serve would refuse, --check refuses (it once passed
	// --on-store-error fail-close, which serve then refused), and it
	// connects to no store: a Redis that is not there is not its business.
	examples := filepath.Join("..", "..", "..", "..", "examples", "serve")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--on-store-error", "fail-close"}, `--on-store-error "fail-close": want fail-closed, fail-open or local`},
		{[]string{"--store", "mysql://x"}, `unknown store "mysql://x"`},
		{[]string{"--store", "redis://127.0.0.1:1/0", "--store-per-second", "nope://x"}, `--store-per-second: unknown store "nope://x"`},
		{[]string{"--store", "redis://127.0.0.1:1/0", "--store-tls-ca", "ca.pem"}, "--store-tls-… flags want a TLS store"},
		{[]string{"--log-level", "loud"}, `--log-level "loud"`},
		{[]string{"--response-headers", "all"}, "want none, envoy or draft11"},
		{[]string{"--reset-header", "Reset:"}, `"Reset:" is not a valid HTTP header name`},
		{[]string{"--grpc-tls-cert", "x.pem"}, "--grpc-tls-cert and --grpc-tls-key go together"},
		{[]string{"--http-token-file", "/nonexistent/token"}, "--http-token-file"},
		{[]string{"--grpc", "8081"}, `gRPC listener: "8081": want HOST:PORT or unix:PATH`},
		{[]string{"--http", "127.0.0.1:http-ish"}, `HTTP listener: "127.0.0.1:http-ish": want HOST:PORT`},
		{[]string{"--gomaxprocs", "0"}, `--gomaxprocs "0"`},
		{[]string{"--near-limit-ratio", "2"}, "--near-limit-ratio 2"},
	} {
		args := append([]string{"serve", "--check", "--config", examples}, c.args...)
		code, out, errs := runCLI(t, "", args...)
		if code == 0 || out != "" || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, %q %q; want an error with %q", c.args, code, out, errs, c.want)
		}
	}
	for _, extra := range [][]string{
		{"--store", "redis://127.0.0.1:1/0", "--on-store-error", "local", "--store-slices", "1s"},
		{"--store", "redis://127.0.0.1:1/0", "--store-leases", "1s"},
		{"--store", "redis-cluster://127.0.0.1:1,127.0.0.1:2", "--grpc", "unix:/run/sluice.sock", "--http", "0.0.0.0:http"},
	} {
		args := append([]string{"serve", "--check", "--config", examples}, extra...)
		code, out, errs := runCLI(t, "", args...)
		if code != 0 || !strings.HasPrefix(out, "configuration OK") {
			t.Errorf("%v: exit %d, %q %q; want OK without a store to connect to", extra, code, out, errs)
		}
		// --check names the deprecated flag it was given.
		if old := slices.Contains(extra, "--store-leases"); strings.Contains(out, "deprecated: --store-leases is deprecated: it is --store-slices") != old {
			t.Errorf("%v: %q; want the deprecation said: %v", extra, out, old)
		}
	}
}

// $SLUICE_CONFIG, $SLUICE_GRPC_ADDR and $SLUICE_HTTP_ADDR are the defaults
// of --config, --grpc and --http (the container image sets them, so that
// the flags after the image name add to them): a flag given wins, and so
// do --envoy-env's settings, which stand for flags.
func TestServeEnvDefaults(t *testing.T) {
	examples := filepath.Join("..", "..", "..", "..", "examples", "serve")
	t.Setenv(configEnv, examples)
	t.Setenv(grpcAddrEnv, "0.0.0.0:9081")
	t.Setenv(httpAddrEnv, "0.0.0.0:9080")
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "configuration OK: 2 domains, 7 rules, 1 concurrency limits, from 2 files\nserve would listen on gRPC 0.0.0.0:9081 and HTTP 0.0.0.0:9080, over memory\n"},
		{[]string{"--grpc", "127.0.0.1:7081", "--config", ""}, "configuration OK: 0 domains, 0 rules, 0 concurrency limits, from 0 files\nserve would listen on gRPC 127.0.0.1:7081 and HTTP 0.0.0.0:9080, over memory\n"},
	} {
		code, out, errs := runCLI(t, "", append([]string{"serve", "--check"}, c.args...)...)
		if code != 0 || out != c.want {
			t.Errorf("%v: exit %d, %q %q; want %q", c.args, code, out, errs, c.want)
		}
	}
	t.Setenv("RUNTIME_ROOT", examples)
	t.Setenv("RUNTIME_APPDIRECTORY", ".")
	t.Setenv("REDIS_SOCKET_TYPE", "tcp")
	t.Setenv("REDIS_URL", "127.0.0.1:1")
	t.Setenv("GRPC_PORT", "7081")
	code, out, errs := runCLI(t, "", "serve", "--check", "--envoy-env")
	if want := "serve would listen on gRPC 0.0.0.0:7081 and HTTP 0.0.0.0:8080, over redis://127.0.0.1:1"; code != 0 || !strings.Contains(out, want) || !strings.Contains(out, "7 rules") {
		t.Errorf("--envoy-env: exit %d, %q %q; want envoy's settings over the environment's defaults: %q", code, out, errs, want)
	}
}

// serve --check lists a rules file's deprecated names (a concurrency's
// reserve, now headroom): the file loads, and says where to change it.
func TestServeCheckDeprecated(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	body := "domain: d\ndescriptors:\n  - key: k\n    concurrency: {max: 4}\n    descriptors:\n      - key: c\n        concurrency: {reserve: 1}\n"
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "", "serve", "--check", "--config", p)
	want := "deprecated: " + p + ":7: descriptor d.k.c: concurrency reserve is deprecated: call it headroom"
	if code != 0 || !strings.HasPrefix(out, "configuration OK: 1 domains, 0 rules, 2 concurrency limits") || !strings.Contains(out, want) {
		t.Errorf("exit %d, %q %q; want OK and %q", code, out, errs, want)
	}
}
