package main

import (
	"bufio"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	yaml "go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluice-go/sluice/cmd/sluice/internal/envoytest"
	"github.com/sluice-go/sluice/cmd/sluice/internal/rlsconfig"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// repoRoot is the repository's root, two levels up from cmd/sluice.
const repoRoot = "../.."

// dockerfile is what container_test reads of the Dockerfile.
type dockerfile struct {
	build      []string // the go build line's words, its VAR=value prefix first
	workdir    string   // the WORKDIR it runs in
	final      string   // the last stage's FROM image
	user       string   // the last stage's USER
	entrypoint []string
	cmd        []string
	env        []string // the last stage's ENV, as KEY=VALUE
	volumes    []string // the last stage's VOLUMEs
	comments   []string // the comment lines, without their #
}

// readDockerfile reads path's instructions (continuation lines joined).
func readDockerfile(t *testing.T, path string) dockerfile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d dockerfile
	var lines []string
	cont := ""
	for _, l := range strings.Split(string(b), "\n") {
		if c, ok := strings.CutPrefix(strings.TrimSpace(l), "#"); ok {
			d.comments = append(d.comments, strings.TrimSpace(c))
			continue
		}
		if s, ok := strings.CutSuffix(l, "\\"); ok {
			cont += s + " "
			continue
		}
		lines = append(lines, cont+l)
		cont = ""
	}
	workdir := ""
	for _, l := range lines {
		op, arg, _ := strings.Cut(strings.TrimSpace(l), " ")
		arg = strings.TrimSpace(arg)
		switch strings.ToUpper(op) {
		case "FROM":
			d.final, _, _ = strings.Cut(arg, " ")
			d.user, d.env, d.volumes, d.entrypoint, d.cmd = "", nil, nil, nil, nil
		case "ENV":
			for _, w := range shellWords(t, arg) {
				if !strings.Contains(w, "=") {
					t.Fatalf("ENV %s: want KEY=VALUE pairs", arg)
				}
				d.env = append(d.env, w)
			}
		case "VOLUME":
			if err := json.Unmarshal([]byte(arg), &d.volumes); err != nil {
				d.volumes = append(d.volumes, strings.Fields(arg)...)
			}
		case "WORKDIR":
			workdir = arg
		case "USER":
			d.user = arg
		case "RUN":
			if strings.Contains(arg, "go build") {
				if d.build != nil {
					t.Fatalf("%s: two go build lines", path)
				}
				d.build, d.workdir = shellWords(t, arg), workdir
			}
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(arg), &d.entrypoint); err != nil {
				t.Fatalf("ENTRYPOINT %s: want the exec form (no shell in the image): %v", arg, err)
			}
		case "CMD":
			if err := json.Unmarshal([]byte(arg), &d.cmd); err != nil {
				t.Fatalf("CMD %s: want the exec form (no shell in the image): %v", arg, err)
			}
		}
	}
	if d.build == nil {
		t.Fatalf("%s: no RUN … go build line", path)
	}
	return d
}

// shellWords splits a simple shell command into words: spaces separate,
// quotes group; anything else a shell would read (&&, $, ;) fails the
// test, so that the Dockerfile's line stays one command this test can run.
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	if strings.ContainsAny(s, "$;&|`<>()") {
		t.Fatalf("RUN %s: want one plain command (no shell syntax) so that the test runs exactly it", s)
	}
	var words []string
	var cur strings.Builder
	quote, in := rune(0), false
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '"' || r == '\'':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// buildAsDockerfile runs the Dockerfile's go build line in the directory
// of this tree that its WORKDIR is in the image (COPY . /src), with its
// VAR=value settings, writing the binary into dir instead of its -o path.
// Unless exact, it leaves out the settings that make the go command
// compile every package again rather than reuse what the tests' own build
// compiled (CGO_ENABLED=0, -trimpath): the binary then serves as the
// image's does, but is not static.
func buildAsDockerfile(t *testing.T, d dockerfile, dir string, exact bool) string {
	t.Helper()
	rel, ok := strings.CutPrefix(d.workdir, "/src")
	if !ok {
		t.Fatalf("the go build runs in WORKDIR %q: want one under /src, where the tree is copied", d.workdir)
	}
	var env []string
	words := d.build
	for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
		env = append(env, words[0])
		words = words[1:]
	}
	if len(words) < 2 || words[0] != "go" || words[1] != "build" {
		t.Fatalf("RUN %q: want [VAR=value …] go build …", d.build)
	}
	args := append([]string(nil), words[1:]...)
	if !exact {
		env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "CGO_ENABLED=") })
		args = slices.DeleteFunc(args, func(a string) bool { return a == "-trimpath" })
	}
	bin := filepath.Join(dir, "sluice")
	outs := 0
	for i, a := range args {
		if a == "-o" && i+1 < len(args) {
			args[i+1], outs = bin, outs+1
		}
	}
	if outs != 1 {
		t.Fatalf("RUN %q: want one -o", d.build)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = filepath.Join(repoRoot, rel)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v in %s: %v\n%s", d.build, cmd.Dir, err, out)
	}
	return bin
}

// The binary built exactly as the Dockerfile builds it is static, and each
// `docker run … sluice` line of the docs works as written when run as the
// image runs it (runAsImage): the image's defaults alone, the README's
// line, docs/serve.md's lines over Redis and with --envoy-env. The image's
// last stage has no shell, runs as a user other than root, and its
// default rules path is a VOLUME.
func TestContainerBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	d := readDockerfile(t, filepath.Join(repoRoot, "Dockerfile"))
	if !strings.HasPrefix(d.final, "gcr.io/distroless/static") && d.final != "scratch" {
		t.Errorf("the image is %s: want distroless/static or scratch (no shell, no libc)", d.final)
	}
	if d.user == "" || d.user == "root" || strings.HasPrefix(d.user, "0") {
		t.Errorf("the image runs as %q: want a user other than root", d.user)
	}
	if len(d.entrypoint) < 2 || d.entrypoint[1] != "serve" {
		t.Fatalf("ENTRYPOINT %q: want the binary, then serve", d.entrypoint)
	}
	for _, kv := range d.env {
		if k, v, _ := strings.Cut(kv, "="); k == "SLUICE_CONFIG" && !slices.Contains(d.volumes, v) {
			t.Errorf("the image reads its rules from %s, which is not one of its VOLUMEs %q: `docker run` without -v finds no such directory", v, d.volumes)
		}
	}
	lines := dockerRunLines(t)
	if len(lines) < 3 {
		t.Fatalf("%d docker run lines in the README, docs/serve.md and the Dockerfile: want the README's, the Dockerfile's and serve.md's", len(lines))
	}
	exact := testenv.Long()
	bin := buildAsDockerfile(t, d, t.TempDir(), exact)
	if !exact {
		t.Logf("built with the Dockerfile's go build line less its CGO_ENABLED=0 and -trimpath, which recompile every package (a minute and more on two cores); %s=1 builds it exactly and checks that the binary is static", testenv.LongEnv)
	} else {
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		libs, _ := f.ImportedLibraries()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				libs = append(libs, "an interpreter")
			}
		}
		f.Close()
		if len(libs) > 0 {
			t.Fatalf("the binary is not static: it needs %v", libs)
		}
	}

	t.Run("defaults", func(t *testing.T) { runAsImage(t, bin, d, &dockerRun{src: "docker run sluice", image: "sluice"}, nil) })
	for _, l := range lines {
		if l.image != "sluice" {
			continue
		}
		t.Run(l.src, func(t *testing.T) { runAsImage(t, bin, d, l, lines) })
	}
}

// dockerRun is a `docker run` line of the docs, as docker reads it.
type dockerRun struct {
	src           string            // the line, as the docs give it
	ports         []string          // the container ports -p publishes
	volumes       map[string]string // -v: container path → host path
	env           []string          // -e KEY=VALUE
	network, name string
	image         string
	args          []string // after the image
}

// dockerRunLines returns the `docker run` lines of the README's and
// docs/serve.md's shell blocks and of the Dockerfile's comments, split as a
// shell splits them ($PWD is the repository's root).
func dockerRunLines(t *testing.T) []*dockerRun {
	t.Helper()
	var srcs []string
	for _, doc := range []string{"README.md", filepath.Join("docs", "serve.md")} {
		b, err := os.ReadFile(filepath.Join(repoRoot, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile("(?ms)^```sh\n(.*?)^```$").FindAllStringSubmatch(string(b), -1) {
			srcs = append(srcs, joinContinued(strings.Split(m[1], "\n"))...)
		}
	}
	srcs = append(srcs, joinContinued(readDockerfile(t, filepath.Join(repoRoot, "Dockerfile")).comments)...)
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	var out []*dockerRun
	for _, src := range srcs {
		if !strings.HasPrefix(src, "docker run ") {
			continue
		}
		if i := strings.Index(src, " #"); i >= 0 {
			src = strings.TrimSpace(src[:i])
		}
		words := shellWords(t, strings.ReplaceAll(strings.ReplaceAll(src, `"$PWD`, `"`+root), " $PWD", " "+root))
		r := &dockerRun{src: src, volumes: map[string]string{}}
		for i := 2; i < len(words); i++ {
			w := words[i]
			value := func() string {
				if i+1 == len(words) {
					t.Fatalf("%s: %s wants a value", src, w)
				}
				i++
				return words[i]
			}
			switch w {
			case "--rm", "-d", "--detach", "-it":
			case "-p", "--publish":
				p := value()
				r.ports = append(r.ports, p[strings.LastIndex(p, ":")+1:])
			case "-v", "--volume":
				host, ctr, _ := strings.Cut(value(), ":")
				ctr, _, _ = strings.Cut(ctr, ":")
				r.volumes[ctr] = host
			case "-e", "--env":
				r.env = append(r.env, value())
			case "--network":
				r.network = value()
			case "--name":
				r.name = value()
			default:
				if strings.HasPrefix(w, "-") {
					t.Fatalf("%s: this test does not know docker run's %s: teach it", src, w)
				}
				r.image, r.args = w, words[i+1:]
				i = len(words)
			}
		}
		out = append(out, r)
	}
	return out
}

// joinContinued joins the lines that end in a backslash to the next.
func joinContinued(lines []string) []string {
	var out []string
	cont := ""
	for _, l := range lines {
		if s, ok := strings.CutSuffix(strings.TrimSpace(l), "\\"); ok {
			cont += s + " "
			continue
		}
		out = append(out, strings.TrimSpace(cont+l))
		cont = ""
	}
	return out
}

// runAsImage runs the docker run line r as the image d would: the
// ENTRYPOINT's arguments, then r's (or the CMD), in the ENV with r's -e,
// each volume of r at its host directory (and each other VOLUME empty)
// under a directory that stands for the container's root, a store host
// that names another line's container on r's network replaced by a test
// Redis. `serve --check` must find the listeners on every interface, on
// ports r publishes, and the rules loaded; started, with its ports moved
// to free loopback ones, it must answer /healthcheck and an RLS call as
// its rules say, and stop cleanly on SIGTERM.
func runAsImage(t *testing.T, bin string, d dockerfile, r *dockerRun, all []*dockerRun) {
	ctrRoot := t.TempDir()
	for _, v := range d.volumes {
		if err := os.MkdirAll(filepath.Join(ctrRoot, v), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for ctr, host := range r.volumes {
		p := filepath.Join(ctrRoot, ctr)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		os.Remove(p) // a VOLUME's empty directory, now mounted over
		if err := os.Symlink(host, p); err != nil {
			t.Fatal(err)
		}
	}
	// What a process in the container reads as an absolute path, it reads
	// under ctrRoot here.
	inRoot := func(v string) string {
		if strings.HasPrefix(v, "/") {
			return filepath.Join(ctrRoot, v)
		}
		return v
	}
	redisHost := regexp.MustCompile(`^(redis://|rediss://)?([a-z][a-z0-9-]*):(\d+)(/.*)?$`)
	var testRedis string
	rehost := func(v string) string {
		m := redisHost.FindStringSubmatch(v)
		if m == nil || m[2] == "localhost" {
			return v
		}
		found := false
		for _, o := range all {
			found = found || (o.name == m[2] && o.network == r.network && r.network != "" && o.image != "sluice")
		}
		if !found {
			t.Fatalf("%s: the store %s is no container of a docs' docker run line on the network %q: docker could not resolve it", r.src, v, r.network)
		}
		if testRedis == "" {
			testRedis = redistest.Standalone(t).Addr()
		}
		return m[1] + testRedis + m[4]
	}
	args := append([]string(nil), d.entrypoint[1:]...)
	user := r.args
	if len(user) == 0 {
		user = d.cmd
	}
	for _, a := range user {
		if k, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(k, "-") {
			a = k + "=" + rehost(inRoot(v))
		} else {
			a = rehost(inRoot(a))
		}
		args = append(args, a)
	}
	env := []string{}
	for _, kv := range append(append([]string(nil), d.env...), r.env...) {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, k+"="+rehost(inRoot(v)))
	}
	if slices.Contains(args, "--envoy-env") && !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "RUNTIME_ROOT=") }) {
		// envoy's default runtime root, in the container's root here.
		env = append(env, "RUNTIME_ROOT="+inRoot("/srv/runtime_data/current"))
	}
	run := func(extra ...string) *exec.Cmd {
		cmd := exec.Command(bin, append(append([]string(nil), args...), extra...)...)
		cmd.Dir, cmd.Env = t.TempDir(), env
		return cmd
	}

	out, err := run("--check").CombinedOutput()
	if err != nil {
		t.Fatalf("%s: serve %q --check: %v\n%s", r.src, args[1:], err, out)
	}
	m := regexp.MustCompile(`(?m)^configuration OK: \d+ domains, (\d+) rules.*\nserve would listen on gRPC (\S+) and HTTP (\S+), over`).FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("%s: --check said\n%s", r.src, out)
	}
	rules := m[1] != "0"
	if want := len(r.volumes) > 0; rules != want {
		t.Errorf("%s: %s rules loaded; want some exactly when the line mounts them", r.src, m[1])
	}
	for _, addr := range m[2:] {
		host, port, err := net.SplitHostPort(addr)
		if err != nil || (host != "0.0.0.0" && host != "" && host != "::") {
			t.Errorf("%s: serve would listen on %s: another container, or the host through -p, cannot reach it; want every interface", r.src, addr)
		}
		if r.image == "sluice" && r.src != "docker run sluice" && !slices.Contains(r.ports, port) {
			t.Errorf("%s: serve would listen on port %s, which the line does not publish (-p %q)", r.src, port, r.ports)
		}
	}

	cmd := run("--grpc=127.0.0.1:0", "--http=127.0.0.1:0", "--log-level=info")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		done <- cmd.Wait()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	serving := regexp.MustCompile(`msg="?serving"? grpc=(\S+) http=(\S+)`)
	var grpcAddr, httpAddr string
	var log []string
	for deadline := time.After(60 * time.Second); grpcAddr == ""; {
		select {
		case l := <-lines:
			log = append(log, l)
			if m := serving.FindStringSubmatch(l); m != nil {
				grpcAddr, httpAddr = m[1], m[2]
			}
		case err := <-done:
			t.Fatalf("exited: %v\n%s", err, strings.Join(log, "\n"))
		case <-deadline:
			t.Fatalf("no serving line:\n%s", strings.Join(log, "\n"))
		}
	}
	resp, err := http.Get("http://" + httpAddr + "/healthcheck")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "OK" {
		t.Fatalf("/healthcheck: %d %q", resp.StatusCode, body)
	}
	cc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp2, err := pb.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "edge",
		Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "api_key", Value: "alice"}}}}})
	if err != nil || resp2.OverallCode != pb.RateLimitResponse_OK || len(resp2.Statuses) != 1 || (resp2.Statuses[0].CurrentLimit != nil) != rules {
		t.Fatalf("ShouldRateLimit: %v %v; want OK, with the rule's limit exactly when rules are mounted", resp2, err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("still running 30 s after SIGTERM")
	}
}

// .dockerignore leaves in the build context every file git tracks: one it
// dropped (bench/ and .ci/ once were) is a deletion to the build's git, and
// go build stamped the image's binary "+dirty" (`sluice --version`).
func TestDockerignore(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git to list the tracked files")
	}
	cmd := exec.Command(git, "ls-files", "-z")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("git ls-files: %v (not a git checkout?)", err)
	}
	b, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, l)
		}
	}
	for _, c := range []struct {
		patterns []string
		path     string
		want     bool
	}{
		{[]string{"bench"}, "bench/go.mod", true},
		{[]string{"/bench"}, "bench/cmd/rls/main.go", true},
		{[]string{"**/*.test"}, "cmd/sluice/serve.test", true},
		{[]string{"/sluice"}, "sluice", true},
		{[]string{"/sluice"}, "cmd/sluice/main.go", false},
		{[]string{".ci"}, ".ci/run", true},
		{[]string{"bench", "!bench/go.mod"}, "bench/go.mod", false},
		{[]string{"*.md"}, "docs/serve.md", false},
	} {
		if got := dockerignored(c.patterns, c.path); got != c.want {
			t.Fatalf("dockerignored(%q, %s) = %v, want %v: the matcher is wrong", c.patterns, c.path, got, c.want)
		}
	}
	for _, f := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if dockerignored(patterns, f) {
			t.Errorf(".dockerignore drops %s, which git tracks: the image's build sees it deleted and stamps its binary +dirty", f)
		}
	}
}

// dockerignored reports whether .dockerignore's patterns keep path out of
// the build context, as docker matches them: filepath.Match's syntax and
// **, the leading / dropped, a pattern that matches a directory matching
// what is in it, the last matching pattern winning and ! re-including.
func dockerignored(patterns []string, path string) bool {
	out := false
	for _, p := range patterns {
		include := strings.HasPrefix(p, "!")
		p = filepath.Clean(strings.TrimPrefix(strings.TrimPrefix(p, "!"), "/"))
		re := "^"
		for i := 0; i < len(p); i++ {
			switch c := p[i]; {
			case strings.HasPrefix(p[i:], "**/"):
				re += "(.*/)?"
				i += 2
			case strings.HasPrefix(p[i:], "**"):
				re += ".*"
				i++
			case c == '*':
				re += "[^/]*"
			case c == '?':
				re += "[^/]"
			default:
				re += regexp.QuoteMeta(string(c))
			}
		}
		if regexp.MustCompile(re + "(/.*)?$").MatchString(path) {
			out = !include
		}
	}
	return out
}

// readYAML reads path as YAML into v.
func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// The compose example's parts agree: Envoy's configuration is valid
// against Envoy's own protos (every typed_config too), its sluice cluster
// is where compose's sluice listens, its filter's domain is the rules'
// and each descriptor its actions send has a rule; the rules mounted into
// sluice load.
func TestComposeExample(t *testing.T) {
	dir := filepath.Join(repoRoot, "deploy", "compose")
	var compose struct {
		Services map[string]struct {
			Build   struct{ Context string }
			Command []string
			Volumes []string
		}
	}
	readYAML(t, filepath.Join(dir, "compose.yaml"), &compose)
	sl, ok := compose.Services["sluice"]
	if !ok {
		t.Fatal("compose.yaml has no sluice service")
	}
	if _, err := os.Stat(filepath.Join(dir, sl.Build.Context, "Dockerfile")); err != nil {
		t.Fatalf("sluice's build context %s: %v", sl.Build.Context, err)
	}
	flags := map[string]string{}
	for _, a := range sl.Command {
		k, v, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		flags[k] = v
	}
	rulesDir := ""
	for _, v := range sl.Volumes {
		src, dst, _ := strings.Cut(v, ":")
		if dst, _, _ = strings.Cut(dst, ":"); dst == flags["config"] {
			rulesDir = filepath.Join(dir, src)
		}
	}
	if rulesDir == "" {
		t.Fatalf("--config=%s is not a volume of the sluice service", flags["config"])
	}
	cfg, err := rlsconfig.Load(rulesDir)
	if err != nil {
		t.Fatal(err)
	}

	boot, err := envoytest.Bootstrap(filepath.Join(dir, "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	_, grpcPort, _ := strings.Cut(flags["grpc"], ":")
	var cluster string
	for _, c := range boot.StaticResources.Clusters {
		if c.Name != "sluice" {
			continue
		}
		sa := c.LoadAssignment.Endpoints[0].LbEndpoints[0].GetEndpoint().Address.GetSocketAddress()
		cluster = fmt.Sprintf("%s:%d", sa.Address, sa.GetPortValue())
	}
	if want := "sluice:" + grpcPort; cluster != want {
		t.Errorf("Envoy's sluice cluster is %q: compose's sluice listens on %s", cluster, want)
	}
	js, _ := protojson.Marshal(boot)
	var flat map[string]any
	_ = json.Unmarshal(js, &flat)
	domains := map[string]bool{}
	keys := map[string]bool{}
	walkJSON(flat, func(k string, v any) {
		switch m, _ := v.(map[string]any); k {
		case "domain":
			if s, ok := v.(string); ok {
				domains[s] = true
			}
		case "requestHeaders":
			keys[m["descriptorKey"].(string)] = true
		case "remoteAddress":
			keys["remote_address"] = true
		}
	})
	if len(domains) != 1 || len(keys) == 0 {
		t.Fatalf("envoy.yaml: domains %v, descriptor keys %v", domains, keys)
	}
	for d := range domains {
		for k := range keys {
			if r := cfg.Resolve(d, [][]rlsconfig.Entry{{{Key: k, Value: "x"}}}); len(r) != 1 || r[0] == nil {
				t.Errorf("Envoy sends %s in domain %s: no rule in %s", k, d, rulesDir)
			}
		}
	}
}

// walkJSON calls f with every key and value of v, depth first.
func walkJSON(v any, f func(string, any)) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			f(k, x)
			walkJSON(x, f)
		}
	case []any:
		for _, x := range v {
			walkJSON(x, f)
		}
	}
}
