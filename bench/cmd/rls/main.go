// Command rls compares rate-limit services that speak Envoy's RLS v3 gRPC
// protocol under the same load: envoyproxy/ratelimit (pinned in bench's
// go.mod as a tool dependency) over Redis, and `sluice serve` from the
// working tree over the same Redis and over its in-memory store.
//
// Usage, from the bench directory:
//
//	go run ./cmd/rls [-duration 20s | -calls N] [-warmup 2s] [-rounds 1] [-callers 64] [-conns 4]
//	                 [-client h2|grpc|h2,grpc] [-servers envoy,sluice-redis,sluice-memory]
//	                 [-envoy-env K=V]... [-sluice-env K=V]... [-cpuprofile FILE]
//	go run ./cmd/rls -hot [-slice-life 1s] [-duration 20s] [-rounds 1] [-servers envoy,sluice-memory,sluice-slices]
//	go run ./cmd/rls -smoke [-hot]   # seconds: does it still run? (CI)
//
// It builds both servers with `go build` into a temporary directory, starts
// a redis-server on a free loopback port (or uses the one SLUICE_BENCH_REDIS
// names), writes one configuration file both load (rls.Config), starts the
// servers on free loopback ports, checks each applies it (rls.Verify), and
// then, round by round, runs the load against each server in turn
// (FLUSHALL before each), with each load generator -client names (h2, the
// default, speaks HTTP/2 itself; grpc calls through grpc-go), reading the CPU time of the server, the
// redis-server and this process from /proc before and after. It prints a
// Markdown table to stdout: calls/s, the over-limit share, p50/p99/p999
// latency, CPU µs per call of each process, and the ratios to envoy, then
// issue 12's targets. Progress goes to stderr.
//
// With -hot every call carries one hot descriptor (the value u0, 1,000,000/s:
// above demand) instead of the 10,000 values, and the servers are, unless
// -servers names others, envoyproxy/ratelimit, sluice serve in memory and
// sluice serve over Redis with --store-slices (-slice-life; the server
// "sluice-slices", which -servers also offers without -hot). Redis's
// counters are reset after each warm-up, and the table adds the commands
// Redis ran per 100 calls and each server's CPU per call against sluice's
// in memory: issue 24's target for a hot descriptor.
//
// A server that cannot be built (envoyproxy/ratelimit offline without the
// module cache, a working tree whose sluice has no serve command) is left
// out with a message; with neither, it exits with status 1. With -smoke
// (what CI runs, a check that the command still works, not a measurement:
// -calls 2000 -warmup 200ms -rounds 1 unless given) one that cannot be
// built is an error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-go/sluice/bench"
	"github.com/sluice-go/sluice/bench/rls"
)

type config struct {
	duration, warmup time.Duration
	calls            int64
	rounds           int
	callers, conns   int
	clients          []rls.Generator
	servers          []string
	envoyEnv         []string
	sluiceEnv        []string
	keep             bool
	cpuprofile       string
	hot              bool          // one hot descriptor (hot.go)
	smoke            bool          // -smoke: brief, and every server must build
	sliceLife        time.Duration // sluice-slices' --store-slices
}

// allServers are the servers run by default, knownServers those -servers
// takes.
var (
	allServers   = []string{"envoy", "sluice-redis", "sluice-memory"}
	knownServers = append(slices.Clone(allServers), "sluice-slices")
)

func parseFlags(args []string) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("rls", flag.ContinueOnError)
	fs.DurationVar(&c.duration, "duration", 20*time.Second, "measured time per server and round")
	fs.Int64Var(&c.calls, "calls", 0, "measured calls per server and round, instead of -duration")
	fs.DurationVar(&c.warmup, "warmup", 2*time.Second, "unmeasured load before each measured run")
	fs.IntVar(&c.rounds, "rounds", 1, "rounds; each runs every server once, in turn")
	fs.IntVar(&c.callers, "callers", rls.Callers, "concurrent callers")
	fs.IntVar(&c.conns, "conns", 4, "connections (HTTP/2, gRPC) the callers share")
	clients := fs.String("client", string(rls.H2), "the load generators, comma-separated: h2 (HTTP/2 frames written directly) and/or grpc (grpc-go's client)")
	servers := fs.String("servers", strings.Join(allServers, ","), "the servers to run, from "+strings.Join(allServers, ","))
	fs.Var((*rls.EnvFlag)(&c.envoyEnv), "envoy-env", "KEY=VALUE added to envoyproxy/ratelimit's environment (repeatable)")
	fs.Var((*rls.EnvFlag)(&c.sluiceEnv), "sluice-env", "KEY=VALUE added to sluice serve's environment (repeatable)")
	fs.BoolVar(&c.keep, "keep", false, "keep the temporary directory (binaries, config, server logs)")
	fs.StringVar(&c.cpuprofile, "cpuprofile", "", "write a CPU profile of the load generator (this process) over the measured runs to `file`")
	fs.BoolVar(&c.hot, "hot", false, "one hot descriptor (u0, 1,000,000/s) instead of 10,000 values, the servers "+strings.Join(hotServers, ",")+" unless -servers names others; adds Redis commands per 100 calls and CPU per call ÷ sluice in memory")
	fs.DurationVar(&c.sliceLife, "slice-life", time.Second, "the --store-slices of the server sluice-slices: a slice's life")
	fs.BoolVar(&c.smoke, "smoke", false, "a run of seconds that checks the command still works, not a measurement (CI runs it): -calls 2000 -warmup 200ms -rounds 1 unless given, and a server that does not build is an error")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if c.smoke {
		for name, v := range map[string]string{"calls": "2000", "warmup": "200ms", "rounds": "1"} {
			if !flagSet(fs, name) {
				_ = fs.Set(name, v)
			}
		}
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.duration <= 0 && c.calls <= 0 {
		return nil, errors.New("-duration or -calls must be positive")
	}
	if c.rounds < 1 || c.callers < 1 || c.conns < 1 || c.warmup < 0 || c.sliceLife <= 0 {
		return nil, errors.New("-rounds, -callers and -conns must be at least 1, -warmup not negative, -slice-life positive")
	}
	for g := range strings.SplitSeq(*clients, ",") {
		if !slices.Contains(rls.Generators, rls.Generator(g)) {
			return nil, fmt.Errorf("-client: unknown load generator %q (want h2, grpc or both)", g)
		}
		if !slices.Contains(c.clients, rls.Generator(g)) {
			c.clients = append(c.clients, rls.Generator(g))
		}
	}
	if c.hot && !flagSet(fs, "servers") {
		*servers = strings.Join(hotServers, ",")
	}
	for s := range strings.SplitSeq(*servers, ",") {
		if !slices.Contains(knownServers, s) {
			return nil, fmt.Errorf("-servers: unknown server %q (want some of %s)", s, strings.Join(knownServers, ","))
		}
		c.servers = append(c.servers, s)
	}
	return c, nil
}

func main() {
	c, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "rls:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, c)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "rls:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, "rls: "+format+"\n", args...) }

func run(ctx context.Context, c *config) (err error) {
	modDir, err := rls.ModuleDir(ctx)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "sluice-rls-")
	if err != nil {
		return err
	}
	if c.keep {
		logf("keeping %s", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	bins, err := build(ctx, c, modDir, dir)
	if err != nil {
		return err
	}

	rs, err := bench.StartRedis()
	if err != nil {
		return err
	}
	defer func() {
		if e := rs.Stop(); err == nil {
			err = e
		}
	}()
	logf("redis-server on %s (pid %d)", rs.Addr, rs.Pid())
	files, err := rls.WriteConfig(dir)
	if err != nil {
		return err
	}

	var servers []*rls.Server
	defer func() {
		for _, s := range servers {
			if e := s.Stop(); err == nil {
				err = e
			}
		}
	}()
	if err := start(ctx, c, bins, dir, rs.Addr, files, &servers); err != nil {
		return err
	}

	if c.cpuprofile != "" {
		f, err := os.Create(c.cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	r := results{load1: loadAvg()}
	if r.total, r.rounds, err = measure(ctx, c, rs, servers); err != nil {
		return err
	}
	r.load2 = loadAvg()
	if c.hot {
		reportHot(ctx, c, modDir, rs.Addr, files, &r)
	} else {
		report(ctx, c, modDir, rs.Addr, files, &r)
	}
	return nil
}

// binaries are the servers' binaries that were built: "" for a server
// left out.
type binaries struct{ envoy, sluice string }

// build builds the servers c asks for into dir; one that does not build
// is left out with a message, and with none it is an error.
func build(ctx context.Context, c *config, modDir, dir string) (binaries, error) {
	var b binaries
	var err error
	if c.want("envoy") {
		logf("building %s", rls.EnvoyPackage)
		if b.envoy, err = rls.BuildEnvoy(ctx, modDir, dir); err != nil {
			if c.smoke {
				return b, fmt.Errorf("-smoke: envoyproxy/ratelimit does not build: %w", err)
			}
			logf("SKIPPING envoyproxy/ratelimit: it does not build here (offline without the module cache?): %v", err)
			b.envoy = ""
		}
	}
	if c.want("sluice-redis") || c.want("sluice-memory") || c.want("sluice-slices") {
		logf("building %s", rls.SluicePackage)
		if b.sluice, err = rls.BuildSluice(ctx, modDir, dir); err != nil {
			if c.smoke {
				return b, fmt.Errorf("-smoke: sluice serve does not build: %w", err)
			}
			logf("SKIPPING sluice serve: %v", err)
			b.sluice = ""
		}
	}
	if b.envoy == "" && b.sluice == "" {
		return b, errors.New("no server to measure")
	}
	return b, nil
}

// want reports whether -servers names server.
func (c *config) want(server string) bool { return slices.Contains(c.servers, server) }

// start starts the servers built, over the Redis at redisAddr (and
// sluice's memory store), appending each to *servers as it starts, so that
// the caller stops every one started, and checks each applies the
// configuration.
func start(ctx context.Context, c *config, bins binaries, dir, redisAddr string, files rls.ConfigFiles, servers *[]*rls.Server) error {
	add := func(s *rls.Server, err error) error {
		if err != nil {
			return err
		}
		*servers = append(*servers, s)
		cl, err := rls.Dial(s.Addr, 1)
		if err != nil {
			return err
		}
		defer cl.Close()
		if err := rls.Verify(ctx, cl); err != nil {
			return fmt.Errorf("%s (%s) does not apply the configuration: %w", s.Name, s.Store, err)
		}
		logf("%s (%s) on %s (pid %d) applies the configuration", s.Name, s.Store, s.Addr, s.Pid())
		return nil
	}
	if bins.envoy != "" {
		if err := add(rls.StartEnvoy(ctx, bins.envoy, dir, redisAddr, files, c.envoyEnv)); err != nil {
			return err
		}
	}
	if bins.sluice != "" && c.want("sluice-redis") {
		if err := add(rls.StartSluice(ctx, bins.sluice, dir, files, "redis://"+redisAddr, c.sluiceEnv)); err != nil {
			return err
		}
	}
	if bins.sluice != "" && c.want("sluice-memory") {
		if err := add(rls.StartSluice(ctx, bins.sluice, dir, files, "memory", c.sluiceEnv)); err != nil {
			return err
		}
	}
	if bins.sluice != "" && c.want("sluice-slices") {
		flags := []string{"--store-slices", c.sliceLife.String()}
		if err := add(rls.StartSluiceFlags(ctx, bins.sluice, dir, files, "redis://"+redisAddr, slicesStore, flags, c.sluiceEnv)); err != nil {
			return err
		}
	}
	return nil
}

// results are a run's measurements: per load generator and server, added
// up over the rounds, and each round's; and the load average before and
// after.
type results struct {
	total        []*rls.Measurement
	rounds       [][]*rls.Measurement
	load1, load2 string
}

// measure runs the rounds: in each, every load generator against every
// server in turn, Redis flushed before each.
func measure(ctx context.Context, c *config, rs *bench.RedisServer, servers []*rls.Server) (total []*rls.Measurement, rounds [][]*rls.Measurement, err error) {
	total = make([]*rls.Measurement, len(c.clients)*len(servers))
	for round := 1; round <= c.rounds; round++ {
		rounds = append(rounds, nil)
		for gi, g := range c.clients {
			o := rls.Options{Generator: g, Callers: c.callers, Conns: c.conns, Duration: c.duration, Calls: c.calls}
			for i, s := range servers {
				if err := rls.FlushRedis(ctx, rs.Addr); err != nil {
					return nil, nil, err
				}
				var m *rls.Measurement
				var err error
				if c.hot {
					m, err = measureHot(ctx, c, rs, s, o)
				} else {
					m, err = rls.Measure(ctx, s, rs.Pid(), o, c.warmup)
				}
				if err != nil {
					return nil, nil, fmt.Errorf("%s (%s), load generator %s: %w", s.Name, s.Store, g, err)
				}
				logf("round %d %s (%s), %s: %.0f calls/s, p99 %v, %d errors, client CPU %s µs/call", round, s.Name, s.Store, g,
					m.Rate(), m.Hist.Quantile(0.99), m.Errors, perCall(m, m.ClientCPU))
				if m.FirstErr != nil {
					logf("  first error: %v", m.FirstErr)
				}
				rounds[round-1] = append(rounds[round-1], m)
				total[gi*len(servers)+i] = merge(total[gi*len(servers)+i], m)
			}
		}
	}
	return total, rounds, nil
}

// report prints the results as Markdown on stdout.
func report(ctx context.Context, c *config, modDir, redisAddr string, files rls.ConfigFiles, r *results) {
	fmt.Printf("# RLS v3 services side by side\n\n")
	fmt.Printf("`go run ./cmd/rls %s`: load generator %s, %d callers over %d HTTP/2 connections, %d descriptor values (one call in %d to the hot value, %d per second), %s per server and round, %d round(s), %v warm-up; %s/%s, %d CPUs, GOMAXPROCS %d; load average %s before, %s after.\n\n",
		strings.Join(os.Args[1:], " "), generators(c.clients), c.callers, c.conns, rls.Keys, rls.HotEvery+1, rls.HotLimit, runLength(c), c.rounds, c.warmup,
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), r.load1, r.load2)
	rls.Table(os.Stdout, r.total)
	fmt.Println()
	if c.rounds > 1 {
		fmt.Printf("Each round alone (the table above adds them up):\n\n")
		fmt.Println("| round | server | store | load generator | calls/s | errors | p50 | p99 | server CPU µs/call | client CPU µs/call |")
		fmt.Println("| --: | --- | --- | --- | --: | --: | --: | --: | --: | --: |")
		for i, row := range r.rounds {
			for _, m := range row {
				fmt.Printf("| %d | %s | %s | %s | %.0f | %d | %.3f ms | %.3f ms | %s | %s |\n", i+1, m.Name, m.Store, m.Generator, m.Rate(), m.Errors,
					ms(m.Hist.Quantile(0.5)), ms(m.Hist.Quantile(0.99)), perCall(m, m.ServerCPU), perCall(m, m.ClientCPU))
			}
		}
		fmt.Println()
	}
	fmt.Printf("envoyproxy/ratelimit: %s, environment %s (defaults otherwise).\n", moduleVersion(ctx, modDir, "github.com/envoyproxy/ratelimit"),
		strings.Join(append(rls.EnvoyEnv(redisAddr, files), c.envoyEnv...), " "))
	fmt.Printf("sluice: `sluice %s`%s.\n", strings.Join(rls.SluiceArgs(files.File, "redis://"+redisAddr+" | memory", "127.0.0.1:P", "127.0.0.1:Q"), " "), envSuffix(c.sluiceEnv))
}

func generators(gs []rls.Generator) string {
	var s []string
	for _, g := range gs {
		s = append(s, string(g))
	}
	return strings.Join(s, " and ")
}

func envSuffix(env []string) string {
	if len(env) == 0 {
		return ""
	}
	return ", environment " + strings.Join(env, " ")
}

func runLength(c *config) string {
	if c.calls > 0 {
		return fmt.Sprintf("%d calls", c.calls)
	}
	return c.duration.String()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func perCall(m *rls.Measurement, d time.Duration) string {
	if m.CPUErr != nil || m.Calls == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", float64(m.PerCall(d))/float64(time.Microsecond))
}

// merge adds m's run to t (nil: m alone). The first round's measurement
// becomes the total, so it is copied first.
func merge(t, m *rls.Measurement) *rls.Measurement {
	if t == nil {
		c := *m
		return &c
	}
	t.Calls += m.Calls
	t.Over += m.Over
	t.Errors += m.Errors
	t.Elapsed += m.Elapsed
	t.Hist.Merge(&m.Hist)
	t.ServerCPU += m.ServerCPU
	t.RedisCPU += m.RedisCPU
	t.ClientCPU += m.ClientCPU
	t.RedisCalls += m.RedisCalls
	if t.FirstErr == nil {
		t.FirstErr = m.FirstErr
	}
	if t.CPUErr == nil {
		t.CPUErr = m.CPUErr
	}
	return t
}

func moduleVersion(ctx context.Context, dir, path string) string {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", path)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return path + " (version unknown)"
	}
	return strings.TrimSpace(string(out))
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "n/a"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "n/a"
	}
	return strings.Join(f[:3], " ")
}
