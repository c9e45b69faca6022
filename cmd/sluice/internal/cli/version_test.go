package cli

import (
	"runtime/debug"
	"strings"
	"testing"
)

// sluice --version and sluice version print one line naming the command and
// the Go release; the build's VCS stamps, where there are any, come after
// the version.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		code, out, errs := runCLI(t, "", args...)
		if code != 0 || errs != "" || !strings.HasPrefix(out, "sluice ") || !strings.Contains(out, "go1.") || strings.Count(out, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want one line on stdout", args, code, out, errs)
		}
	}
	info := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.3.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "2d60eb6a1b2c3d4e5f60718293a4b5c6d7e8f901"},
		{Key: "vcs.time", Value: "2026-12-03T23:07:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	if got, want := versionLine(info), "sluice v0.3.0 commit 2d60eb6a1b2c+changes 2026-12-03T23:07:00Z go1.26.8"; got != want {
		t.Errorf("versionLine: %q, want %q", got, want)
	}
	if got, want := versionLine(&debug.BuildInfo{GoVersion: "go1.26.8"}), "sluice (devel) go1.26.8"; got != want {
		t.Errorf("versionLine without stamps: %q, want %q", got, want)
	}
	if code, _, errs := runCLI(t, "", "version", "extra"); code != 2 || !strings.Contains(errs, "extra") {
		t.Errorf("version extra: exit %d, stderr %q; want a usage error", code, errs)
	}
}
