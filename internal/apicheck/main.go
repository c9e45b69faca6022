// Command apicheck is CI's check that the library keeps its Go API
// (docs/compatibility.md): it compares the exported API of every library
// package (the root module's packages but internal ones, commands and
// cmd/) at a base commit with the working tree, with golang.org/x/exp's
// apidiff, and fails on an incompatible change that CHANGELOG.md does not
// name in the "### Breaking" subsection of its "## Unreleased" section.
//
//	go run ./internal/apicheck [BASE]   # .ci/apicheck; BASE: HEAD^, or $SLUICE_API_BASE
//
// Run it from the module's root, in a git work tree. A shallow clone that
// lacks the base and a first commit have nothing to compare: it says so
// and passes.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// apidiffVersion is the golang.org/x/exp the check installs apidiff from
// (with `go install`, into GOBIN or GOPATH/bin, once).
const apidiffVersion = "v0.0.0-20261120182113-8801fbdfac81"

// baseEnv overrides the default base, HEAD^; an argument overrides both.
const baseEnv = "SLUICE_API_BASE"

func main() {
	os.Exit(run(context.Background(), os.Args[1:], ".", os.Stdout, os.Stderr))
}

// run checks the module at dir and returns the exit status: 0 when the API
// is kept, every break is named, or there is nothing to compare; 1 when a
// break is not named; 2 when the check could not be made.
func run(ctx context.Context, args []string, dir string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("apicheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: apicheck [BASE]\n\nCompares the library's exported Go API at BASE (default HEAD^, or $%s) with the working tree;\nan incompatible change fails unless CHANGELOG.md names it (docs/compatibility.md).\n", baseEnv)
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 1 {
		fs.Usage()
		return 2
	}
	spec, explicit := "HEAD^", false
	if v := os.Getenv(baseEnv); v != "" {
		spec, explicit = v, true
	}
	if fs.NArg() == 1 {
		spec, explicit = fs.Arg(0), true
	}
	c := &checker{dir: dir}
	changes, err := c.check(ctx, spec, explicit)
	var skip skipped
	switch {
	case errors.As(err, &skip):
		fmt.Fprintf(stdout, "apicheck: skipped: %s\n", skip)
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "apicheck: %v\n", err)
		return 2
	}
	changelog, err := os.ReadFile(filepath.Join(dir, "CHANGELOG.md"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(stderr, "apicheck: %v\n", err)
		return 2
	}
	return report(stdout, c, changes, string(changelog))
}

// report says what changed, and returns 1 when CHANGELOG.md leaves a
// change unnamed.
func report(w io.Writer, c *checker, changes []change, changelog string) int {
	since := fmt.Sprintf("%s (%s)", short(c.base), c.spec)
	if len(changes) == 0 {
		fmt.Fprintf(w, "apicheck: %d library packages since %s: no incompatible change\n", c.packages, since)
		return 0
	}
	names, found := breakingNames(changelog)
	var unnamed []change
	for _, ch := range changes {
		if !named(names, ch) {
			unnamed = append(unnamed, ch)
		}
	}
	if len(unnamed) == 0 {
		fmt.Fprintf(w, "apicheck: %s since %s, each named in CHANGELOG.md:\n", count(len(changes), "incompatible change"), since)
		for _, ch := range changes {
			fmt.Fprintf(w, "  %s: %s\n", ch.pkg, ch.msg)
		}
		return 0
	}
	fmt.Fprintf(w, "apicheck: %s to the library's Go API since %s that CHANGELOG.md does not name:\n", count(len(unnamed), "incompatible change"), since)
	for _, ch := range unnamed {
		fmt.Fprintf(w, "  %s: %s\n", ch.pkg, ch.msg)
	}
	where := `these lines to CHANGELOG.md, under "## Unreleased", "### Breaking"`
	if !found {
		where = `to CHANGELOG.md, under "## Unreleased", a "### Breaking" subsection with these lines`
	}
	fmt.Fprintf(w, "\nAdd %s (or name several changes in one line), each saying what to use instead:\n\n", where)
	seen := map[string]bool{}
	for _, ch := range unnamed {
		if !seen[ch.name] {
			seen[ch.name] = true
			fmt.Fprintf(w, "- `%s`: %s.\n", ch.name, ch.what())
		}
	}
	fmt.Fprintf(w, "\nThe rule: docs/compatibility.md, \"Breaking changes\". Compatible changes need no line.\n")
	return 1
}

// count is "1 thing" or "n things".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.Itoa(n) + " " + thing + "s"
}

// skipped is why there is nothing to compare: not a failure.
type skipped string

func (s skipped) Error() string { return string(s) }

// A checker compares the library's API at a base commit with the working
// tree of the module at dir.
type checker struct {
	dir      string
	spec     string // the base as given
	base     string // its commit
	packages int    // library packages at the base
}

// check returns the incompatible changes from the base named by spec to the
// working tree (explicit: spec was given, not the default HEAD^).
func (c *checker) check(ctx context.Context, spec string, explicit bool) ([]change, error) {
	c.spec = spec
	base, err := c.resolve(ctx, spec, explicit)
	if err != nil {
		return nil, err
	}
	c.base = base
	tmp, err := os.MkdirTemp("", "apicheck-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	baseDir := filepath.Join(tmp, "base")
	if err := c.extract(ctx, base, baseDir); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(baseDir, "go.mod")); err != nil {
		return nil, skipped(fmt.Sprintf("%s has no go.mod at the module's root: no API to keep", short(base)))
	}
	oldMod, oldPkgs, err := libraryPackages(ctx, baseDir)
	if err != nil {
		return nil, fmt.Errorf("the packages at %s: %w", short(base), err)
	}
	newMod, newPkgs, err := libraryPackages(ctx, c.dir)
	if err != nil {
		return nil, fmt.Errorf("the working tree's packages: %w", err)
	}
	if oldMod != newMod {
		return nil, skipped(fmt.Sprintf("the module path changed from %s to %s: a new module", oldMod, newMod))
	}
	c.packages = len(oldPkgs)
	tool, err := apidiff(ctx)
	if err != nil {
		return nil, err
	}

	// Export data of each package the base has: at the base, and in the
	// working tree when it is still there (a package added since has
	// nothing to keep).
	type job struct{ dir, path, file string }
	var jobs []job
	var paths []string
	for p := range oldPkgs {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for i, p := range paths {
		jobs = append(jobs, job{baseDir, p, filepath.Join(tmp, "old-"+strconv.Itoa(i)+".x")})
		if _, ok := newPkgs[p]; ok {
			jobs = append(jobs, job{c.dir, p, filepath.Join(tmp, "new-"+strconv.Itoa(i)+".x")})
		}
	}
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, min(2, runtime.NumCPU())) // a shared 2-core machine
	for i, j := range jobs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if _, err := command(ctx, j.dir, tool, "-w", j.file, j.path); err != nil {
				where := "the working tree"
				if j.dir == baseDir {
					where = short(base)
				}
				errs[i] = fmt.Errorf("the API of %s at %s: %w", j.path, where, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	var changes []change
	for i, p := range paths {
		if _, ok := newPkgs[p]; !ok {
			changes = append(changes, removal(p))
			continue
		}
		out, err := command(ctx, tmp, tool, "-incompatible", "old-"+strconv.Itoa(i)+".x", "new-"+strconv.Itoa(i)+".x")
		if err != nil {
			return nil, fmt.Errorf("comparing %s: %w", p, err)
		}
		for _, line := range strings.Split(out, "\n") {
			if msg, ok := strings.CutPrefix(line, "- "); ok {
				changes = append(changes, apidiffChange(p, oldPkgs[p], msg))
			}
		}
	}
	return changes, nil
}

// resolve returns the commit spec names, or why there is none to compare
// with.
func (c *checker) resolve(ctx context.Context, spec string, explicit bool) (string, error) {
	if _, err := command(ctx, c.dir, "git", "rev-parse", "--is-inside-work-tree"); err != nil {
		return "", skipped("not in a git work tree: no earlier commit to compare with")
	}
	if out, err := command(ctx, c.dir, "git", "rev-parse", "--verify", "--quiet", "--end-of-options", spec+"^{commit}"); err == nil {
		return strings.TrimSpace(out), nil
	}
	if out, _ := command(ctx, c.dir, "git", "rev-parse", "--is-shallow-repository"); strings.TrimSpace(out) == "true" {
		return "", skipped(fmt.Sprintf("this shallow clone does not have %s (`git fetch --unshallow` brings the history)", spec))
	}
	if !explicit {
		if _, err := command(ctx, c.dir, "git", "rev-parse", "--verify", "--quiet", "HEAD"); err != nil {
			return "", skipped("no commit yet")
		}
		return "", skipped("HEAD is the first commit: no earlier API to keep")
	}
	return "", fmt.Errorf("the base %q is not a commit of this repository", spec)
}

// extract writes the files of commit into dir.
func (c *checker) extract(ctx context.Context, commit, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	archive := exec.CommandContext(ctx, "git", "archive", "--format=tar", commit)
	archive.Dir = c.dir
	var stderr bytes.Buffer
	archive.Stderr = &stderr
	r, err := archive.StdoutPipe()
	if err != nil {
		return err
	}
	if err := archive.Start(); err != nil {
		return err
	}
	terr := untar(r, dir)
	_, _ = io.Copy(io.Discard, r)
	if err := archive.Wait(); err != nil {
		return fmt.Errorf("git archive %s: %v: %s", short(commit), err, strings.TrimSpace(stderr.String()))
	}
	return terr
}

// libraryPackages lists the library packages of the module at dir, alone
// (GOWORK=off), by import path, each with its package name: every package
// but commands (package main), internal ones and those under cmd/.
func libraryPackages(ctx context.Context, dir string) (module string, pkgs map[string]string, err error) {
	module, err = command(ctx, dir, "go", "list", "-m")
	if err != nil {
		return "", nil, err
	}
	module = strings.TrimSpace(module)
	out, err := command(ctx, dir, "go", "list", "-f", "{{.ImportPath}} {{.Name}} {{len .GoFiles}}", "./...")
	if err != nil {
		return "", nil, err
	}
	pkgs = map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[2] == "0" || f[1] == "main" || !library(module, f[0]) {
			continue
		}
		pkgs[f[0]] = f[1]
	}
	return module, pkgs, nil
}

// library reports whether the package at path, in module, is one whose API
// the library keeps: not internal, and not under cmd/ (the command's, which
// may have been in this module once).
func library(module, path string) bool {
	rel := strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
	for _, elem := range strings.Split(rel, "/") {
		if elem == "internal" {
			return false
		}
	}
	return rel != "cmd" && !strings.HasPrefix(rel, "cmd/")
}

// apidiff returns the path of apidiff at apidiffVersion, installed with
// `go install` when GOBIN (or GOPATH/bin) lacks it or holds another version.
func apidiff(ctx context.Context) (string, error) {
	out, err := command(ctx, ".", "go", "env", "GOBIN", "GOPATH")
	if err != nil {
		return "", err
	}
	env := strings.Split(out, "\n")
	bin := strings.TrimSpace(env[0])
	if bin == "" && len(env) > 1 {
		bin = filepath.Join(filepath.SplitList(strings.TrimSpace(env[1]))[0], "bin")
	}
	tool := filepath.Join(bin, "apidiff")
	if runtime.GOOS == "windows" {
		tool += ".exe"
	}
	if v, err := command(ctx, ".", "go", "version", "-m", tool); err == nil && strings.Contains(v, "\tgolang.org/x/exp\t"+apidiffVersion+"\t") {
		return tool, nil
	}
	if _, err := command(ctx, ".", "go", "install", "golang.org/x/exp/cmd/apidiff@"+apidiffVersion); err != nil {
		return "", fmt.Errorf("installing apidiff: %w", err)
	}
	return tool, nil
}

// command runs name with args in dir, the module alone (GOWORK=off), and
// returns its standard output; its error holds what it wrote to stderr.
func command(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			return stdout.String(), fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
		}
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, msg)
	}
	return stdout.String(), nil
}

// short is a commit's abbreviated hash.
func short(commit string) string { return commit[:min(len(commit), 12)] }
