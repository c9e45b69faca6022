// Package rls measures rate-limit services that speak Envoy's RLS v3 gRPC
// protocol (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit)
// side by side: envoyproxy/ratelimit, which bench's go.mod pins as a tool
// dependency, and `sluice serve` from the working tree, both built with
// `go build` from the bench module at run time and run against the same
// redis-server (sluice also with its in-memory store), on loopback ports.
//
// The load generator (Client.Run) calls a server from Callers goroutines over
// a few shared gRPC connections with requests marshalled before the run, and
// records every call's latency; Measure adds each process's CPU time from
// /proc. cmd/rls runs the whole comparison and prints the table.
package rls

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-go/sluice/bench"
)

// The main packages cmd/rls builds from the bench module.
const (
	// EnvoyPackage is envoyproxy/ratelimit's server, pinned in bench's
	// go.mod as a tool dependency.
	EnvoyPackage = "github.com/envoyproxy/ratelimit/src/service_cmd"
	// SluicePackage is sluice's command, built in the working tree that
	// bench's go.mod replaces the sluice module with (../).
	SluicePackage = "github.com/sluice-go/sluice/cmd/sluice"
)

// benchModule is the module path of the directory the builds run in, and
// sluiceModule the one it replaces with the working tree.
const (
	benchModule  = "github.com/sluice-go/sluice/bench"
	sluiceModule = "github.com/sluice-go/sluice"
)

// ErrNoServe is returned by BuildSluice when the sluice command built from
// the working tree has no serve subcommand.
var ErrNoServe = errors.New("the sluice command of this working tree has no `serve` subcommand")

// ModuleDir returns the bench module's directory: the one holding the go.mod
// that `go env GOMOD` names from the working directory.
func ModuleDir(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside a Go module: run from the bench directory")
	}
	b, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	if !bytes.HasPrefix(b, []byte("module "+benchModule+"\n")) {
		return "", fmt.Errorf("%s is not the bench module (%s): run from the bench directory", gomod, benchModule)
	}
	return filepath.Dir(gomod), nil
}

// Build runs `go build -o out pkg` in moduleDir; the error holds go's output.
func Build(ctx context.Context, moduleDir, pkg, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = moduleDir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// BuildEnvoy builds envoyproxy/ratelimit into dir and returns the binary's path.
func BuildEnvoy(ctx context.Context, moduleDir, dir string) (string, error) {
	bin := filepath.Join(dir, "envoy-ratelimit")
	return bin, Build(ctx, moduleDir, EnvoyPackage, bin)
}

// SluiceDir returns the directory of the sluice module bench's go.mod uses
// (its replace: the working tree next to bench).
func SluiceDir(ctx context.Context, moduleDir string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", sluiceModule)
	cmd.Dir = moduleDir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w", sluiceModule, err)
	}
	d := strings.TrimSpace(string(out))
	if d == "" {
		return "", fmt.Errorf("go list -m %s: no directory (is the replace in bench's go.mod gone?)", sluiceModule)
	}
	return d, nil
}

// CommandDir is the directory in a sluice tree to build SluicePackage in:
// cmd/sluice, since the command is a module of its own (with a replace of
// the library by the tree it sits in). Building there needs no go.work, so
// it works under GOWORK=off, which bench runs with; in older trees, where
// cmd/sluice is a package of the library's module, it builds the same.
func CommandDir(tree string) string { return filepath.Join(tree, "cmd", "sluice") }

// BuildSluice builds the sluice command into dir and returns the binary's
// path, or ErrNoServe if it has no serve subcommand. It builds in the sluice
// tree bench's go.mod replaces the library with (SluiceDir), with the
// command module's own dependency versions, as a user of sluice would.
func BuildSluice(ctx context.Context, moduleDir, dir string) (string, error) {
	src, err := SluiceDir(ctx, moduleDir)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "sluice")
	if err := Build(ctx, CommandDir(src), SluicePackage, bin); err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, bin, "serve", "--help").CombinedOutput()
	if err != nil && !bytes.Contains(out, []byte("-store")) {
		return "", fmt.Errorf("%w (sluice serve --help: %v)\n%s", ErrNoServe, err, out)
	}
	return bin, nil
}

// ConfigFiles is where WriteConfig puts Config.
type ConfigFiles struct {
	RuntimeRoot string // envoyproxy/ratelimit's RUNTIME_ROOT
	Subdir      string // its RUNTIME_SUBDIRECTORY; the file is in RuntimeRoot/Subdir/config
	File        string // the YAML file itself, sluice serve's --config
}

// WriteConfig writes Config under dir in the layout envoyproxy/ratelimit
// reads (RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config/*.yaml).
func WriteConfig(dir string) (ConfigFiles, error) {
	c := ConfigFiles{RuntimeRoot: filepath.Join(dir, "runtime"), Subdir: "ratelimit"}
	cdir := filepath.Join(c.RuntimeRoot, c.Subdir, "config")
	if err := os.MkdirAll(cdir, 0o755); err != nil {
		return c, err
	}
	c.File = filepath.Join(cdir, Domain+".yaml")
	return c, os.WriteFile(c.File, []byte(Config), 0o644)
}

// Server is a rate-limit service process under test.
type Server struct {
	Name  string // "envoy" or "sluice"
	Store string // "redis" or "memory"
	Addr  string // its gRPC address
	cmd   *exec.Cmd
	log   string
	done  chan struct{}
}

// Pid returns the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// CPU returns the CPU time the server has used so far.
func (s *Server) CPU() (time.Duration, error) { return ProcessCPU(s.Pid()) }

// Log returns what the server has written to its stdout and stderr.
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.log)
	return string(b)
}

// Stop sends the server SIGTERM, and SIGKILL if it has not exited 5 s later.
func (s *Server) Stop() error {
	select {
	case <-s.done:
		return nil
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return nil
	case <-time.After(5 * time.Second):
	}
	_ = s.cmd.Process.Kill()
	select {
	case <-s.done:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("%s pid %d did not exit within 5 s of SIGKILL", s.Name, s.Pid())
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}

// start runs bin with args and env (added to this process's environment)
// writing its output to logFile, and waits until it answers ShouldRateLimit
// at grpcAddr with OK.
func start(ctx context.Context, s *Server, bin string, args, env []string, logFile string) error {
	logf, err := os.Create(logFile)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := bench.StartProcess(cmd); err != nil {
		return fmt.Errorf("start %s: %w", bin, err)
	}
	s.cmd, s.log, s.done = cmd, logFile, make(chan struct{})
	go func() { _ = cmd.Wait(); close(s.done) }()
	if err := waitReady(ctx, s); err != nil {
		_ = s.Stop()
		return fmt.Errorf("%s (%s) on %s: %w; its output:\n%s", s.Name, s.Store, s.Addr, err, s.Log())
	}
	return nil
}

// waitReady polls the server with one call until it answers OK, for at most 30 s.
func waitReady(ctx context.Context, s *Server) error {
	cc, err := grpc.NewClient("passthrough:///"+s.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	client := rlsv3.NewRateLimitServiceClient(cc)
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-s.done:
			return errors.New("exited during start-up")
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		callCtx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := client.ShouldRateLimit(callCtx, Request("u0"))
		cancel()
		if err == nil && resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("overall_code %v", resp.GetOverallCode())
			}
			return fmt.Errorf("not ready within 30 s: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// retryStart starts a server up to 3 times: a port free a moment ago may be
// taken by the time the server binds it.
func retryStart(f func() (*Server, error)) (*Server, error) {
	var err error
	for range 3 {
		var s *Server
		if s, err = f(); err == nil {
			return s, nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, err
}

// EnvoyEnv returns the environment envoyproxy/ratelimit is started with,
// apart from its ports: statsd off, warnings only, Redis over TCP at
// redisAddr, the configuration from c. Its other settings keep their
// defaults (REDIS_POOL_SIZE 10, no implicit pipelining).
func EnvoyEnv(redisAddr string, c ConfigFiles) []string {
	return []string{
		"USE_STATSD=false",
		"LOG_LEVEL=warn",
		"REDIS_SOCKET_TYPE=tcp",
		"REDIS_TYPE=SINGLE",
		"REDIS_URL=" + redisAddr,
		"RUNTIME_ROOT=" + c.RuntimeRoot,
		"RUNTIME_SUBDIRECTORY=" + c.Subdir,
		"RUNTIME_WATCH_ROOT=false",
	}
}

// StartEnvoy starts envoyproxy/ratelimit's binary bin against the
// redis-server at redisAddr with the configuration c, its gRPC, HTTP and
// debug listeners on free loopback ports, extra added last to its
// environment (KEY=VALUE), and waits until it answers. Its output goes to
// dir/envoy.log.
func StartEnvoy(ctx context.Context, bin, dir, redisAddr string, c ConfigFiles, extra []string) (*Server, error) {
	return retryStart(func() (*Server, error) {
		var ports [3]string
		for i := range ports {
			p, err := freePort()
			if err != nil {
				return nil, err
			}
			ports[i] = p
		}
		s := &Server{Name: "envoy", Store: "redis", Addr: "127.0.0.1:" + ports[0]}
		env := append(EnvoyEnv(redisAddr, c),
			"GRPC_HOST=127.0.0.1", "GRPC_PORT="+ports[0],
			"HOST=127.0.0.1", "PORT="+ports[1],
			"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+ports[2])
		env = append(env, extra...)
		return s, start(ctx, s, bin, nil, env, filepath.Join(dir, "envoy.log"))
	})
}

// SluiceArgs returns the arguments of `sluice serve` with the configuration
// file, the store (memory, redis://…) and the listen addresses.
func SluiceArgs(configFile, store, grpcAddr, httpAddr string) []string {
	return []string{"serve", "--config", configFile, "--store", store, "--grpc", grpcAddr, "--http", httpAddr}
}

// StartSluice starts `sluice serve` (the binary bin) with the configuration
// file c.File and the store (memory, redis://host:port), its gRPC and HTTP
// listeners on free loopback ports, extra added to its environment, and
// waits until it answers. Its output goes to dir/sluice-<store kind>.log.
func StartSluice(ctx context.Context, bin, dir string, c ConfigFiles, store string, extra []string) (*Server, error) {
	kind := "redis"
	if store == "memory" {
		kind = "memory"
	}
	return StartSluiceFlags(ctx, bin, dir, c, store, kind, nil, extra)
}

// StartSluiceFlags is StartSluice with flags added to `sluice serve`'s
// arguments, and kind naming the store in the Server (and its log file).
func StartSluiceFlags(ctx context.Context, bin, dir string, c ConfigFiles, store, kind string, flags, extra []string) (*Server, error) {
	return retryStart(func() (*Server, error) {
		g, err := freePort()
		if err != nil {
			return nil, err
		}
		h, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Name: "sluice", Store: kind, Addr: "127.0.0.1:" + g}
		args := append(SluiceArgs(c.File, store, s.Addr, "127.0.0.1:"+h), flags...)
		return s, start(ctx, s, bin, args, extra, filepath.Join(dir, "sluice-"+kind+".log"))
	})
}

// EnvFlag is a repeatable command-line flag of KEY=VALUE settings added to a
// server's environment (StartEnvoy's and StartSluice's extra); Set refuses
// a setting without a key or an "=".
type EnvFlag []string

// String returns the settings, space-separated.
func (e *EnvFlag) String() string { return strings.Join(*e, " ") }

// Set adds the setting kv.
func (e *EnvFlag) Set(kv string) error {
	if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
		return fmt.Errorf("environment setting %q is not KEY=VALUE", kv)
	}
	*e = append(*e, kv)
	return nil
}
