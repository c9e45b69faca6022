package sluice_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
)

// readmeBlocks returns the README's fenced code blocks of the language
// lang, in order.
func readmeBlocks(t *testing.T, lang string) []string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?ms)^```" + regexp.QuoteMeta(lang) + "\n(.*?)^```$")
	var out []string
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		out = append(out, m[1])
	}
	return out
}

// Each Go block of the README is a whole program that builds on its own,
// as it is written: none leans on another's variables (the gRPC one once
// used the HTTP one's lim) or on names the reader must guess (the HTTP
// one's mux), and none leaves a variable unused. The blocks are built in
// directories of their own that exist only in an overlay, so the test
// writes nothing into the tree.
func TestReadmeGoBlocksBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the README's programs; skipped with -short")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	blocks := readmeBlocks(t, "go")
	if len(blocks) < 3 {
		t.Fatalf("%d Go blocks in the README; want the library's, HTTP's and gRPC's", len(blocks))
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	overlay := map[string]map[string]string{"Replace": {}}
	var pkgs []string
	for i, src := range blocks {
		if !strings.HasPrefix(src, "package main\n") {
			t.Errorf("Go block %d is not a whole program (package main, its imports, func main):\n%s", i+1, src)
			continue
		}
		file := filepath.Join(tmp, fmt.Sprintf("block%d.go", i+1))
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(root, "internal", "readmeblock"+strconv.Itoa(i+1))
		if _, err := os.Stat(dir); err == nil {
			t.Fatalf("%s exists: the test builds the blocks there, in an overlay", dir)
		}
		overlay["Replace"][filepath.Join(dir, "main.go")] = file
		pkgs = append(pkgs, "./internal/readmeblock"+strconv.Itoa(i+1))
	}
	if t.Failed() || len(pkgs) < 3 {
		t.FailNow()
	}
	js, _ := json.Marshal(overlay)
	ov := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ov, js, 0o644); err != nil {
		t.Fatal(err)
	}
	// The compiler refuses an unused variable or import, and a name not
	// declared. (go build of several packages writes nothing; the
	// library's block is linked below, to run.)
	if out, err := exec.Command(goTool, append([]string{"build", "-overlay", ov}, pkgs[1:]...)...).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	// The library's program does what the text after it says.
	out, err := exec.Command(goTool, "run", "-overlay", ov, pkgs[0]).CombinedOutput()
	if err != nil {
		t.Fatalf("go run the library's block: %v\n%s", err, out)
	}
	line := regexp.MustCompile(`^export (\d): allowed=(true|false) remaining=(\d+) retry_after=(\S+)$`)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i, want := range []string{"true 40", "true 30", "true 20", "true 10", "true 0", "false 0"} {
		var m []string
		if i < len(lines) {
			m = line.FindStringSubmatch(lines[i])
		}
		if m == nil || m[2]+" "+m[3] != want {
			t.Fatalf("the library's block printed\n%s\nwant line %d allowed, remaining = %s", out, i+1, want)
		}
	}
}

// The README shows the output ExampleLimiter_Take checks (`go test -v`
// prints only PASS), and the text form its comment gives reads as the
// limit it stands beside.
func TestReadmeExampleOutput(t *testing.T) {
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)func ExampleLimiter_Take\(\) \{.*?// Output:\n(.*?)\n\}`).FindSubmatch(src)
	if m == nil {
		t.Fatal("example_test.go has no ExampleLimiter_Take with an output")
	}
	var want strings.Builder
	for _, l := range strings.Split(string(m[1]), "\n") {
		want.WriteString(strings.TrimPrefix(strings.TrimSpace(l), "// ") + "\n")
	}
	found := false
	for _, b := range readmeBlocks(t, "text") {
		found = found || b == want.String()
	}
	if !found {
		t.Errorf("the README shows no text block with ExampleLimiter_Take's output:\n%s", want.String())
	}

	pair := regexp.MustCompile(`sluice\.PerSecond\((\d+)\)\.WithBurst\((\d+)\) +// sluice\.ParseLimit\("([^"]+)"\)`)
	n := 0
	for _, b := range readmeBlocks(t, "go") {
		for _, m := range pair.FindAllStringSubmatch(b, -1) {
			rate, _ := strconv.ParseInt(m[1], 10, 64)
			burst, _ := strconv.ParseInt(m[2], 10, 64)
			got, err := sluice.ParseLimit(m[3])
			if want := sluice.PerSecond(rate).WithBurst(burst); err != nil || got != want {
				t.Errorf("ParseLimit(%q) = %v, %v; the README says it reads as %v", m[3], got, err, want)
			}
			n++
		}
	}
	if n == 0 {
		t.Error("the README's library block has no ParseLimit comment beside its limit as this test reads it")
	}
}

// The README's rules are an excerpt of examples/serve/rules.yaml, the file
// its `sluice serve` example loads: each of its lines is there, in order.
func TestReadmeRulesExcerpt(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("examples", "serve", "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := readmeBlocks(t, "yaml")
	if len(blocks) == 0 {
		t.Fatal("the README shows no rules")
	}
	file := strings.Split(string(b), "\n")
	for _, bl := range blocks {
		at := 0
		for _, l := range strings.Split(strings.TrimSuffix(bl, "\n"), "\n") {
			for at < len(file) && file[at] != l {
				at++
			}
			if at == len(file) {
				t.Errorf("the README's rules line %q is not in examples/serve/rules.yaml (in the README's order)", l)
				break
			}
		}
	}
}
