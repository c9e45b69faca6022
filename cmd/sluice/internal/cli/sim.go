package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
	"github.com/sluice-go/sluice/cmd/sluice/internal/sim"
	"github.com/sluice-go/sluice/cmd/sluice/internal/trace"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
)

func init() {
	commands["sim"] = command{
		summary: "show what each algorithm admits, delays and denies of a bursty trace, tick by tick",
		run:     simCmd,
	}
}

func simCmd(_ context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	lf := limitFlags{algorithm: "token-bucket"} // sim shows all seven; parse needs one
	fs.StringVar(&lf.limit, "limit", "10/1s", "the limit every algorithm enforces, RATE/PERIOD: 10/1s, 20/100ms, 1/1m")
	fs.Int64Var(&lf.burst, "burst", 0, "bucket capacity (token-bucket, gcra) and units that may wait (leaky-bucket); default the rate")
	window := fs.Duration("window", 0, "the windows' length (fixed-window, aligned-window, sliding-window, sliding-log); default burst·period/rate, so a window holds burst units")
	tracePath := fs.String("trace", "", "a JSON-lines trace in the replay format to show instead of the default scenario (- for stdin)")
	tick := fs.Duration("tick", 100*time.Millisecond, "the time one column stands for")
	ticks := fs.Int("ticks", 0, "the number of columns (default 30, or what the --trace spans, up to 30)")
	svgPath := fs.String("svg", "", "also write the figure as an SVG image to this file")
	noColor := fs.Bool("no-color", false, "no ANSI colors (the default when stdout is not a terminal or NO_COLOR is set)")
	steps := fs.Bool("steps", false, "walk one key through one algorithm (--algorithm) request by request: the state before and after, the arithmetic and the decision of each step")
	fs.StringVar(&lf.algorithm, "algorithm", "token-bucket", "with --steps: the algorithm walked, one of the seven above")
	requests := fs.String("requests", "", "with --steps: the requests, as offsets from a start, xN for N at once, cost=N, or charge=N for a charge of N units (default \""+sim.DefaultWalk+"\"); --trace walks a trace's first key instead")
	var names []string
	for _, k := range algo.Kinds() {
		names = append(names, k.String())
	}
	usage := func(w io.Writer) {
		fs.SetOutput(w)
		fmt.Fprint(w, `Usage: sluice sim [--limit RATE/PERIOD] [--burst B] [--window D] [--tick D] [--ticks N]
                 [--trace FILE] [--svg FILE] [--no-color]
       sluice sim --steps [--algorithm NAME] [--limit RATE/PERIOD] [--burst B]
                 [--requests "0ms x3, 200ms, 1s cost=2" | --trace FILE]

`)
		fmt.Fprint(w, wrap(fmt.Sprintf(`Runs one bursty trace through each algorithm (%s), each with a key of its own, and prints per tick what arrives and what each admits, delays and denies. The default trace is 4 quiet ticks, a burst of 8 in one tick, then 2 per tick, under 10/1s with a burst of 10: --burst left out is the rate, as everywhere. --trace shows a replay trace instead ({"t_us": 1764000000000000, "key": "user:1", "cost": 1} a line). --steps walks one key through one algorithm instead, request by request, as the console's "Step through" does; a charge ("charge=N" in --requests, "charge": N in place of "cost" in a trace) spends its units whatever the key has, leaving it in debt up to the limit's allowance (--limit "10/1s debt 20").`, strings.Join(names, ", ")), 80))
		fmt.Fprint(w, "\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, usage, args, stdout, stderr); err != nil {
		return err
	}
	lf.burstGiven = flagGiven(fs, "burst")
	if *steps {
		return stepsCmd(lf, *requests, *tracePath, stdin, stdout)
	}
	if flagGiven(fs, "algorithm") || flagGiven(fs, "requests") {
		return errors.New("--algorithm and --requests go with --steps: without it sim shows every algorithm")
	}
	if *ticks < 0 || *ticks > sim.MaxTicks {
		return fmt.Errorf("--ticks %d: want 1 to %d (or 0 to fit the arrivals)", *ticks, sim.MaxTicks)
	}
	if *tick < time.Microsecond || *tick%time.Microsecond != 0 {
		return fmt.Errorf("--tick %v: want a whole number of microseconds, at least 1µs", *tick)
	}
	if *window < 0 {
		return fmt.Errorf("--window %v is negative", *window)
	}
	lim, err := lf.parse()
	if err != nil {
		return err
	}
	cfg := sim.Config{Limit: lim, Window: *window, Tick: *tick, Ticks: *ticks}

	var arrivals []sim.Arrival
	if *tracePath == "" {
		if cfg.Ticks == 0 {
			cfg.Ticks = sim.MaxAutoTicks
		}
		cfg.Source = sim.DefaultSource
		cfg.Start = sim.DefaultStart
		arrivals = sim.Spread(sim.DefaultArrivals(cfg.Ticks), cfg.Start, cfg.Tick, "sim")
	} else {
		arrivals, err = readTrace(*tracePath, stdin)
		if err != nil {
			return err
		}
		cfg.Source = fmt.Sprintf("%s, %d requests", filepath.Base(*tracePath), len(arrivals))
		if *tracePath == "-" {
			cfg.Source = fmt.Sprintf("stdin, %d requests", len(arrivals))
		}
	}
	res, err := sim.Run(cfg, arrivals)
	if err != nil {
		return err
	}
	color := !*noColor && isTerminal(stdout) && os.Getenv("NO_COLOR") == ""
	if err := sim.WriteText(stdout, res, sim.TextOptions{Color: color}); err != nil {
		return err
	}
	if *tracePath == "" {
		fmt.Fprintln(stdout, "Try your own: --limit, --burst, --tick, --trace FILE (replay's format); a figure: --svg FILE.")
	}
	if *svgPath != "" {
		f, err := os.Create(*svgPath)
		if err != nil {
			return err
		}
		if err := sim.WriteSVG(f, res); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s\n", *svgPath)
	}
	return nil
}

// stepsCmd is `sluice sim --steps`: one key through one algorithm.
func stepsCmd(lf limitFlags, requests, tracePath string, stdin io.Reader, stdout io.Writer) error {
	lim, err := lf.parse()
	if err != nil {
		return err
	}
	p, err := storelink.Params(lim)
	if err != nil {
		return err
	}
	start := sim.DefaultStart
	var reqs []sim.Arrival
	switch {
	case tracePath != "" && requests != "":
		return errors.New("--requests and --trace: give one")
	case tracePath != "":
		all, err := readTrace(tracePath, stdin)
		if err != nil {
			return err
		}
		var others int
		reqs, others = sim.OneKey(all)
		start = reqs[0].T
		if others > 0 {
			fmt.Fprintf(stdout, "(the walk follows key %q: %d requests of other keys are left out)\n", reqs[0].Key, others)
		}
	default:
		if requests == "" {
			requests = sim.DefaultWalk
		}
		if reqs, err = sim.ParseRequests(requests, start, "sim", int(limits.WalkRequests.Default)); err != nil {
			return fmt.Errorf("--requests: %w", err)
		}
	}
	// The service's walk-requests, at its default: a walk is for reading,
	// step by step, here as in the console.
	if n := int64(len(reqs)); n > limits.WalkRequests.Default {
		return fmt.Errorf("%d requests of key %q: a walk takes at most %d", n, reqs[0].Key, limits.WalkRequests.Default)
	}
	w, err := sim.NewWalk(p, start, reqs, 0)
	if err != nil {
		return err
	}
	return sim.WriteWalk(stdout, w)
}

// wrap breaks text into lines of at most width bytes, at spaces (a longer
// word keeps a line of its own).
func wrap(text string, width int) string {
	var b strings.Builder
	line := 0
	for i, word := range strings.Fields(text) {
		switch {
		case i == 0:
		case line+1+len(word) > width:
			b.WriteByte('\n')
			line = 0
		default:
			b.WriteByte(' ')
			line++
		}
		b.WriteString(word)
		line += len(word)
	}
	return b.String()
}

// readTrace reads a whole replay trace from the file at path, or stdin for -.
func readTrace(path string, stdin io.Reader) ([]sim.Arrival, error) {
	r := stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	tr := trace.NewReader(r)
	var out []sim.Arrival
	for {
		req, err := tr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, sim.Arrival{T: req.T, Key: req.Key, Cost: req.Cost, Charge: req.Charge})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no requests in the trace", path)
	}
	return out, nil
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
