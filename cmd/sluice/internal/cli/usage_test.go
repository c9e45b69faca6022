package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Help asked for goes to stdout and exits 0, for the command and each
// subcommand; no arguments at all is a usage error (stderr, 2).
func TestHelp(t *testing.T) {
	for _, args := range [][]string{
		{"--help"}, {"-h"}, {"help"}, {"-help"},
		{"replay", "--help"}, {"replay", "-h"}, {"replay", "--limit", "1/1s", "--help"},
		{"sim", "--help"}, {"sim", "-h"}, {"serve", "--help"}, {"serve", "-h"},
	} {
		code, out, errs := runCLI(t, "", args...)
		if code != 0 || !strings.Contains(out, "Usage: sluice") || errs != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 0 and the usage on stdout", args, code, out, errs)
		}
	}
	code, out, errs := runCLI(t, "")
	if code != 2 || out != "" || !strings.Contains(errs, "Usage: sluice") {
		t.Errorf("no arguments: exit %d, stdout %q, stderr %q; want 2 and the usage on stderr", code, out, errs)
	}
	// A usage error is the error and one line that says where the usage
	// is, for the command and every subcommand: serve's 150 lines of usage
	// once pushed the error off the screen.
	cases := [][]string{{"replay", "extra"}, {"serve", "--conifg", "x"}, {"serve", "extra"}, {"nope"}}
	for name := range commands {
		cases = append(cases, []string{name, "--nope"})
	}
	for _, args := range cases {
		code, out, errs := runCLI(t, "", args...)
		cmd, bad := "sluice "+args[0], strings.TrimLeft(args[1%len(args)], "-")
		if args[0] == "nope" {
			cmd = "sluice"
		}
		lines := strings.Split(strings.TrimSuffix(errs, "\n"), "\n")
		if code != 2 || out != "" || len(lines) != 2 || !strings.HasPrefix(lines[0], cmd+": ") || !strings.Contains(lines[0], bad) || lines[1] != "see "+cmd+" --help" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2, the error naming %q and \"see %s --help\" on stderr", args, code, out, errs, bad, cmd)
		}
	}
}

// A duration flag given a bad value says a duration is wanted, with its
// unit (the flag package says "parse error"), and the help still names
// the flag's type.
func TestDurationFlagErrors(t *testing.T) {
	for _, args := range [][]string{{"serve", "--store-slices", "1"}, {"serve", "--store-leases", "1"}, {"serve", "--store-timeout", "fast"}, {"serve", "--shutdown-timeout=10"}} {
		code, _, errs := runCLI(t, "", args...)
		if code != 2 || !strings.Contains(errs, durationHint) || strings.Contains(errs, "parse error") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", args, code, errs, durationHint)
		}
	}
	code, out, _ := runCLI(t, "", "serve", "--help")
	if code != 0 || !strings.Contains(out, "-store-slices duration") {
		t.Errorf("serve --help: exit %d; want -store-slices duration in\n%s", code, out)
	}
	// The deprecated name is still in the help, and says so.
	if !strings.Contains(out, "-store-leases duration\n    \tdeprecated: --store-slices's old name, read until the next minor release") {
		t.Errorf("serve --help: want --store-leases marked deprecated in\n%s", out)
	}
}

// --burst: negative is an error, 0 is 0 (a leaky bucket that lets none
// wait), and left out it is the rate.
func TestReplayBurst(t *testing.T) {
	for _, b := range []string{"-5", "-1"} {
		code, _, errs := runCLI(t, "", "replay", "--limit", "10/1s", "--burst", b)
		if code != 2 || !strings.Contains(errs, "--burst "+b+" is negative") {
			t.Errorf("--burst %s: exit %d, stderr %q; want 2 and a clear error", b, code, errs)
		}
	}
	in := strings.Repeat(`{"t_us": 1764000000000000, "key": "k"}`+"\n", 12)
	for _, c := range []struct {
		args    []string
		allowed int
	}{
		{[]string{"--limit", "10/1s"}, 10}, // burst = rate
		{[]string{"--limit", "10/1s", "--burst", "3"}, 3},
		{[]string{"--limit", "10/1s", "--algorithm", "leaky-bucket", "--burst", "0"}, 1},
		{[]string{"--limit", "10/1s", "--algorithm", "leaky-bucket"}, 11},
	} {
		code, out, errs := runCLI(t, in, append([]string{"replay"}, c.args...)...)
		if n := strings.Count(out, `"allowed":true`); code != 0 || n != c.allowed {
			t.Errorf("%v: exit %d (%s), %d allowed, want %d", c.args, code, errs, n, c.allowed)
		}
	}
}

// Replay reads what it wrote: a trace of its own output replays to the same
// decisions, each field once; long lines, a byte order mark and t_us as a
// string are handled.
func TestReplayInputs(t *testing.T) {
	in := "\xef\xbb\xbf" + `{"t_us": 1764000000000000, "key": "k", "note": "` + strings.Repeat("x", 2<<20) + `"}` + "\n" +
		strings.Repeat(`{"t_us": 1764000000000000, "key": "k"}`+"\n", 3)
	code, first, errs := runCLI(t, in, "replay", "--limit", "2/1s")
	if code != 0 || strings.Count(first, "\n") != 4 {
		t.Fatalf("exit %d, stderr %q, %d lines", code, errs, strings.Count(first, "\n"))
	}
	code, second, errs := runCLI(t, first, "replay", "--limit", "2/1s")
	if code != 0 || second != first {
		t.Fatalf("replaying the output: exit %d, stderr %q; output differs from the first run", code, errs)
	}
	for i, line := range strings.Split(strings.TrimSuffix(second, "\n"), "\n") {
		dec := json.NewDecoder(strings.NewReader(line))
		seen := map[string]bool{}
		dec.Token()
		for dec.More() {
			k, _ := dec.Token()
			var v json.RawMessage
			dec.Decode(&v)
			if seen[k.(string)] {
				t.Errorf("line %d holds %q twice", i+1, k)
			}
			seen[k.(string)] = true
		}
	}
	code, _, errs = runCLI(t, `{"t_us": "1764000000000000", "key": "k"}`+"\n", "replay", "--limit", "2/1s")
	if code != 2 || !strings.Contains(errs, `line 1: "t_us" is the string "1764000000000000", want a JSON integer`) {
		t.Errorf("t_us as a string: exit %d, stderr %q", code, errs)
	}
	code, _, errs = runCLI(t, "", "replay", "--limit", "10/-1s")
	if code != 2 || !strings.Contains(errs, `period "-1s" in "10/-1s" must be positive`) {
		t.Errorf("--limit 10/-1s: exit %d, stderr %q", code, errs)
	}
}

// sluice serve refuses bad flag values before it listens, with a clear error.
func TestServeFlags(t *testing.T) {
	broken := filepath.Join(t.TempDir(), "broken.yaml")
	if err := os.WriteFile(broken, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--on-store-error", "maybe"}, `--on-store-error "maybe": want fail-closed, fail-open or local`},
		{[]string{"--log-format", "xml"}, `--log-format "xml"`},
		{[]string{"--response-headers", "all"}, `want none, envoy or draft11`},
		{[]string{"--store", "mysql://x"}, `unknown store "mysql://x"`},
		{[]string{"--grpc-tls-cert", "x.pem"}, "--grpc-tls-cert and --grpc-tls-key go together"},
		{[]string{"--http-token-file", "/nonexistent/token"}, "--http-token-file"},
		{[]string{"--config", "/nonexistent/config.yaml", "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"}, "nonexistent"},
		{[]string{"--config", broken, "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"}, "fortnight"},
		{[]string{"--cpuprofile", "/nonexistent/cpu.prof"}, "--cpuprofile"},
		{[]string{"--gc-min-heap", "-1"}, "--gc-min-heap -1: want 0 to"},
		{[]string{"--store-pipelines", "2000"}, "--store-pipelines 2000: want 0 to 1024"},
		{[]string{"--store-slices", "-1s"}, "--store-slices -1s: want 0 (off) to 1h"},
		{[]string{"--store-slices", "2h"}, "--store-slices 2h0m0s: want 0 (off) to 1h"},
		{[]string{"--store-slices", "1s"}, "--store-slices 1s: slices share a Redis store's budgets among instances; the memory store has none to slice"},
		{[]string{"--store-leases", "2h"}, "--store-leases 2h0m0s: want 0 (off) to 1h"},
		{[]string{"--store-leases", "1s", "--store-slices", "1s"}, "--store-leases is --store-slices's deprecated name: give --store-slices alone"},
		{[]string{"--gomaxprocs", "0"}, `--gomaxprocs "0": want auto or 1 to 65536`},
		{[]string{"--gomaxprocs", "all"}, `--gomaxprocs "all": want auto or 1 to 65536`},
		{[]string{"--grpc-max-connection-age", "-1s"}, "--grpc-max-connection-age -1s"},
		{[]string{"--reset-header", "Reset:", "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"}, `"Reset:" is not a valid HTTP header name`},
		{[]string{"--rlqs-ttl", "4s"}, "give --rlqs"},
		{[]string{"--rlqs", "--rlqs-ttl", "2s"}, "want whole seconds, a TTL of more than a round and the slack (2s)"},
		{[]string{"--rlqs", "--rlqs-ttl", "3500ms"}, "--rlqs-ttl 3.5s"},
		{[]string{"--rlqs", "--rlqs-ttl", "9s", "--rlqs-steady-ttl", "5s"}, "a steady TTL of at least the TTL"},
	} {
		code, _, errs := runCLI(t, "", append([]string{"serve"}, c.args...)...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("serve %v: exit %d, stderr %q; want 2 and %q", c.args, code, errs, c.want)
		}
	}
}
