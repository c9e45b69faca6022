package main

import (
	"bufio"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	yaml "go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluice-go/sluice/cmd/sluice/internal/rlsconfig"
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
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
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
			d.user = ""
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
func buildAsDockerfile(t *testing.T, d dockerfile, dir string) string {
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

// The binary built exactly as the Dockerfile builds it is static, and
// started as the image starts it (its ENTRYPOINT and CMD, the listeners
// moved to free loopback ports) from an empty directory with an empty
// environment, it serves: /healthcheck, an RLS call, a clean stop. The
// image's last stage has no shell and runs as a user other than root.
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
	bin := buildAsDockerfile(t, d, t.TempDir())

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

	args := append(append(append([]string(nil), d.entrypoint[1:]...), d.cmd...), "--grpc=127.0.0.1:0", "--http=127.0.0.1:0")
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Env = t.TempDir(), []string{}
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
	serving := regexp.MustCompile(`msg=serving grpc=(\S+) http=(\S+)`)
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
	r, err := pb.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "edge",
		Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}}}})
	if err != nil || r.OverallCode != pb.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit: %v %v", r, err)
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

	var raw any
	readYAML(t, filepath.Join(dir, "envoy.yaml"), &raw)
	js, err := json.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	var boot bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &boot); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	if err := validateAll(&boot); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
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
	js, _ = protojson.Marshal(&boot)
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

// validateAll runs m's protoc-gen-validate rules and those of every
// message packed in an Any inside it (typed_config), which its own rules
// do not reach.
func validateAll(m proto.Message) error {
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			return err
		}
	}
	var err error
	var walk func(protoreflect.Message)
	walk = func(pm protoreflect.Message) {
		pm.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
				return true
			}
			each := func(x protoreflect.Value) {
				if a, ok := x.Message().Interface().(*anypb.Any); ok {
					inner, e := a.UnmarshalNew()
					if e == nil {
						e = validateAll(inner)
					}
					err = errors.Join(err, e)
					return
				}
				walk(x.Message())
			}
			switch {
			case fd.IsList():
				for i := range v.List().Len() {
					each(v.List().Get(i))
				}
			case fd.IsMap():
				if fd.MapValue().Kind() == protoreflect.MessageKind {
					v.Map().Range(func(_ protoreflect.MapKey, x protoreflect.Value) bool { each(x); return true })
				}
			default:
				each(v)
			}
			return true
		})
	}
	walk(m.ProtoReflect())
	return err
}
