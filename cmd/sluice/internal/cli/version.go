package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
)

func init() {
	commands["version"] = command{summary: "print the version, the commit it was built from and the Go release", run: runVersion}
}

func runVersion(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	usage := func(w io.Writer) {
		fmt.Fprintln(w, "Usage: sluice version (or sluice --version)\n\nPrints the module's version, the commit it was built from and the Go release.")
	}
	if err := parseFlags(fs, usage, args, stdout, stderr); err != nil {
		return err
	}
	info, _ := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, versionLine(info))
	return nil
}

// versionLine describes the build: the main module's version ("(devel)"
// when built from a clone), then the commit, its time and whether the tree
// had changes, as the go command stamps them (none under go run, or where
// the build had no VCS), then the Go release.
func versionLine(info *debug.BuildInfo) string {
	if info == nil {
		return "sluice (no build information)"
	}
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+changes"
			}
		}
	}
	line := "sluice " + v
	if rev != "" {
		line += fmt.Sprintf(" commit %.12s%s", rev, dirty)
		if at != "" {
			line += " " + at
		}
	}
	return line + " " + info.GoVersion
}
