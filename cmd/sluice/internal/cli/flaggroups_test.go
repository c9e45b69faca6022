package cli

import (
	"flag"
	"strings"
	"testing"
)

// Every serve flag stands under exactly one heading of serve --help, so a
// new flag cannot fall into "Other" unnoticed; the help shows the headings
// and each flag once, with the default it was defined with.
func TestServeFlagGroups(t *testing.T) {
	fs := new(serveFlags).define()
	in := map[string]string{}
	for _, g := range serveFlagGroups {
		for _, n := range g.names {
			if fs.Lookup(n) == nil {
				t.Errorf("group %q names %q, which is no serve flag", g.title, n)
			}
			if prev, ok := in[n]; ok {
				t.Errorf("%q stands under %q and %q", n, prev, g.title)
			}
			in[n] = g.title
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := in[f.Name]; !ok {
			t.Errorf("serve flag --%s is under no heading of serveFlagGroups", f.Name)
		}
	})
	code, out, _ := runCLI(t, "", "serve", "--store", "redis://elsewhere:6379/0", "--help")
	if code != 0 || strings.Contains(out, "Other:") {
		t.Fatalf("serve --help: exit %d, or flags under Other:\n%s", code, out)
	}
	for _, g := range serveFlagGroups {
		if !strings.Contains(out, "\n"+g.title+":\n") {
			t.Errorf("serve --help has no heading %q", g.title)
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if n := strings.Count(out, "\n  -"+f.Name+" ") + strings.Count(out, "\n  -"+f.Name+"\n"); n != 1 {
			t.Errorf("--%s shown %d times", f.Name, n)
		}
	})
	if !strings.Contains(out, `(default "memory")`) {
		t.Errorf("serve --help after --store shows the store given, not the default:\n%s", out)
	}
}
