// Command slices measures redisstore's slices (WithSlices) on one hot key:
// several processes, each with many goroutines, deciding on one
// redis-server, with and without slices, beside one process deciding in
// memory, all in one run.
//
//	GOWORK=off go run ./cmd/slices [-procs 4] [-callers 64] [-duration 5s] [-life 1s] [-limit 20000]
//	GOWORK=off go run ./cmd/slices -serve [-callers 64] [-duration 5s] [-life 1s]
//	GOWORK=off go run ./cmd/slices -smoke [-serve]   # seconds: does it still run? (CI)
//
// Above demand (a limit no load reaches) it reports the decisions per
// second of all processes together and the Redis commands per decision
// (INFO commandstats, EVALSHA and EVAL). Below demand (-limit units/s,
// burst a tenth of it, shared by the processes) it reports the units
// admitted as a share of the limit, and checks spans of the admissions'
// timestamps against SEMANTICS.md's bound: a decision made between tBefore
// and tAfter (this machine's clock, which the redis-server shares) is
// counted in a span [a, b] when a ≤ tBefore and tAfter ≤ b, and the units
// so counted must not exceed burst + floor((b − a + life)·limit/1s). The
// spans checked are 0, 0.1, 1, 10, 100ms and 1s long, starting at every
// admission (at one in 100 for those over 10ms).
//
// With -serve it measures `sluice serve` instead (built from this working
// tree, as cmd/rls does): one hot descriptor, in memory, over Redis, and
// over Redis with --store-slices, each in turn, reporting the server's CPU
// per call and Redis's script calls per call.
//
// The processes are this binary started again with -child; they start
// together at an instant the parent gives them. It starts a redis-server on
// a free loopback port (or uses SLUICE_BENCH_REDIS). It prints a Markdown
// table to stdout; progress goes to stderr.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/bench"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/redisstore"
	"github.com/sluice-go/sluice/store"
)

type config struct {
	procs, callers int
	duration, life time.Duration
	limit          int64
	serve          bool // measure sluice serve instead (runServe)
	// child mode
	child     bool
	mode      string // slices, plain, memory
	addr      string
	startAt   int64 // unix µs
	rate      int64 // units/s of the child's limit
	burst     int64
	record    string // file for the admissions' timestamps, or ""
	keyPrefix string
}

func parseFlags(args []string) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("slices", flag.ContinueOnError)
	fs.IntVar(&c.procs, "procs", 4, "processes sharing the key")
	fs.IntVar(&c.callers, "callers", bench.Callers, "goroutines per process")
	fs.DurationVar(&c.duration, "duration", 5*time.Second, "measured time per run")
	fs.DurationVar(&c.life, "life", time.Second, "a slice's life (WithSlices)")
	fs.Int64Var(&c.limit, "limit", 20_000, "units per second of the below-demand run, shared by the processes")
	fs.BoolVar(&c.serve, "serve", false, "measure `sluice serve` on one hot descriptor: in memory, over Redis, over Redis with --store-slices -life")
	fs.BoolVar(&c.child, "child", false, "internal: run as one process of a run")
	fs.StringVar(&c.mode, "mode", "slices", "internal: slices, plain or memory")
	fs.StringVar(&c.addr, "addr", "", "internal: the redis-server")
	fs.Int64Var(&c.startAt, "start-at", 0, "internal: when to start (unix µs)")
	fs.Int64Var(&c.rate, "rate", 0, "internal: the limit's units per second")
	fs.Int64Var(&c.burst, "burst", 0, "internal: the limit's burst")
	fs.StringVar(&c.record, "record", "", "internal: where to write the admissions' timestamps")
	fs.StringVar(&c.keyPrefix, "prefix", "", "internal: the store's prefix")
	smoke := fs.Bool("smoke", false, "a run of seconds that checks the command still works, not a measurement (CI runs it): -procs 2 -callers 8 -duration 300ms unless given")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *smoke {
		given := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
		for name, v := range map[string]string{"procs": "2", "callers": "8", "duration": "300ms"} {
			if !given[name] {
				_ = fs.Set(name, v)
			}
		}
	}
	if c.procs < 1 || c.callers < 1 || c.duration <= 0 || c.life <= 0 || c.limit < 10 {
		return nil, errors.New("-procs, -callers, -duration and -life must be positive, -limit at least 10")
	}
	return c, nil
}

func main() {
	c, err := parseFlags(os.Args[1:])
	if err == nil {
		switch {
		case c.child:
			err = runChild(c, os.Stdout)
		case c.serve:
			err = runServe(c, os.Stdout)
		default:
			err = runParent(c)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "slices:", err)
		os.Exit(1)
	}
}

// childResult is what a child reports on stdout.
type childResult struct {
	Decisions, Admitted, Local int64
	Seconds                    float64
}

// runChild decides for c.duration from c.callers goroutines on one key,
// starting at c.startAt, and writes its childResult as JSON to w.
func runChild(c *config, w io.Writer) error {
	lim := sluice.Limit{Rate: c.rate, Period: time.Second, Burst: c.burst}
	var st store.Store
	var rs *redisstore.Store
	if c.mode == "memory" {
		st = memstore.New()
	} else {
		opts := []redisstore.Option{redisstore.WithPrefix(c.keyPrefix)}
		if c.mode == "slices" {
			opts = append(opts, redisstore.WithSlices(c.life))
		}
		var err error
		rs, err = redisstore.New(redis.NewClient(bench.RedisOptions(c.addr)), opts...)
		if err != nil {
			return err
		}
		st = rs
	}
	l := sluice.New(st)
	time.Sleep(time.Until(time.UnixMicro(c.startAt)))
	end := time.Now().Add(c.duration)
	var decisions, admitted, failed atomic.Int64
	recs := make([][]int64, c.callers)
	var wg sync.WaitGroup
	ctx := context.Background()
	start := time.Now()
	for g := range c.callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var n, a int64
			for i := 0; ; i++ {
				if i%64 == 0 && time.Now().After(end) {
					break
				}
				before := time.Now().UnixMicro()
				res, err := l.Take(ctx, "hot", lim, 1)
				if err != nil {
					if failed.Add(1) == 1 {
						fmt.Fprintln(os.Stderr, "slices child:", err)
					}
					continue
				}
				n++
				if res.Allowed {
					a++
					if c.record != "" {
						recs[g] = append(recs[g], before, time.Now().UnixMicro())
					}
				}
			}
			decisions.Add(n)
			admitted.Add(a)
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if n := failed.Load(); n > 0 {
		return fmt.Errorf("%d decisions failed", n)
	}
	res := childResult{Decisions: decisions.Load(), Admitted: admitted.Load(), Seconds: secs}
	if rs != nil {
		res.Local = rs.SliceStats().Local
		rs.Close()
	}
	if c.record != "" {
		if err := writeRecords(c.record, recs); err != nil {
			return err
		}
	}
	return json.NewEncoder(w).Encode(res)
}

func writeRecords(path string, recs [][]int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	for _, r := range recs {
		if err := binary.Write(bw, binary.LittleEndian, r); err != nil {
			f.Close()
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// An admission is one admitted decision's interval: made between before
// and after (unix µs).
type admission struct{ before, after int64 }

func readRecords(path string) ([]admission, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := make([]admission, 0, len(b)/16)
	for i := 0; i+16 <= len(b); i += 16 {
		out = append(out, admission{int64(binary.LittleEndian.Uint64(b[i:])), int64(binary.LittleEndian.Uint64(b[i+8:]))})
	}
	return out, nil
}

// run is one measured run: its processes' results, the Redis commands
// they caused and, when recorded, their admissions.
type run struct {
	name     string
	procs    int
	results  []childResult
	commands int64
	adm      []admission
}

func (r *run) sum() (decisions, admitted, local int64, secs float64) {
	for _, x := range r.results {
		decisions += x.Decisions
		admitted += x.Admitted
		local += x.Local
		secs = max(secs, x.Seconds)
	}
	return
}

func runParent(c *config) error {
	srv, err := bench.StartRedis()
	if err != nil {
		return err
	}
	defer srv.Stop()
	rc := redis.NewClient(bench.RedisOptions(srv.Addr))
	defer rc.Close()
	dir, err := os.MkdirTemp("", "sluice-slices-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	huge := int64(1_000_000_000) // per second: no load reaches it
	var above []*run
	for _, mode := range []string{"memory", "plain", "slices"} {
		procs := c.procs
		if mode == "memory" {
			procs = 1
		}
		r, err := spawn(c, rc, srv.Addr, dir, mode, procs, huge, huge, false)
		if err != nil {
			return err
		}
		above = append(above, r)
	}
	var below []*run
	for _, mode := range []string{"plain", "slices"} {
		r, err := spawn(c, rc, srv.Addr, dir, mode, c.procs, c.limit, c.limit/10, true)
		if err != nil {
			return err
		}
		below = append(below, r)
	}
	report(os.Stdout, c, above, below)
	return nil
}

// spawn runs procs children of mode at once and gathers their results.
func spawn(c *config, rc *redis.Client, addr, dir, mode string, procs int, rate, burst int64, record bool) (*run, error) {
	fmt.Fprintf(os.Stderr, "%s: %d × %d goroutines, limit %d/s ...\n", mode, procs, c.callers, rate)
	ctx := context.Background()
	if err := rc.FlushAll(ctx).Err(); err != nil {
		return nil, err
	}
	if err := rc.ConfigResetStat(ctx).Err(); err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	startAt := time.Now().Add(2 * time.Second).UnixMicro()
	r := &run{name: mode, procs: procs, results: make([]childResult, procs)}
	outs := make([]strings.Builder, procs)
	cmds := make([]*exec.Cmd, procs)
	for i := range procs {
		args := []string{"-child", "-mode", mode, "-addr", addr, "-start-at", strconv.FormatInt(startAt, 10),
			"-rate", strconv.FormatInt(rate, 10), "-burst", strconv.FormatInt(burst, 10),
			"-callers", strconv.Itoa(c.callers), "-duration", c.duration.String(), "-life", c.life.String(),
			"-prefix", "slices:"}
		if record {
			args = append(args, "-record", filepath.Join(dir, fmt.Sprintf("%s-%d.bin", mode, i)))
		}
		cmd := exec.Command(self, args...)
		cmd.Stdout, cmd.Stderr = &outs[i], os.Stderr
		if err := bench.StartProcess(cmd); err != nil {
			return nil, err
		}
		cmds[i] = cmd
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			return nil, fmt.Errorf("%s child %d: %w", mode, i, err)
		}
		if err := json.Unmarshal([]byte(outs[i].String()), &r.results[i]); err != nil {
			return nil, fmt.Errorf("%s child %d: %w (%q)", mode, i, err, outs[i].String())
		}
		if record {
			a, err := readRecords(filepath.Join(dir, fmt.Sprintf("%s-%d.bin", mode, i)))
			if err != nil {
				return nil, err
			}
			r.adm = append(r.adm, a...)
		}
	}
	info, err := rc.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	r.commands = scriptCalls(info)
	return r, nil
}

// scriptCalls is the calls of EVALSHA and EVAL in INFO commandstats.
func scriptCalls(info string) int64 {
	var n int64
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
			continue
		}
		_, rest, _ := strings.Cut(line, "calls=")
		v, _, _ := strings.Cut(rest, ",")
		x, _ := strconv.ParseInt(v, 10, 64)
		n += x
	}
	return n
}

// violations counts the spans that break the bound (see the package doc),
// and returns the worst excess found.
func violations(adm []admission, rate, burst int64, life time.Duration) (spans, worst int64) {
	a := slices.Clone(adm)
	slices.SortFunc(a, func(x, y admission) int { return int(x.before - y.before) })
	l := life.Microseconds()
	for _, d := range []int64{0, 100, 1_000, 10_000, 100_000, 1_000_000} {
		step := 1
		if d > 10_000 {
			step = 100
		}
		for i := 0; i < len(a); i += step {
			hi := a[i].before + d
			var n int64
			for j := i; j < len(a) && a[j].before <= hi; j++ {
				if a[j].after <= hi {
					n++
				}
			}
			if bound := burst + (d+l)*rate/1_000_000; n > bound {
				spans++
				worst = max(worst, n-bound)
			}
		}
	}
	return spans, worst
}

func report(w io.Writer, c *config, above, below []*run) {
	fmt.Fprintf(w, "One hot key, %d processes × %d goroutines on one redis-server (memory: one process), %v per run, slice life %v.\n\n", c.procs, c.callers, c.duration, c.life)
	fmt.Fprintln(w, "Limit above demand:")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| store | processes | decisions/s | from slices | Redis calls per decision |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|")
	rates := map[string]float64{}
	var callsSliced float64
	for _, r := range above {
		d, _, local, secs := r.sum()
		rates[r.name] = float64(d) / secs
		calls := float64(r.commands) / float64(max(d, 1))
		if r.name == "slices" {
			callsSliced = calls
		}
		fmt.Fprintf(w, "| %s | %d | %.0f | %.1f%% | %.5f |\n", r.name, r.procs, rates[r.name], 100*float64(local)/float64(max(d, 1)), calls)
	}
	fmt.Fprintf(w, "\nSlices ÷ without: %.1f× (target ≥ 10×); slices ÷ one process in memory: %.2f (target ≥ 0.5); Redis calls per 100 decisions with slices: %.4f (target ≤ 1).\n\n",
		rates["slices"]/rates["plain"], rates["slices"]/rates["memory"], 100*callsSliced)
	fmt.Fprintf(w, "Limit below demand: %d/s, burst %d, shared by %d processes:\n\n", c.limit, c.limit/10, c.procs)
	fmt.Fprintln(w, "| store | decisions/s | admitted/s | % of limit | Redis calls per decision | spans over the bound |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
	for _, r := range below {
		d, a, _, secs := r.sum()
		spans, worst := violations(r.adm, c.limit, c.limit/10, c.life)
		life := c.life
		if r.name == "plain" {
			spans, worst = violations(r.adm, c.limit, c.limit/10, 0)
			life = 0
		}
		fmt.Fprintf(w, "| %s | %.0f | %.0f | %.1f%% | %.4f | %d (L = %v, worst excess %d) |\n", r.name, float64(d)/secs, float64(a)/secs,
			100*float64(a)/secs/float64(c.limit), float64(r.commands)/float64(max(d, 1)), spans, life, worst)
	}
}
