package main

import (
	"math"
	"strings"
	"testing"
)

// sample is go test -bench output as the benchmarks print it, with noise
// (a top-level benchmark, a log line, PASS/ok) and a third group with no
// target whose library names hold a "/".
const sample = `goos: linux
goarch: amd64
pkg: github.com/sluice-go/sluice/bench
cpu: AMD EPYC
BenchmarkOneKey/sluice-2         	  888136	       100.0 ns/op	         0.2500 allowed/op	       0 B/op	       0 allocs/op
BenchmarkOneKey/xtimerate-2      	 1601350	       150.0 ns/op	         0.1500 allowed/op	       0 B/op	       0 allocs/op
BenchmarkOneKey/ulule-2          	  584838	       400.0 ns/op	       24 B/op	       2 allocs/op
BenchmarkOneKey/sluice-2         	  888136	        90.0 ns/op	         0.2300 allowed/op	       0 B/op	       0 allocs/op
BenchmarkOneKey/xtimerate-2      	 1601350	       140.0 ns/op	         0.1400 allowed/op	       0 B/op	       0 allocs/op
BenchmarkOneKey/ulule-2          	  584838	       410.0 ns/op	       24 B/op	       2 allocs/op
BenchmarkOneKey/sluice-2         	  888136	       110.0 ns/op	         0.2700 allowed/op	       0 B/op	       0 allocs/op
BenchmarkOneKey/xtimerate-2      	 1601350	       160.0 ns/op	         0.1600 allowed/op	       0 B/op	       0 allocs/op
BenchmarkOneKey/ulule-2          	  584838	       390.0 ns/op	       24 B/op	       2 allocs/op
BenchmarkKeys10k/sluice-2        	 1308666	        80.00 ns/op	         1.000 allowed/op	       0 B/op	       0 allocs/op
BenchmarkKeys10k/xtimerate-2     	 2536612	        50.00 ns/op	         1.000 allowed/op	       0 B/op	       0 allocs/op
BenchmarkKeys10k/sluice-2        	 1308666	       100.00 ns/op	         1.000 allowed/op	       1 B/op	       0 allocs/op
BenchmarkKeys10k/xtimerate-2     	 2536612	        70.00 ns/op	         1.000 allowed/op	       0 B/op	       0 allocs/op
BenchmarkTopLevel-2              	     100	        10.00 ns/op
    bench_test.go:99: a log line: not a header
BenchmarkRedis/sluice-2          	    1000	      1000 ns/op	     120 B/op	       3 allocs/op
BenchmarkRedis/go-redis/redis_rate-2	     500	      2000 ns/op	     800 B/op	      12 allocs/op
PASS
ok  	github.com/sluice-go/sluice/bench	3.312s
`

const wantTable = `| workload | library | runs | ns/op | B/op | allocs/op | allowed/op | sluice/peer (<1: sluice faster) | peer/sluice (>1: sluice faster) |
| --- | --- | --: | --: | --: | --: | --: | --: | --: |
| OneKey | sluice | 3 | 100.0 | 0 | 0 | 0.250 | — | — |
| OneKey | xtimerate | 3 | 150.0 | 0 | 0 | 0.150 | 0.67 | 1.50 |
| OneKey | ulule | 3 | 400.0 | 24 | 2 |  | 0.25 | 4.00 |
| Keys10k | sluice | 2 | 90.0 | 0.500 | 0 | 1 | — | — |
| Keys10k | xtimerate | 2 | 60.0 | 0 | 0 | 1 | 1.50 | 0.67 |
| Redis | sluice | 1 | 1000.0 | 120 | 3 |  | — | — |
| Redis | go-redis/redis_rate | 1 | 2000.0 | 800 | 12 |  | 0.50 | 2.00 |
`

const wantSummary = `| workload | fastest peer | peer ns/op | sluice ns/op | sluice/fastest | target | verdict |
| --- | --- | --: | --: | --: | --: | --- |
| OneKey | xtimerate | 150.0 | 100.0 | 0.67 | ≤ 0.90 | PASS |
| Keys10k | xtimerate | 60.0 | 90.0 | 1.50 | ≤ 0.66 | MISS |
| Redis | go-redis/redis_rate | 2000.0 | 1000.0 | 0.50 | — | no target |
`

var testTargets = map[string]float64{"OneKey": 0.90, "Keys10k": 0.66}

func TestParseSample(t *testing.T) {
	out, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if out.Procs != 2 || out.Header["cpu"] != "AMD EPYC" || out.Header["goos"] != "linux" {
		t.Errorf("header: procs %d, %v", out.Procs, out.Header)
	}
	if got, want := strings.Join(out.Groups(), ","), "OneKey,Keys10k,Redis"; got != want {
		t.Errorf("groups %s, want %s", got, want)
	}
	if got, want := strings.Join(out.Units(), ","), "ns/op,B/op,allocs/op,allowed/op"; got != want {
		t.Errorf("units %s, want %s", got, want)
	}

	rows := Rows(out, "sluice")
	var table strings.Builder
	WriteTable(&table, rows, out.Units(), "sluice")
	if table.String() != wantTable {
		t.Errorf("table:\n%s\nwant:\n%s", table.String(), wantTable)
	}

	sums := Summarize(rows, "sluice", testTargets)
	var summary strings.Builder
	WriteSummary(&summary, sums, "sluice")
	if summary.String() != wantSummary {
		t.Errorf("summary:\n%s\nwant:\n%s", summary.String(), wantSummary)
	}
	if r := rows[1]; math.Abs(r.RefPerPeer-100.0/150.0) > 1e-12 {
		t.Errorf("OneKey/xtimerate: sluice/peer %v, want %v", r.RefPerPeer, 100.0/150.0)
	}
}

func TestSummaryWithoutRef(t *testing.T) {
	out, err := Parse(strings.NewReader("BenchmarkOneKey/xtimerate-2 10 150 ns/op\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := Summarize(Rows(out, "sluice"), "sluice", testTargets)
	if len(s) != 1 || s[0].Fastest != "xtimerate" || !math.IsNaN(s[0].Ratio) || s[0].Verdict() != "n/a" {
		t.Errorf("got %+v, verdict %s", s, s[0].Verdict())
	}
}

func TestSplitName(t *testing.T) {
	for _, c := range []struct {
		name, group, lib string
		procs            int
		ok               bool
	}{
		{"BenchmarkOneKey/sluice-2", "OneKey", "sluice", 2, true},
		{"BenchmarkOneKey/sluice", "OneKey", "sluice", 1, true},
		{"BenchmarkKeys10k/xtimerate-16", "Keys10k", "xtimerate", 16, true},
		{"BenchmarkRedis/go-redis/redis_rate-8", "Redis", "go-redis/redis_rate", 8, true},
		{"BenchmarkTopLevel-2", "", "", 0, false},
		{"BenchmarkOneKey/-2", "", "", 0, false},
		{"TestX/y", "", "", 0, false},
	} {
		g, l, p, ok := SplitName(c.name)
		if g != c.group || l != c.lib || p != c.procs || ok != c.ok {
			t.Errorf("SplitName(%q) = %q, %q, %d, %v; want %q, %q, %d, %v", c.name, g, l, p, ok, c.group, c.lib, c.procs, c.ok)
		}
	}
}

func TestParseMalformed(t *testing.T) {
	for _, in := range []string{
		"BenchmarkOneKey/sluice-2 10 100 ns/op 0\n",
		"BenchmarkOneKey/sluice-2 10 fast ns/op\n",
	} {
		if _, err := Parse(strings.NewReader(in)); err == nil {
			t.Errorf("Parse(%q): no error", in)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got, _ := median(c.xs); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
	if _, ok := median(nil); ok {
		t.Error("median(nil): ok")
	}
}

// TestBaseline: the group's Baseline row is no peer, and the others get
// their overhead over it.
func TestBaseline(t *testing.T) {
	out, err := Parse(strings.NewReader(`BenchmarkHTTP/none-2 10 100 ns/op 3 allocs/op
BenchmarkHTTP/sluice-2 10 400 ns/op 8 allocs/op
BenchmarkHTTP/httprate-2 10 500 ns/op 14 allocs/op
`))
	if err != nil {
		t.Fatal(err)
	}
	rows := Rows(out, "sluice")
	if got := Units(rows, out.Units()); strings.Join(got, ",") != "ns/op,allocs/op,over-ns/op,over-allocs/op" {
		t.Errorf("units %v", got)
	}
	if r := rows[1]; r.Median[overNs] != 300 || r.Median[overAllocs] != 5 {
		t.Errorf("sluice overhead %v", r.Median)
	}
	if _, ok := rows[0].Median[overNs]; ok || !math.IsNaN(rows[0].RefPerPeer) {
		t.Errorf("baseline row %+v", rows[0])
	}
	s := Summarize(rows, "sluice", map[string]float64{"HTTP": 1})
	if len(s) != 1 || s[0].Fastest != "httprate" || s[0].Verdict() != "PASS" {
		t.Errorf("summary %+v", s)
	}
}
