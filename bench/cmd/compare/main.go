// Command compare runs the benchmarks of package bench and prints a Markdown
// table of their medians, sluice's ratio to each peer, and whether sluice meets
// its target against the fastest peer of each workload.
//
// Usage, from the bench directory:
//
//	go run ./cmd/compare [-count 5] [-benchtime 1s] [-bench .] [-interleave] [-in file] [-save file]
//
// It shells out to `go test -run ^$ -bench <re> -benchmem -count N` in -dir
// (default "."), echoing the raw output to stderr as it comes, and writes the
// tables to stdout. With -in it parses saved output instead of running.
//
// Benchmarks are read generically as Benchmark<Group>/<lib>: a new group (say
// BenchmarkRedis/sluice, BenchmarkRedis/redis_rate) needs no change here,
// only, if it has one, an entry in targets.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
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
}

func main() {
	var (
		count     = flag.Int("count", 5, "runs per benchmark (go test -count); the table shows medians")
		benchtime = flag.String("benchtime", "", "go test -benchtime (default: go test's, 1s)")
		benchRe   = flag.String("bench", ".", "go test -bench regexp")
		dir       = flag.String("dir", ".", "directory of package bench")
		in        = flag.String("in", "", "parse this saved go test -bench output instead of running the benchmarks")
		save      = flag.String("save", "", "also write the raw go test output to this file (for benchstat)")
		ref       = flag.String("ref", bench.Ref, "library the others are compared with")
		inter     = flag.Bool("interleave", false, "run go test -count 1 count times instead of -count N once, so that each round runs every library and a burst of load elsewhere on the machine is spread over all of them")
	)
	flag.Parse()
	if err := run(os.Stdout, *count, *benchtime, *benchRe, *dir, *in, *save, *ref, *inter); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, count int, benchtime, benchRe, dir, in, save, ref string, interleave bool) error {
	var raw []byte
	cmdline, load := "", ""
	if in != "" {
		b, err := os.ReadFile(in)
		if err != nil {
			return err
		}
		raw, cmdline = b, "parsed from "+in
	} else {
		if count < 1 {
			return errors.New("-count must be at least 1")
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
		cmdline = "go " + strings.Join(args, " ")
		if rounds > 1 {
			cmdline = fmt.Sprintf("%d rounds of %s", rounds, cmdline)
		}
		fmt.Fprintf(os.Stderr, "running in %s: %s\n", dir, cmdline)
		load = loadavg()
		var buf bytes.Buffer
		for range rounds {
			cmd := exec.Command("go", args...)
			cmd.Dir = dir
			cmd.Stdout = io.MultiWriter(&buf, os.Stderr)
			cmd.Stderr = os.Stderr
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("%s: %w", cmdline, err)
			}
		}
		load += " before, " + loadavg() + " after"
		raw = buf.Bytes()
	}
	if save != "" {
		if err := os.WriteFile(save, raw, 0o644); err != nil {
			return err
		}
	}

	out, err := Parse(bytes.NewReader(raw))
	if err != nil {
		return err
	}
	if len(out.Results) == 0 {
		return errors.New("no Benchmark<Group>/<lib> results in the output")
	}
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
	WriteTable(w, rows, out.Units(), ref)
	fmt.Fprintf(w, "\n### %s against the fastest peer\n\n", ref)
	WriteSummary(w, sums, ref)
	fmt.Fprintf(w, "\n### Libraries\n\n")
	writeLibs(w, dir)
	return nil
}

// writeLibs lists bench.Libs with the module versions the bench module pins.
func writeLibs(w io.Writer, dir string) {
	mods := make([]string, len(bench.Libs))
	for i, l := range bench.Libs {
		mods[i] = l.Module
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
	for _, l := range bench.Libs {
		v := versions[l.Module]
		if v == "" {
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
