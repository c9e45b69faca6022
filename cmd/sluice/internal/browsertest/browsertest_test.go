package browsertest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRequire runs TestRequireHelper in a child with no Chromium on PATH:
// it skips loudly, or fails when RequireEnv is 1.
func TestRequire(t *testing.T) {
	for _, tc := range []struct {
		require string
		want    string
		fails   bool
	}{{"", "SKIPPING browser tests", false}, {"1", "FAILING browser tests", true}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRequireHelper$", "-test.v")
		cmd.Env = append(os.Environ(), "PATH="+t.TempDir(), RequireEnv+"="+tc.require, "SLUICE_BROWSERTEST_HELPER=1")
		out, err := cmd.CombinedOutput()
		if (err != nil) != tc.fails || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s=%q: err %v, output:\n%s", RequireEnv, tc.require, err, out)
		}
	}
}

func TestRequireHelper(t *testing.T) {
	if os.Getenv("SLUICE_BROWSERTEST_HELPER") != "1" {
		t.Skip("helper for TestRequire")
	}
	Require(t)
	t.Error("Require returned without a browser")
}

func TestArtifacts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	t.Setenv(ArtifactsEnv, dir)
	if got := Artifacts(t); got != dir {
		t.Errorf("Artifacts %q, want %q", got, dir)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Errorf("%s not made: %v", dir, err)
	}
	t.Setenv(ArtifactsEnv, "")
	if got := Artifacts(t); got == "" || got == dir {
		t.Errorf("Artifacts without %s: %q", ArtifactsEnv, got)
	}
}
