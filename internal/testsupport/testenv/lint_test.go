package testenv

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Files not yet held to the rules below, each with why.
var exempt = map[string]string{}

var (
	fixedOrClockSeed = regexp.MustCompile(`rand\.NewPCG\(\s*\d+\s*,\s*\d+\s*\)|rand\.NewPCG\([^)]*time\.Now|seed\s*:?=\s*uint64\(time\.Now`)
	wallClockClaim   = regexp.MustCompile(`within \d+%%|too thin|not saturated`)
)

// TestModuleFollowsTheRules reads the module's tests: random tests take
// their seed from Seed or SeedOr (logged, and SLUICE_SEED replays it), and
// every wall-clock assertion (within x%, load too thin, not saturated) is
// gated by Timing, so that `go test ./...` passes on a busy machine.
func TestModuleFollowsTheRules(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || fileExists(filepath.Join(path, "go.mod"))) {
				return filepath.SkipDir // another module (bench), or not code
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || rel == "internal/testsupport/testenv/lint_test.go" {
			return nil
		}
		if _, ok := exempt[rel]; ok {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		var recent []string // the lines before, for a Timing gate
		s := bufio.NewScanner(f)
		s.Buffer(nil, 1<<20)
		for n := 1; s.Scan(); n++ {
			line := s.Text()
			if fixedOrClockSeed.MatchString(line) {
				t.Errorf("%s:%d: a random test's seed must come from testenv.Seed or SeedOr (logged, SLUICE_SEED honoured): %s", rel, n, strings.TrimSpace(line))
			}
			if wallClockClaim.MatchString(line) && !strings.Contains(strings.Join(append(recent, line), "\n"), "testenv.Timing(") {
				t.Errorf("%s:%d: a wall-clock assertion must be gated by testenv.Timing: %s", rel, n, strings.TrimSpace(line))
			}
			recent = append(recent, line)
			if len(recent) > 3 {
				recent = recent[1:]
			}
		}
		return s.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	for f, why := range exempt {
		t.Logf("exempt: %s (%s)", f, why)
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
