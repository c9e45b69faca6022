// Command compare runs the benchmarks of package bench and prints a Markdown
// table of their medians, sluice's ratio to each peer, and whether sluice meets
// its target against the fastest peer of each workload.
//
// Usage, from the bench directory:
//
//	go run ./cmd/compare [-count 5] [-benchtime 1s] [-bench re] [-interleave] [-in file] [-save file]
//	go run ./cmd/compare -redis [-redis-only] [-redis-bench re] [-rb-n 200000] [-rt-n 10000] ...
//	go run ./cmd/compare -smoke -redis   # seconds: does every part still run? (CI)
//
// It shells out to `go test -run ^$ -bench <re> -benchmem -count N` in -dir
// (default "."), echoing the raw output to stderr as it comes, and writes the
// tables to stdout. With -in it parses saved output instead of running.
//
// With -redis it then starts a redis-server on a free loopback port (or uses
// the one SLUICE_BENCH_REDIS names), counts the commands of sluice's
// decisions there (INFO commandstats, MONITOR), runs the Redis groups
// (RedisOneKey, RedisKeys10k64, Composite) against it and redis-benchmark's
// EVALSHA ceilings, and prints the Redis section: decisions/s with ratios to
// redis_rate, the target sluice ≥ 2× redis_rate at 64 goroutines, the round
// trips and the composite table. -redis-only skips the in-memory run.
//
// Other benchmarks are read generically as Benchmark<Group>/<lib>: a new
// group needs no change here, only, if it has one, an entry in targets.
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
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-go/sluice/bench"
)

// targets is, per benchmark group, the largest acceptable ratio of sluice's
// median ns/op to the fastest peer's. Groups absent here are reported with no
// target.
var targets = map[string]float64{
	"OneKey":  0.90,
	"Keys10k": 0.66,
	// HTTP: the least overhead of the middlewares (the same handler is
	// under each, so the ns/op ratio orders the overheads alike).
	"HTTP": 1.00,
}

// memBench is the default -bench: the in-memory groups. The Redis groups run
// only with -redis (-redis-bench), against a server this command starts.
const (
	memBench   = "^Benchmark(OneKey|Keys10k|HTTP)$"
	redisBench = "^Benchmark(RedisOneKey|RedisKeys10k64|Composite)$"
)

type config struct {
	count      int
	benchtime  string
	benchRe    string
	dir        string
	in, save   string
	ref        string
	interleave bool
	redis      bool
	redisOnly  bool
	redisBench string
	rbN, rtN   int
	smoke      bool
}

// smokeSettings are -smoke's: every part runs, each as briefly as it can.
var smokeSettings = map[string]string{"count": "1", "benchtime": "100x", "rb-n": "2000", "rt-n": "200"}

func main() {
	var c config
	flag.IntVar(&c.count, "count", 5, "runs per benchmark (go test -count); the table shows medians")
	flag.StringVar(&c.benchtime, "benchtime", "", "go test -benchtime (default: go test's, 1s)")
	flag.StringVar(&c.benchRe, "bench", memBench, "go test -bench regexp of the in-memory run")
	flag.StringVar(&c.dir, "dir", ".", "directory of package bench")
	flag.StringVar(&c.in, "in", "", "parse this saved go test -bench output instead of running the benchmarks")
	flag.StringVar(&c.save, "save", "", "also write the raw go test output to this file (for benchstat)")
	flag.StringVar(&c.ref, "ref", bench.Ref, "library the others are compared with")
	flag.BoolVar(&c.interleave, "interleave", false, "run go test -count 1 count times instead of -count N once, so that each round runs every library and a burst of load elsewhere on the machine is spread over all of them")
	flag.BoolVar(&c.redis, "redis", false, "also run the Redis section: start a redis-server (or use "+bench.RedisEnv+"), run the Redis benchmarks, redis-benchmark's ceilings and the round-trip count")
	flag.BoolVar(&c.redisOnly, "redis-only", false, "run the Redis section only (implies -redis)")
	flag.StringVar(&c.redisBench, "redis-bench", redisBench, "go test -bench regexp of the Redis run")
	flag.IntVar(&c.rbN, "rb-n", 200000, "redis-benchmark -n for the ceilings with 64 connections (a tenth of it with one)")
	flag.IntVar(&c.rtN, "rt-n", 10000, "decisions per mode in the round-trip count")
	flag.BoolVar(&c.smoke, "smoke", false, "a run of seconds that checks the command still works, not a measurement (CI runs it): -count 1 -benchtime 100x -rb-n 2000 -rt-n 200 unless given, and a round-trip count that fails is an error")
	flag.Parse()
	if c.redisOnly {
		c.redis = true
	}
	if c.smoke {
		given := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { given[f.Name] = true })
		for name, v := range smokeSettings {
			if !given[name] {
				_ = flag.Set(name, v)
			}
		}
	}
	if err := run(os.Stdout, c); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

// goTest runs the benchmarks matching benchRe in dir, count times (or count
// rounds of one with interleave), echoing the output to stderr, with env
// added to the environment. It returns the output and the command line.
func goTest(dir, benchRe, benchtime string, count int, interleave bool, env []string) ([]byte, string, error) {
	if count < 1 {
		return nil, "", errors.New("-count must be at least 1")
	}
	n, rounds := count, 1
	if interleave {
		n, rounds = 1, count
	}
	args := []string{"test", "-run", "^$", "-bench", benchRe, "-benchmem", "-count", strconv.Itoa(n), "-timeout", "60m"}
	if benchtime != "" {
		args = append(args, "-benchtime", benchtime)
	}
	args = append(args, ".")
	cmdline := "go " + shellJoin(args)
	if rounds > 1 {
		cmdline = fmt.Sprintf("%d rounds of %s", rounds, cmdline)
	}
	if len(env) > 0 {
		cmdline = strings.Join(env, " ") + " " + cmdline
	}
	fmt.Fprintf(os.Stderr, "running in %s: %s\n", dir, cmdline)
	var buf bytes.Buffer
	for range rounds {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdout = io.MultiWriter(&buf, os.Stderr)
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			return nil, "", fmt.Errorf("%s: %w", cmdline, err)
		}
	}
	return buf.Bytes(), cmdline, nil
}

func run(w io.Writer, c config) error {
	var memRaw, redisRaw []byte
	memCmd, redisCmd, memLoad, redisLoad := "", "", "", ""
	var live *RedisRun
	if c.in != "" {
		b, err := os.ReadFile(c.in)
		if err != nil {
			return err
		}
		memRaw, memCmd, redisCmd = b, "parsed from "+c.in, "parsed from "+c.in
	} else {
		var err error
		if !c.redisOnly {
			memLoad = loadavg()
			if memRaw, memCmd, err = goTest(c.dir, c.benchRe, c.benchtime, c.count, c.interleave, nil); err != nil {
				return err
			}
			memLoad += " before, " + loadavg() + " after"
		}
		if c.redis {
			if redisRaw, redisCmd, redisLoad, live, err = runRedis(c); err != nil {
				return err
			}
		}
	}
	if c.save != "" {
		if err := os.WriteFile(c.save, append(slices.Clip(memRaw), redisRaw...), 0o644); err != nil {
			return err
		}
	}

	all, err := Parse(bytes.NewReader(append(slices.Clip(memRaw), redisRaw...)))
	if err != nil {
		return err
	}
	if len(all.Results) == 0 {
		return errors.New("no Benchmark<Group>/<lib> results in the output")
	}
	mem, red := *all, *all
	mem.Results, red.Results = nil, nil
	for _, r := range all.Results {
		if isRedisGroup(r.Group) {
			red.Results = append(red.Results, r)
		} else {
			mem.Results = append(mem.Results, r)
		}
	}
	if len(mem.Results) > 0 {
		writeMemory(w, &mem, c.ref, c.dir, memCmd, memLoad)
	}
	if len(red.Results) > 0 || live != nil {
		if len(mem.Results) > 0 {
			fmt.Fprintln(w)
		}
		writeRedis(w, &red, live, c.dir, redisCmd, redisLoad)
	}
	return nil
}

// runRedis starts the server, counts the round trips, runs the Redis
// benchmarks and redis-benchmark's ceilings, and stops the server.
func runRedis(c config) (raw []byte, cmdline, load string, live *RedisRun, err error) {
	ctx := context.Background()
	srv, live, err := startRedisRun(ctx, c.rbN)
	if err != nil {
		return nil, "", "", nil, err
	}
	defer srv.Stop()
	fmt.Fprintf(os.Stderr, "%s\n", live.Server)
	load = loadavg()
	live.measureRoundTrips(ctx, srv.Addr, c.rtN)
	if c.smoke && live.RTErr != nil {
		return nil, "", "", nil, fmt.Errorf("-smoke: the round-trip count: %w", live.RTErr)
	}
	env := []string{bench.RedisEnv + "=" + srv.Addr}
	// With -interleave each round runs the Go benchmarks and then every
	// ceiling once.
	rounds, count := 1, c.count
	if c.interleave {
		rounds, count = c.count, 1
	}
	var buf bytes.Buffer
	for range rounds {
		out, cl, err := goTest(c.dir, c.redisBench, c.benchtime, count, false, env)
		if err != nil {
			return nil, "", "", nil, err
		}
		buf.Write(out)
		cmdline = cl
		for range count {
			for _, ce := range live.Ceilings {
				if err := runCeiling(ce); err != nil {
					return nil, "", "", nil, err
				}
			}
		}
	}
	if c.interleave {
		cmdline = fmt.Sprintf("%d rounds of %s, each followed by the redis-benchmark runs", rounds, cmdline)
	} else {
		cmdline += fmt.Sprintf(", then each redis-benchmark run %d times", count)
	}
	load += " before, " + loadavg() + " after"
	return buf.Bytes(), cmdline, load, live, nil
}

// writeMemory writes the in-memory tables.
func writeMemory(w io.Writer, out *Output, ref, dir, cmdline, load string) {
	rows := Rows(out, ref)
	sums := Summarize(rows, ref, targets)

	fmt.Fprintf(w, "## %s vs peers\n\n", ref)
	fmt.Fprintf(w, "- limit, identical for every library: %s\n", bench.LimitString())
	fmt.Fprintf(w, "- %s\n", cmdline)
	fmt.Fprintf(w, "- %s/%s, cpu: %s, GOMAXPROCS %d\n", out.Header["goos"], out.Header["goarch"], out.Header["cpu"], out.Procs)
	if load != "" {
		fmt.Fprintf(w, "- load average (1 min): %s; a load near or above GOMAXPROCS means other work shared the CPUs\n", load)
	}
	fmt.Fprintf(w, "- medians over the runs; allowed/op is the share of requests that passed\n\n")
	WriteTable(w, rows, Units(rows, out.Units()), ref)
	fmt.Fprintf(w, "\n### %s against the fastest peer\n\n", ref)
	WriteSummary(w, sums, ref)
	fmt.Fprintf(w, "\n### Libraries\n\n")
	if slices.ContainsFunc(out.Groups(), func(g string) bool { return g != "HTTP" }) {
		writeLibs(w, dir, bench.Libs)
	}
	if slices.Contains(out.Groups(), "HTTP") {
		fmt.Fprintf(w, "\n### Middlewares (HTTP)\n\n")
		writeLibs(w, dir, bench.HTTPLibs)
	}
}

// writeLibs lists libs with the module versions the bench module pins.
func writeLibs(w io.Writer, dir string, libs []bench.Lib) {
	var mods []string
	for _, l := range libs {
		if l.Module != "" && !slices.Contains(mods, l.Module) {
			mods = append(mods, l.Module)
		}
	}
	versions := map[string]string{}
	cmd := exec.Command("go", append([]string{"list", "-m", "-f", "{{.Path}} {{with .Replace}}replaced by {{.Path}}{{else}}{{.Version}}{{end}}"}, mods...)...)
	cmd.Dir = dir
	if b, err := cmd.Output(); err == nil {
		for line := range strings.Lines(string(b)) {
			if path, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
				versions[path] = v
			}
		}
	}
	writeRow(w, []string{"library", "module", "version", "set up as"})
	writeRow(w, []string{"---", "---", "---", "---"})
	for _, l := range libs {
		v := versions[l.Module]
		if l.Module == "" {
			v = "—"
		} else if v == "" {
			v = "?"
		}
		writeRow(w, []string{l.Name, l.Module, v, "`" + l.Setup + "`"})
	}
}

// loadavg returns the 1-minute load average, or "?" where /proc/loadavg is
// missing.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "?"
}
