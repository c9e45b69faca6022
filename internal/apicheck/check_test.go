package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// TestCheckOnARepository runs the whole check on a git repository of a
// small module: a first commit and a shallow clone are skipped; a removed
// function and a removed package fail until CHANGELOG.md names them, while
// changes to internal packages and commands, and a package added since the
// base, need nothing. It installs apidiff if GOPATH/bin lacks it (CI's
// apicheck step has installed it), so it runs with SLUICE_LONG=1.
func TestCheckOnARepository(t *testing.T) {
	if !testenv.Long() {
		t.Skipf("runs git, go and apidiff on a repository of its own (seconds, and apidiff from the module proxy if it is not installed): with %s=1", testenv.LongEnv)
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git on PATH")
	}
	repo := t.TempDir()
	git := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=apicheck", "-c", "user.email=apicheck@example.com", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	write := func(files map[string]string) {
		t.Helper()
		for name, text := range files {
			path := filepath.Join(repo, name)
			if text == "" {
				if err := os.RemoveAll(filepath.Dir(path)); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(dir string, args ...string) (int, string) {
		t.Helper()
		var out, errs bytes.Buffer
		code := run(context.Background(), args, dir, &out, &errs)
		t.Logf("apicheck %v: %d\n%s%s", args, code, out.String(), errs.String())
		return code, out.String() + errs.String()
	}

	const unreleased = "# Changelog\n\n## Unreleased\n\n### Breaking\n"
	write(map[string]string{
		"go.mod":              "module example.com/m\n\ngo 1.26.0\n",
		"CHANGELOG.md":        unreleased,
		"lib/lib.go":          "// Package lib is kept.\npackage lib\n\n// Old goes.\nfunc Old() {}\n\n// Keep stays.\nfunc Keep() {}\n",
		"gone/gone.go":        "// Package gone goes.\npackage gone\n\n// G goes with it.\nfunc G() {}\n",
		"internal/in/in.go":   "// Package in is internal.\npackage in\n\n// F changes freely.\nfunc F() {}\n",
		"cmd/tool/main.go":    "// Command tool is a command.\npackage main\n\n// Exported is no API.\nfunc Exported() {}\n\nfunc main() {}\n",
		"cmdlib/lib/lib.go":   "// Package lib, a second of the name.\npackage lib\n\n// V stays.\nvar V int\n",
		"cmd/sub/sub/sub.go":  "// Package sub is the command's.\npackage sub\n\n// S changes freely.\nfunc S() {}\n",
		"lib/lib_test.go":     "package lib\n\nimport \"testing\"\n\nfunc TestKeep(t *testing.T) { Keep() }\n",
		"onlytests/x_test.go": "package onlytests\n",
	})
	git(repo, "init", "-q", "-b", "main")
	git(repo, "add", "-A")
	git(repo, "commit", "-q", "-m", "first")
	if code, out := check(repo); code != 0 || !strings.Contains(out, "first commit") {
		t.Fatalf("on the first commit: %d, want 0 and a skip\n%s", code, out)
	}

	write(map[string]string{
		"lib/lib.go":         "// Package lib is kept.\npackage lib\n\n// Keep stays.\nfunc Keep() {}\n\n// New is added.\nfunc New() {}\n",
		"gone/gone.go":       "",
		"added/added.go":     "// Package added is new.\npackage added\n\n// A is new.\nfunc A() {}\n",
		"internal/in/in.go":  "// Package in is internal.\npackage in\n\n// F changes freely.\nfunc F(int) {}\n",
		"cmd/tool/main.go":   "// Command tool is a command.\npackage main\n\nfunc main() {}\n",
		"cmd/sub/sub/sub.go": "// Package sub is the command's.\npackage sub\n",
		"cmdlib/lib/lib.go":  "// Package lib, a second of the name.\npackage lib\n\n// W replaces V.\nvar W int\n",
	})
	git(repo, "add", "-A")
	git(repo, "commit", "-q", "-m", "second")
	code, out := check(repo)
	if code != 1 {
		t.Fatalf("a removed function and package, unnamed: %d, want 1\n%s", code, out)
	}
	for _, want := range []string{
		"3 incompatible changes",
		"  example.com/m/lib: Old: removed\n",
		"  example.com/m/cmdlib/lib: V: removed\n",
		"\n- `lib.V`: removed.\n",
		"  example.com/m/gone: package removed\n",
		"\n- `lib.Old`: removed.\n",
		"\n- `example.com/m/gone`: package removed.\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the failure lacks %q", want)
		}
	}
	for _, not := range []string{"internal/in", "cmd/", "added", "New"} {
		if strings.Contains(out, not) {
			t.Errorf("the failure names %q, which needs nothing", not)
		}
	}

	// Named elsewhere than Unreleased/Breaking: still a failure.
	write(map[string]string{"CHANGELOG.md": unreleased + "\n### Changed\n- `lib.Old` and `example.com/m/gone` are gone.\n"})
	if code, out := check(repo); code != 1 {
		t.Errorf("named under Changed: %d, want 1\n%s", code, out)
	}
	// One named: the other is still listed.
	write(map[string]string{"CHANGELOG.md": unreleased + "- `lib.Old` is gone: call `lib.Keep`.\n"})
	if code, out := check(repo); code != 1 || strings.Contains(out, "- `lib.Old`") || !strings.Contains(out, "- `example.com/m/gone`") {
		t.Errorf("one of two named: %d, want 1 and only the other listed\n%s", code, out)
	}
	write(map[string]string{"CHANGELOG.md": unreleased + "- `lib.Old` is gone: call `lib.Keep`.\n- `example.com/m/gone`: use `lib.Keep`.\n- `lib.V` is `lib.W`.\n"})
	if code, out := check(repo); code != 0 || !strings.Contains(out, "each named") {
		t.Errorf("both named: %d, want 0\n%s", code, out)
	}

	// The base as an argument, and from the environment: at HEAD itself
	// (the working tree's CHANGELOG.md aside) nothing changed.
	if code, out := check(repo, "HEAD"); code != 0 || !strings.Contains(out, "no incompatible change") {
		t.Errorf("base HEAD: %d, want 0\n%s", code, out)
	}
	t.Setenv(baseEnv, "HEAD")
	if code, out := check(repo); code != 0 || !strings.Contains(out, "(HEAD)") {
		t.Errorf("%s=HEAD: %d, want 0 against HEAD\n%s", baseEnv, code, out)
	}
	t.Setenv(baseEnv, "")
	if code, _ := check(repo, "no-such-commit"); code != 2 {
		t.Errorf("a base that is no commit: %d, want 2", code)
	}

	// A shallow clone lacks HEAD^: skipped, not failed.
	shallow := filepath.Join(t.TempDir(), "shallow")
	git(repo, "clone", "-q", "--depth", "1", "file://"+repo, shallow)
	if code, out := check(shallow); code != 0 || !strings.Contains(out, "shallow clone") {
		t.Errorf("a shallow clone: %d, want 0 and a skip\n%s", code, out)
	}
}
