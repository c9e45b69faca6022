// Command rlsab compares two builds of sluice serve under the same load at
// the same time: both serve from one redis-server (or each from its memory
// store), each gets its own load generator with the same number of callers,
// and the server CPU per call of each is read over every round.
//
// Running the two at once, not in turn, cancels the machine's drift between
// runs, which on a shared machine is larger than most changes measured: an
// A/B of one build against itself stays within about 2%.
//
//	go run ./cmd/rlsab -a HEAD~1 -b .      # a git revision against the working tree
//	go run ./cmd/rlsab -a /tmp/sluice-old -b /tmp/sluice-new -rounds 8
//	go run ./cmd/rlsab -a . -b . -b-env GOGC=800   # one build, two settings
//	go run ./cmd/rlsab -smoke              # seconds, the working tree against itself: does it still run? (CI)
//
// -a and -b each name a sluice binary, a directory (a sluice working tree,
// whose cmd/sluice is built) or a git revision of the working tree next to
// bench (checked out in a temporary worktree, built, removed). Run it with
// GOWORK=off: bench is outside the repository's go.work.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-go/sluice/bench"
	"github.com/sluice-go/sluice/bench/rls"
)

type config struct {
	a, b             string
	store            string
	duration, warmup time.Duration
	rounds           int
	callers, conns   int
	envA, envB       []string
	smoke            bool
}

func parseFlags(args []string) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("rlsab", flag.ContinueOnError)
	fs.StringVar(&c.a, "a", "", "build A: a sluice binary, a module directory or a git revision")
	fs.StringVar(&c.b, "b", ".", "build B: a sluice binary, a module directory or a git revision")
	fs.StringVar(&c.store, "store", "redis", "the servers' store: redis (one redis-server for both) or memory")
	fs.DurationVar(&c.duration, "duration", 8*time.Second, "measured time per round")
	fs.DurationVar(&c.warmup, "warmup", 2*time.Second, "unmeasured load before the first round")
	fs.IntVar(&c.rounds, "rounds", 4, "rounds")
	fs.IntVar(&c.callers, "callers", rls.Callers, "concurrent callers per server")
	fs.IntVar(&c.conns, "conns", 4, "HTTP/2 connections per server")
	fs.Var((*rls.EnvFlag)(&c.envA), "a-env", "KEY=VALUE added to A's environment (repeatable)")
	fs.Var((*rls.EnvFlag)(&c.envB), "b-env", "KEY=VALUE added to B's environment (repeatable)")
	fs.BoolVar(&c.smoke, "smoke", false, "a run of seconds that checks the command still works, not a measurement (CI runs it): -a . -duration 1s -warmup 200ms -rounds 1 unless given")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if c.smoke {
		given := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
		for name, v := range map[string]string{"a": ".", "duration": "1s", "warmup": "200ms", "rounds": "1"} {
			if !given[name] {
				_ = fs.Set(name, v)
			}
		}
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	case c.a == "" || c.b == "":
		return nil, errors.New("-a and -b must name the builds")
	case c.store != "redis" && c.store != "memory":
		return nil, fmt.Errorf("-store %q: want redis or memory", c.store)
	case c.duration <= 0 || c.rounds < 1 || c.callers < 1 || c.conns < 1 || c.warmup < 0:
		return nil, errors.New("-duration, -rounds, -callers and -conns must be positive, -warmup not negative")
	}
	return c, nil
}

func main() {
	c, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "rlsab:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, c)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "rlsab:", err)
		os.Exit(1)
	}
}

// build returns the path of the sluice binary spec names: spec itself when
// it is a file, else built into dir from a module directory, else from a
// git revision of the sluice working tree.
func build(ctx context.Context, spec, dir, name string) (string, error) {
	fi, err := os.Stat(spec)
	if err == nil && !fi.IsDir() {
		return spec, nil
	}
	bin := filepath.Join(dir, name)
	if err == nil && spec != "." {
		return bin, rls.Build(ctx, rls.CommandDir(spec), rls.SluicePackage, bin)
	}
	// The working tree ("."), or a revision of its repository.
	modDir, err := rls.ModuleDir(ctx)
	if err != nil {
		return "", err
	}
	repo, err := rls.SluiceDir(ctx, modDir)
	if err != nil {
		return "", err
	}
	if spec == "." {
		return bin, rls.Build(ctx, rls.CommandDir(repo), rls.SluicePackage, bin)
	}
	wt := filepath.Join(dir, name+"-src")
	if out, err := exec.CommandContext(ctx, "git", "-C", repo, "worktree", "add", "--detach", wt, spec).CombinedOutput(); err != nil {
		return "", fmt.Errorf("-%s %q is neither a file, a directory nor a git revision: %v\n%s", name, spec, err, out)
	}
	defer exec.Command("git", "-C", repo, "worktree", "remove", "--force", wt).Run()
	return bin, rls.Build(ctx, rls.CommandDir(wt), rls.SluicePackage, bin)
}

// perCall is cpu spread over calls, in µs.
func perCall(cpu time.Duration, calls int64) float64 {
	return float64(cpu.Nanoseconds()) / 1e3 / float64(max(calls, 1))
}

func run(ctx context.Context, c *config) error {
	dir, err := os.MkdirTemp("", "sluice-rlsab-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var bins [2]string
	for i, spec := range []string{c.a, c.b} {
		name := []string{"a", "b"}[i]
		if bins[i], err = build(ctx, spec, dir, name); err != nil {
			return err
		}
	}
	store := "memory"
	if c.store == "redis" {
		rs, err := bench.StartRedis()
		if err != nil {
			return err
		}
		defer rs.Stop()
		store = "redis://" + rs.Addr
	}
	var srv [2]*rls.Server
	var lds [2]rls.Loader
	for i, env := range [][]string{c.envA, c.envB} {
		sdir := filepath.Join(dir, []string{"a", "b"}[i]+"-run")
		if err := os.Mkdir(sdir, 0o755); err != nil {
			return err
		}
		files, err := rls.WriteConfig(sdir)
		if err != nil {
			return err
		}
		if srv[i], err = rls.StartSluice(ctx, bins[i], sdir, files, store, env); err != nil {
			return err
		}
		defer srv[i].Stop()
		if lds[i], err = rls.DialLoader(rls.H2, srv[i].Addr, c.conns); err != nil {
			return err
		}
		defer lds[i].Close()
	}
	fmt.Printf("A: %s %s\nB: %s %s\n%d callers over %d connections each, store %s, %v per round\n\n",
		c.a, strings.Join(c.envA, " "), c.b, strings.Join(c.envB, " "), c.callers, c.conns, c.store, c.duration)
	fmt.Println("| round | A calls/s | A CPU µs/call | A p99 | B calls/s | B CPU µs/call | B p99 | B ÷ A |")
	fmt.Println("| --: | --: | --: | --: | --: | --: | --: | --: |")
	var sum [2]time.Duration
	var calls [2]int64
	for r := 0; r <= c.rounds; r++ {
		d := c.duration
		if r == 0 {
			if c.warmup == 0 {
				continue
			}
			d = c.warmup
		}
		var before, after [2]time.Duration
		for i := range srv {
			if before[i], err = srv[i].CPU(); err != nil {
				return err
			}
		}
		var res [2]*rls.Result
		var errs [2]error
		var wg sync.WaitGroup
		for i := range lds {
			wg.Go(func() {
				res[i], errs[i] = lds[i].Run(ctx, rls.Options{Generator: rls.H2, Callers: c.callers, Conns: c.conns, Duration: d})
			})
		}
		wg.Wait()
		for i := range srv {
			if errs[i] != nil {
				return errs[i]
			}
			if res[i].Errors > 0 {
				return fmt.Errorf("%s: %d calls failed, the first: %v", []string{"A", "B"}[i], res[i].Errors, res[i].FirstErr)
			}
			if after[i], err = srv[i].CPU(); err != nil {
				return err
			}
		}
		if r == 0 {
			continue
		}
		var per [2]float64
		for i := range srv {
			sum[i] += after[i] - before[i]
			calls[i] += res[i].Calls
			per[i] = perCall(after[i]-before[i], res[i].Calls)
		}
		fmt.Printf("| %d | %.0f | %.2f | %v | %.0f | %.2f | %v | %.3f |\n", r,
			res[0].Rate(), per[0], res[0].Hist.Quantile(0.99), res[1].Rate(), per[1], res[1].Hist.Quantile(0.99), per[1]/per[0])
	}
	a, b := perCall(sum[0], calls[0]), perCall(sum[1], calls[1])
	fmt.Printf("\nAll rounds: A %.2f µs/call, B %.2f µs/call, B ÷ A %.3f\n", a, b, b/a)
	return nil
}
