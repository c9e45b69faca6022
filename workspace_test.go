package sluice_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The workspace's go commands leave go.work.sum as committed. It holds
// what `go mod download` writes there (every module of the workspace's
// graph, its go.mod and its zip), which `go list -m all`, `go run` and
// `go test` keep as it is; a go.work.sum with less (once, only the sums a
// build wanted) was rewritten by the first `go list -m all` (what gopls
// and editors run) or `go mod download`, and the clone showed a change
// nobody made. The commands run on a copy of the workspace's module files.
func TestWorkspaceSumsStay(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	dir := t.TempDir()
	files := []string{"go.work", "go.work.sum", "go.mod", "go.sum", "cmd/sluice/go.mod", "cmd/sluice/go.sum"}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, _ := os.ReadFile("go.work.sum")
	for _, args := range [][]string{{"list", "-m", "all"}, {"mod", "download"}} {
		cmd := exec.Command(goTool, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(dir, "go.work"), "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			// A module the cache lacks and the network cannot bring.
			t.Skipf("go %v could not run here: %v\n%s", args, err, out)
		}
		got, err := os.ReadFile(filepath.Join(dir, "go.work.sum"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("go %v rewrote go.work.sum: commit what it wrote (`go mod download` at the root):\n%s", args, got)
		}
	}
}
