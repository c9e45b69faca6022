package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/sluice-go/sluice/bench"
	"github.com/sluice-go/sluice/bench/rls"
)

// The -hot mode: every call carries the descriptor value hotValue, whose
// key-only rule allows rls.UserLimit a second (above what the load
// reaches), so each server decides one hot key.
const (
	hotValue = "u0"
	// slicesStore names sluice serve over Redis with --store-slices.
	slicesStore = "redis-slices"
	// Issue 24's targets for sluice serve over Redis with slices on one
	// hot descriptor.
	targetSliceCPU   = 1.10 // server CPU per call at most this multiple of sluice's in memory
	targetSliceCalls = 1.0  // Redis commands per 100 calls at most this
)

// hotServers are the servers -hot runs unless -servers names others.
var hotServers = []string{"envoy", "sluice-memory", "sluice-slices"}

// flagSet reports whether the command line set the flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// measureHot runs o against s on the hot descriptor: c.warmup unmeasured,
// then Redis's counters reset, then the measured run, after which the
// commands Redis ran go in the Measurement's RedisCalls.
func measureHot(ctx context.Context, c *config, rs *bench.RedisServer, s *rls.Server, o rls.Options) (*rls.Measurement, error) {
	o.Values = []string{hotValue}
	if c.warmup > 0 {
		w := o
		w.Duration, w.Calls = c.warmup, 0
		if _, err := rls.Measure(ctx, s, 0, w, 0); err != nil {
			return nil, err
		}
	}
	if err := rls.ResetRedisStats(ctx, rs.Addr); err != nil {
		return nil, err
	}
	m, err := rls.Measure(ctx, s, rs.Pid(), o, 0)
	if err != nil {
		return nil, err
	}
	m.RedisCalls, err = rls.RedisCommands(ctx, rs.Addr)
	return m, err
}

// reportHot prints the -hot run as Markdown on stdout: a row per server
// and load generator, added up over the rounds, then issue 24's targets
// for sluice over Redis with slices against sluice in memory, with each
// round's ratio.
func reportHot(ctx context.Context, c *config, modDir, redisAddr string, files rls.ConfigFiles, r *results) {
	fmt.Printf("# RLS v3 services on one hot descriptor\n\n")
	fmt.Printf("`go run ./cmd/rls %s`: load generator %s, %d callers over %d HTTP/2 connections, every call the descriptor value %s (%d per second: above demand), %s per server and round, %d round(s), %v warm-up; %s/%s, %d CPUs, GOMAXPROCS %d; load average %s before, %s after.\n\n",
		strings.Join(os.Args[1:], " "), generators(c.clients), c.callers, c.conns, hotValue, rls.UserLimit, runLength(c), c.rounds, c.warmup,
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), r.load1, r.load2)
	fmt.Println("| server | store | load generator | calls/s | errors | p50 | p99 | server CPU µs/call | Redis CPU µs/call | Redis commands per 100 calls | CPU/call ÷ sluice memory | CPU/call ÷ envoy |")
	fmt.Println("| --- | --- | --- | --: | --: | --: | --: | --: | --: | --: | --: | --: |")
	for _, m := range r.total {
		mem, envoy := peer(r.total, m.Generator, "sluice", "memory"), peer(r.total, m.Generator, "envoy", "redis")
		fmt.Printf("| %s | %s | %s | %.0f | %d | %.3f ms | %.3f ms | %s | %s | %.3f | %s | %s |\n", m.Name, m.Store, m.Generator, m.Rate(), m.Errors,
			ms(m.Hist.Quantile(0.5)), ms(m.Hist.Quantile(0.99)), perCall(m, m.ServerCPU), perCall(m, m.RedisCPU),
			per100Value(m), cpuRatio(m, mem), cpuRatio(m, envoy))
	}
	fmt.Println()
	for _, m := range r.total {
		mem := peer(r.total, m.Generator, "sluice", "memory")
		if m.Store != slicesStore || mem == nil {
			continue
		}
		var each []string
		for _, row := range r.rounds {
			each = append(each, cpuRatio(peer(row, m.Generator, "sluice", slicesStore), peer(row, m.Generator, "sluice", "memory")))
		}
		cpu := cpuRatio(m, mem)
		fmt.Printf("Targets, sluice over Redis with slices (load generator %s): server CPU/call ÷ sluice in memory %s (≤ %.2f: %s; rounds %s), Redis commands per 100 calls %.3f (≤ %.0f: %s).\n",
			m.Generator, cpu, targetSliceCPU, verdict(cpu != "n/a" && ratioOf(m, mem) <= targetSliceCPU), strings.Join(each, " "),
			per100Value(m), targetSliceCalls, verdict(per100Value(m) <= targetSliceCalls))
	}
	fmt.Println()
	fmt.Printf("envoyproxy/ratelimit: %s, environment %s (defaults otherwise).\n", moduleVersion(ctx, modDir, "github.com/envoyproxy/ratelimit"),
		strings.Join(append(rls.EnvoyEnv(redisAddr, files), c.envoyEnv...), " "))
	fmt.Printf("sluice: `sluice %s` (sluice-slices adds `--store-slices %v`)%s.\n",
		strings.Join(rls.SluiceArgs(files.File, "redis://"+redisAddr+" | memory", "127.0.0.1:P", "127.0.0.1:Q"), " "), c.sliceLife, envSuffix(c.sluiceEnv))
}

// peer returns the measurement in ms of the server name over store with
// load generator g, or nil.
func peer(ms []*rls.Measurement, g rls.Generator, name, store string) *rls.Measurement {
	for _, m := range ms {
		if m.Generator == g && m.Name == name && m.Store == store {
			return m
		}
	}
	return nil
}

// ratioOf is m's server CPU per call ÷ ref's.
func ratioOf(m, ref *rls.Measurement) float64 {
	return float64(m.PerCall(m.ServerCPU)) / float64(ref.PerCall(ref.ServerCPU))
}

// cpuRatio formats ratioOf, or "n/a" when either is missing or has no CPU
// figures.
func cpuRatio(m, ref *rls.Measurement) string {
	if m == nil || ref == nil || m.CPUErr != nil || ref.CPUErr != nil || m.Calls == 0 || ref.PerCall(ref.ServerCPU) == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", ratioOf(m, ref))
}

// per100Value is the Redis commands per 100 calls of m.
func per100Value(m *rls.Measurement) float64 {
	return 100 * float64(m.RedisCalls) / float64(max(m.Calls, 1))
}

func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}
