package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Output is parsed `go test -bench` output: the header lines and every
// sub-benchmark's samples, in the order they first appear.
type Output struct {
	// Header holds the "key: value" lines go test prints before the results
	// (goos, goarch, pkg, cpu).
	Header map[string]string
	// Procs is the GOMAXPROCS suffix of the benchmark names (1 when absent).
	Procs int
	// Results holds one entry per Benchmark<Group>/<Lib>, in order of first
	// appearance.
	Results []*Result
}

// Result is every sample of one benchmark Benchmark<Group>/<Lib>.
type Result struct {
	Group string // BenchmarkOneKey/sluice-2 → "OneKey"
	Lib   string // BenchmarkOneKey/sluice-2 → "sluice"; may itself hold "/"
	// Units lists the metric units (ns/op, B/op, ...) in order of first
	// appearance.
	Units []string
	// Samples holds each unit's values, one per run (-count).
	Samples map[string][]float64
}

// Median returns the median of unit's samples, and false when there are none.
// With an even number of samples it is the mean of the middle two.
func (r *Result) Median(unit string) (float64, bool) {
	return median(r.Samples[unit])
}

func median(xs []float64) (float64, bool) {
	if len(xs) == 0 {
		return math.NaN(), false
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2], true
	}
	return (s[n/2-1] + s[n/2]) / 2, true
}

// SplitName splits a benchmark name such as "BenchmarkOneKey/sluice-2" into its
// group ("OneKey"), library ("sluice", everything after the first "/") and
// GOMAXPROCS suffix (2; 1 when absent). ok is false for a name that is not a
// sub-benchmark.
func SplitName(name string) (group, lib string, procs int, ok bool) {
	name, found := strings.CutPrefix(name, "Benchmark")
	if !found {
		return "", "", 0, false
	}
	procs = 1
	if i := strings.LastIndexByte(name, '-'); i >= 0 {
		if p, err := strconv.Atoi(name[i+1:]); err == nil && p > 0 {
			name, procs = name[:i], p
		}
	}
	group, lib, found = strings.Cut(name, "/")
	if !found || group == "" || lib == "" {
		return "", "", 0, false
	}
	return group, lib, procs, true
}

// Parse reads go test -bench output. Lines that are not results or header
// lines (PASS, ok, logs) are skipped, and so are top-level benchmarks with no
// "/<lib>" part. A result line with a malformed metric list is an error.
func Parse(r io.Reader) (*Output, error) {
	out := &Output{Header: map[string]string{}, Procs: 1}
	byName := map[string]*Result{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for ln := 1; sc.Scan(); ln++ {
		line := sc.Text()
		if !strings.HasPrefix(line, "Benchmark") {
			if k, v, ok := strings.Cut(line, ": "); ok && !strings.ContainsAny(k, " \t") && k != "" {
				if _, seen := out.Header[k]; !seen {
					out.Header[k] = strings.TrimSpace(v)
				}
			}
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 {
			continue // a name alone: the benchmark printed something first, or failed
		}
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			continue
		}
		group, lib, procs, ok := SplitName(f[0])
		if !ok {
			continue
		}
		if (len(f)-2)%2 != 0 {
			return nil, fmt.Errorf("line %d: odd number of value/unit fields: %q", ln, line)
		}
		out.Procs = procs
		key := group + "/" + lib
		res := byName[key]
		if res == nil {
			res = &Result{Group: group, Lib: lib, Samples: map[string][]float64{}}
			byName[key] = res
			out.Results = append(out.Results, res)
		}
		for i := 2; i < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: value %q: %v", ln, f[i], err)
			}
			unit := f[i+1]
			if _, seen := res.Samples[unit]; !seen {
				res.Units = append(res.Units, unit)
			}
			res.Samples[unit] = append(res.Samples[unit], v)
		}
	}
	return out, sc.Err()
}

// Groups returns the benchmark groups in order of first appearance.
func (o *Output) Groups() []string {
	var gs []string
	for _, r := range o.Results {
		if !slices.Contains(gs, r.Group) {
			gs = append(gs, r.Group)
		}
	}
	return gs
}

// Units returns every metric unit seen, ns/op, B/op and allocs/op first, then
// the others (custom metrics such as allowed/op) in order of first appearance.
func (o *Output) Units() []string {
	us := []string{}
	for _, std := range []string{"ns/op", "B/op", "allocs/op"} {
		for _, r := range o.Results {
			if _, ok := r.Samples[std]; ok {
				us = append(us, std)
				break
			}
		}
	}
	for _, r := range o.Results {
		for _, u := range r.Units {
			if !slices.Contains(us, u) {
				us = append(us, u)
			}
		}
	}
	return us
}
