package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// sluiceBinary builds cmd/sluice once into a temporary directory (go build),
// for the tests that run the real command.
func sluiceBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the sluice binary; skipped with -short")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sluice-serve-test")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "sluice")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/sluice-go/sluice/cmd/sluice").CombinedOutput()
		if err != nil {
			buildErr = err
			binPath = string(out)
		}
	})
	if buildErr != nil {
		t.Fatalf("go build: %v\n%s", buildErr, binPath)
	}
	return binPath
}

// proc is a running `sluice serve`.
type proc struct {
	cmd        *exec.Cmd
	grpc, http string
	mu         sync.Mutex
	log        bytes.Buffer // its JSON log
	logDone    chan struct{}
	client     pb.RateLimitServiceClient
	conn       *grpc.ClientConn
	exited     chan error
}

// startProc runs the binary with args (free ports and a JSON log added) and
// waits until it serves.
func startProc(t *testing.T, args ...string) *proc {
	t.Helper()
	bin := sluiceBinary(t)
	args = append([]string{"serve", "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-format", "json"}, args...)
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, logDone: make(chan struct{}), exited: make(chan error, 1)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		defer close(p.logDone)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			p.mu.Lock()
			p.log.Write(line)
			p.log.WriteByte('\n')
			p.mu.Unlock()
			var m map[string]any
			if json.Unmarshal(line, &m) == nil && m["msg"] == "serving" {
				p.grpc, p.http = m["grpc"].(string), m["http"].(string)
				close(ready)
			}
		}
	}()
	go func() { <-p.logDone; p.exited <- cmd.Wait() }()
	select {
	case <-ready:
	case <-p.logDone:
		t.Fatalf("sluice %v exited before serving:\n%s", args, p.logText())
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("sluice %v did not serve within 60s:\n%s", args, p.logText())
	}
	p.conn, err = grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	p.client = pb.NewRateLimitServiceClient(p.conn)
	t.Cleanup(func() {
		p.conn.Close()
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

func (p *proc) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// stop sends sig and returns the calls the process said it answered and
// its exit error.
func (p *proc) stop(t *testing.T, sig syscall.Signal) (int64, error) {
	t.Helper()
	p.cmd.Process.Signal(sig)
	var err error
	select {
	case err = <-p.exited:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		t.Fatalf("no exit 30s after %v:\n%s", sig, p.logText())
	}
	var answered int64 = -1
	for _, line := range strings.Split(p.logText(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "stopped" {
			answered = int64(m["calls_answered"].(float64))
		}
	}
	return answered, err
}

func (p *proc) call(ctx context.Context, domain string, ds ...*rlv3.RateLimitDescriptor) (*pb.RateLimitResponse, error) {
	return p.client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: domain, Descriptors: ds})
}

// `sluice serve` with no flags at all starts (memory store, empty
// configuration, loopback listeners) and says so; --help lists every flag.
func TestBinaryDefaults(t *testing.T) {
	bin := sluiceBinary(t)
	out, err := exec.Command(bin, "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("serve --help: %v\n%s", err, out)
	}
	for _, f := range []string{"-config", "-store", "-grpc", "-http", "-on-store-error", "-response-headers", "-http-token", "-grpc-tls-cert", "-http-tls-client-ca", "-log-format", "-max-descriptors", "-shadow", "-quota-mode", "-response-dynamic-metadata", "-envoy-env", "-grpc-max-connection-age", "-limit-header", "-remaining-header", "-reset-header", "-shutdown-timeout", "-gomaxprocs", "-store-tls-ca", "-store-tls-cert", "-store-tls-key", "-store-tls-skip-hostname-verification", "-merge-domain-config", "-grpc-tls-client-san", "-http-tls-client-san", "-store-per-second"} {
		if !strings.Contains(string(out), f) {
			t.Errorf("--help lacks %s", f)
		}
	}
	for _, d := range []string{`(default "127.0.0.1:8081")`, `(default "127.0.0.1:8080")`, `(default "memory")`} {
		if !strings.Contains(string(out), d) {
			t.Errorf("--help lacks %s: the defaults are loopback and memory", d)
		}
	}
	p := startProc(t) // only the listen ports are chosen, so as not to collide
	if !strings.Contains(p.logText(), "serving an empty configuration") {
		t.Errorf("no word of the empty configuration in the log:\n%s", p.logText())
	}
	if !strings.HasPrefix(p.grpc, "127.0.0.1:") || !strings.HasPrefix(p.http, "127.0.0.1:") {
		t.Errorf("listeners %s %s, want loopback", p.grpc, p.http)
	}
	r, err := p.call(t.Context(), "any", desc("k=v"))
	if err != nil || codesOf(r) != "OK: OK" {
		t.Fatalf("call: %v %v", r, err)
	}
	if _, err := p.stop(t, syscall.SIGINT); err != nil {
		t.Errorf("exit after SIGINT: %v\n%s", err, p.logText())
	}
}

// --quota-mode and --response-dynamic-metadata, envoy's QUOTA_MODE and
// RESPONSE_DYNAMIC_METADATA, on the binary.
func TestBinaryEnvoyModes(t *testing.T) {
	dir := writeConfig(t, map[string]string{"gq.yaml": globalQuotaConfig, "meta.yaml": metaConfig})
	p := startProc(t, "--config", dir, "--quota-mode", "--response-dynamic-metadata")
	for i, want := range []string{"OK: OK OK", "OK: OVER_LIMIT OK"} {
		r, err := p.call(t.Context(), "gq", desc("user=a"), desc("other=x"))
		if err != nil || codesOf(r) != want {
			t.Fatalf("call %d: %v %v, want %s", i, r, err, want)
		}
	}
	r, err := p.call(t.Context(), "meta", desc("user=a"))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.DynamicMetadata.GetFields()["metadata"].GetStructValue().GetFields()["tier"].GetStringValue(); got != "gold" {
		t.Errorf("dynamic metadata %v: want user's tier gold", r.DynamicMetadata)
	}
	if _, err := p.stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("exit after SIGTERM: %v\n%s", err, p.logText())
	}
}

// SIGTERM mid-load: the process stops accepting, answers every call it
// took, and exits 0; every call it counted as answered reached its caller.
// SIGHUP mid-load reloads with no failed call.
func TestBinarySignalsUnderLoad(t *testing.T) {
	dir := writeConfig(t, map[string]string{"test.yaml": testConfig})
	p := startProc(t, "--config", dir)
	var mu sync.Mutex
	var okCalls int64
	var failed []error
	stop := load(32, func(g, _ int) bool {
		_, err := p.call(context.Background(), "test", desc("free=x"), desc("key1=g"+string(rune('a'+g%26))))
		mu.Lock()
		if err == nil {
			okCalls++
		} else {
			failed = append(failed, err)
		}
		mu.Unlock()
		return err == nil // else the server is going away
	})
	time.Sleep(300 * time.Millisecond)
	for range 3 {
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	if len(failed) > 0 {
		t.Errorf("calls failed during SIGHUP reloads: %v", failed[0])
	}
	before := okCalls
	mu.Unlock()
	answered, err := p.stop(t, syscall.SIGTERM)
	stop()
	if err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
	if strings.Count(p.logText(), "SIGHUP: reloading") != 3 {
		t.Errorf("want 3 SIGHUP reloads in the log:\n%s", p.logText())
	}
	if answered != okCalls {
		t.Errorf("the process answered %d calls, its callers received %d: calls in flight were lost", answered, okCalls)
	}
	t.Logf("%d calls before the signals, %d answered in all; %d callers saw the server go", before, okCalls, len(failed))
}
