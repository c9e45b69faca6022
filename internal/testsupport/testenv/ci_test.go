package testenv

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// ciRun is .ci/run's text.
func ciRun(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// raceShrunk returns the tests of both modules of the workspace (bench/
// aside: CI runs its tests without -race) that the race detector skips or
// shrinks: a Test function that reads raceEnabled, or calls a function of
// its package that does.
func raceShrunk(t *testing.T) []string {
	t.Helper()
	root := filepath.Join("..", "..", "..")
	funcRe := regexp.MustCompile(`(?m)^func (\w+)\(`)
	reads := regexp.MustCompile(`(?:if |case |\|\| |&& |!)raceEnabled\b`)
	var tests []string
	dirs := map[string][]string{} // package directory → its test files' texts
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
		if strings.HasSuffix(path, "_test.go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			dirs[filepath.Dir(path)] = append(dirs[filepath.Dir(path)], string(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, files := range dirs {
		bodies := map[string]string{} // function name → its text
		for _, src := range files {
			locs := funcRe.FindAllStringSubmatchIndex(src, -1)
			for i, l := range locs {
				end := len(src)
				if i+1 < len(locs) {
					end = locs[i+1][0]
				}
				bodies[src[l[2]:l[3]]] = src[l[0]:end]
			}
		}
		var helpers []string
		for name, body := range bodies {
			if !strings.HasPrefix(name, "Test") && reads.MatchString(body) {
				helpers = append(helpers, name)
			}
		}
		for name, body := range bodies {
			if !strings.HasPrefix(name, "Test") {
				continue
			}
			shrunk := reads.MatchString(body)
			for _, h := range helpers {
				shrunk = shrunk || strings.Contains(body, h+"(")
			}
			if shrunk {
				tests = append(tests, name)
			}
		}
	}
	slices.Sort(tests)
	return slices.Compact(tests)
}

// .ci/run runs without -race every test the race detector skips or
// shrinks: the "no allocation" and memory claims (they skip under it, and
// CI once ran only -race, so none was guarded) and the property tests it
// cuts to a smoke run.
func TestCIRunsWhatRaceSkips(t *testing.T) {
	m := regexp.MustCompile(`(?m)^norace='([^']+)'$`).FindStringSubmatch(ciRun(t))
	if m == nil {
		t.Fatal(".ci/run has no norace='…' pattern for its run without -race")
	}
	re, err := regexp.Compile(m[1])
	if err != nil {
		t.Fatalf(".ci/run's norace pattern: %v", err)
	}
	if !strings.Contains(ciRun(t), `go test -count=1 -run "$norace" "$pkgs"`) {
		t.Errorf(".ci/run does not run go test -run \"$norace\" without -race")
	}
	tests := raceShrunk(t)
	for _, name := range []string{"TestZeroAllocs", "TestHoldZeroAllocs", "TestMemoryPerKey", "TestAllocs", "TestEnvoyStatsAllocs", "TestDecideAllocs"} {
		if !slices.Contains(tests, name) {
			t.Errorf("the scan does not find %s among the tests the race detector skips: it is broken", name)
		}
	}
	for _, name := range tests {
		if !re.MatchString(name) {
			t.Errorf("%s skips or shrinks under the race detector, and .ci/run's run without it (%s) does not name it", name, m[1])
		}
	}
	t.Logf("the tests the race detector skips or shrinks: %v", tests)
}

// .ci/run runs every command of bench/cmd once in its -smoke mode, and
// sets SLUICE_LONG=1 for the long runs.
func TestCIRunsTheBenchCommandsAndTheLongRuns(t *testing.T) {
	run := ciRun(t)
	cmds, err := os.ReadDir(filepath.Join("..", "..", "..", "bench", "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cmds {
		if c.IsDir() && !regexp.MustCompile(`go run \./cmd/`+regexp.QuoteMeta(c.Name())+` -smoke\b`).MatchString(run) {
			t.Errorf(".ci/run does not run bench's %s with -smoke: a command nothing runs rots (compare -redis-only did)", c.Name())
		}
	}
	if !regexp.MustCompile(`(?m)^export ` + LongEnv + `=1$`).MatchString(run) {
		t.Errorf(".ci/run does not export %s=1", LongEnv)
	}
}
