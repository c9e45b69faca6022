package testenv

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every Example of both modules of the workspace has an output that go
// test checks, or its comment says "Compiled, not run" and why: five once
// had neither, and docs/architecture.md said they all ran.
func TestExamplesRunOrSayWhy(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	example := regexp.MustCompile(`(?m)^((?://.*\n)*)func (Example\w*)\(\) \{\n((?:.*\n)*?)^\}`)
	examples, notRun := 0, 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bench") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range example.FindAllStringSubmatch(string(b), -1) {
			examples++
			doc, name, body := m[1], m[2], m[3]
			switch {
			case regexp.MustCompile(`(?m)^\s*// (Unordered o|O)utput:`).MatchString(body):
			case strings.Contains(doc, "// Compiled, not run:"):
				notRun++
			default:
				t.Errorf("%s: %s has no // Output: (go test compiles it and never runs it); give it a deterministic one, or say in its comment \"Compiled, not run:\" and why", path, name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if examples < 20 {
		t.Fatalf("found %d examples: the scan is broken", examples)
	}
	t.Logf("%d examples, %d compiled and not run", examples, notRun)
}
