package cli

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// flagGroup is a heading of a command's help and the flags under it.
type flagGroup struct {
	title string
	names []string
}

// printGroups prints fs's flags under groups' headings, in the flag
// package's format. A flag in no group is printed under "Other" (a test
// checks that none is).
func printGroups(w io.Writer, fs *flag.FlagSet, groups []flagGroup) {
	seen := map[string]bool{}
	for _, g := range groups {
		fmt.Fprintf(w, "%s:\n", g.title)
		for _, n := range g.names {
			if f := fs.Lookup(n); f != nil {
				printFlag(w, f)
				seen[n] = true
			}
		}
		fmt.Fprintln(w)
	}
	var other []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if !seen[f.Name] {
			other = append(other, f)
		}
	})
	if len(other) > 0 {
		fmt.Fprintln(w, "Other:")
		for _, f := range other {
			printFlag(w, f)
		}
	}
}

// printFlag prints one flag as flag.PrintDefaults does, with its default
// as the flag was defined (not as the command line has set it).
func printFlag(w io.Writer, f *flag.Flag) {
	name, usage := flag.UnquoteUsage(f)
	line := "  -" + f.Name
	if name != "" {
		line += " " + name
	}
	usage = strings.ReplaceAll(usage, "\n", "\n    \t")
	switch d := f.DefValue; {
	case d == "" || d == "0" || d == "false" || d == "0s":
	case name == "string":
		usage += fmt.Sprintf(" (default %q)", d)
	default:
		usage += fmt.Sprintf(" (default %v)", d)
	}
	fmt.Fprintf(w, "%s\n    \t%s\n", line, usage)
}

// serveFlagGroups are serve's flags by subject.
var serveFlagGroups = []flagGroup{
	{"Configuration", append([]string{"config", "check", "no-watch", "merge-domain-config", "envoy-env"}, xdsFlagNames...)},
	{"Store", []string{"store", "store-per-second", "prefix", "domain-slot", "store-timeout", "store-pipelines", "store-slices", "store-leases", "on-store-error",
		"store-tls-ca", "store-tls-cert", "store-tls-key", "store-tls-skip-hostname-verification"}},
	{"Listeners", []string{"grpc", "http", "grpc-max-connection-age", "grpc-max-connection-age-grace",
		"grpc-tls-cert", "grpc-tls-key", "grpc-tls-client-ca", "grpc-tls-client-san",
		"http-tls-cert", "http-tls-key", "http-tls-client-ca", "http-tls-client-san",
		"http-token", "http-token-file", "allowed-hosts", "no-console", "shutdown-timeout"}},
	{"Decisions and answers", []string{"rlqs", "rlqs-ttl", "rlqs-steady-ttl", "shadow", "quota-mode", "response-headers", "limit-header", "remaining-header", "reset-header",
		"response-dynamic-metadata"}},
	{"Limits (docs/serve.md, \"Limits\")", []string{"key-form", "limit", "max-request-bytes", "max-descriptors", "max-entries", "max-entry-bytes"}},
	{"Metrics", []string{"envoy-stats", "near-limit-ratio"}},
	{"Logging", []string{"log-level", "log-format"}},
	{"Runtime", []string{"gomaxprocs", "gogc", "gc-min-heap", "cpuprofile"}},
}
