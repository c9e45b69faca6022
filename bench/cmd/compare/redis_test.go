package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/bench"
)

// redisSample is go test -bench output of the Redis groups.
const redisSample = `goos: linux
goarch: amd64
pkg: github.com/sluice-go/sluice/bench
cpu: AMD EPYC
BenchmarkRedisOneKey/sluice-2         	    8000	    100000 ns/op	         1.000 allowed/op	        20.00 srv-µs/op	    1784 B/op	      35 allocs/op
BenchmarkRedisOneKey/redis_rate-2     	   10000	     80000 ns/op	         1.000 allowed/op	        18.00 srv-µs/op	     688 B/op	      23 allocs/op
BenchmarkRedisKeys10k64/sluice-2      	   22356	     10000 ns/op	         1.000 allowed/op	        8.000 srv-µs/op	    1453 B/op	      28 allocs/op
BenchmarkRedisKeys10k64/redis_rate-2  	   28611	     25000 ns/op	         1.000 allowed/op	        18.00 srv-µs/op	     688 B/op	      23 allocs/op
BenchmarkRedisKeys10k64/sluice-nobatch-2	   10000	     20000 ns/op	         1.000 allowed/op	        18.00 srv-µs/op	    1440 B/op	      31 allocs/op
BenchmarkComposite/mem-single-2       	 7777428	       200.0 ns/op	         1.000 allowed/op	       0 B/op	       0 allocs/op
BenchmarkComposite/mem-composite-2    	 1000000	       500.0 ns/op	         1.000 allowed/op	     128 B/op	       1 allocs/op
BenchmarkComposite/redis-single-64g-2 	   23565	     40000 ns/op	         1.000 allowed/op	        30.00 srv-µs/op	    1459 B/op	      28 allocs/op
BenchmarkComposite/redis-composite-64g-2	   13113	     60000 ns/op	         1.000 allowed/op	        50.00 srv-µs/op	    2024 B/op	      36 allocs/op
BenchmarkOneKey/sluice-2         	  888136	       100.0 ns/op	         0.2500 allowed/op	       0 B/op	       0 allocs/op
PASS
`

func TestRedisTables(t *testing.T) {
	out, err := Parse(strings.NewReader(redisSample))
	if err != nil {
		t.Fatal(err)
	}
	rows := Rows(out, "sluice")
	ref, peer, ratio, verdict := RedisVerdict(rows)
	if ref != 1e5 || peer != 4e4 || ratio != 2.5 || verdict != "PASS" {
		t.Errorf("RedisVerdict = %v, %v, %v, %s; want 1e5, 4e4, 2.5, PASS", ref, peer, ratio, verdict)
	}

	red := *out
	red.Results = nil
	for _, r := range out.Results {
		if isRedisGroup(r.Group) {
			red.Results = append(red.Results, r)
		}
	}
	live := &RedisRun{Server: "redis-server test", Ceilings: []*Ceiling{
		{Name: "ceiling-64", Group: redisConc, RPS: []float64{90000, 100000, 110000}, Cmdline: "redis-benchmark -c 64"},
	}}
	var b strings.Builder
	writeRedis(&b, &red, live, ".", "go test", "")
	got := b.String()
	for _, want := range []string{
		"| sluice | 1 | 100000 | 10000.0 | 1453 | 28 | 1 | 8.0 | 2.50 |",
		"| redis_rate | 1 | 40000 | 25000.0 | 688 | 23 | 1 | 18.0 | 1.00 |",
		"| sluice-nobatch | 1 | 50000 | 20000.0 | 1440 | 31 | 1 | 18.0 | 1.25 |",
		"| *ceiling-64* | 3 | 100000 | 10000.0 | — | — | — | — | 2.50 |",
		"| sluice ≥ 2× redis_rate decisions/s at 64 goroutines (RedisKeys10k64) | 100000 | 40000 | 2.50× | PASS |",
		"| mem-composite | 1 | 2000000 | 500.0 | 128 | 1 | 1 | — | 2.50 |",
		"| redis-composite-64g | 1 | 16667 | 60000.0 | 2024 | 36 | 1 | 50.0 | 1.50 |",
		"| redis-single-64g | 1 | 25000 | 40000.0 | 1459 | 28 | 1 | 30.0 | — |",
		"redis-benchmark -c 64\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Redis section lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "OneKey | sluice") || strings.Contains(got, "0.250") {
		t.Errorf("Redis section shows an in-memory row:\n%s", got)
	}
}

func TestRedisVerdictMiss(t *testing.T) {
	out, err := Parse(strings.NewReader("BenchmarkRedisKeys10k64/sluice-2 10 30000 ns/op\nBenchmarkRedisKeys10k64/redis_rate-2 10 40000 ns/op\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, r, v := RedisVerdict(Rows(out, "sluice")); v != "MISS" || r < 1.33 || r > 1.34 {
		t.Errorf("verdict %s, ratio %v; want MISS, 1.33", v, r)
	}
	if _, _, _, v := RedisVerdict(nil); v != "n/a" {
		t.Errorf("verdict without rows: %s, want n/a", v)
	}
}

func TestParseRPS(t *testing.T) {
	out := "EVALSHA e0e1 0: rps=224446.2 (overall: 260621.5) avg_msec=4.380 (overall: 3.711)\r" +
		"                  \r" +
		"EVALSHA e0e1 0: 266666.66 requests per second, p50=3.023 msec\n\n"
	if got, err := ParseRPS(out); err != nil || got != 266666.66 {
		t.Errorf("ParseRPS = %v, %v; want 266666.66", got, err)
	}
	if _, err := ParseRPS("Could not connect to Redis at 127.0.0.1:1: Connection refused\n"); err == nil {
		t.Error("ParseRPS of an error: no error")
	}
}

func TestShellJoin(t *testing.T) {
	if got, want := shellJoin([]string{"test", "-bench", "^Benchmark(A|B)$", "-x", ""}), `test -bench '^Benchmark(A|B)$' -x ''`; got != want {
		t.Errorf("shellJoin = %s, want %s", got, want)
	}
}

// prepareRedis accepts what sluice's script replies to the command
// redis-benchmark will send: once, it counted five values where the
// scripts had come to reply six, and -redis-only failed before measuring.
func TestPrepareRedis(t *testing.T) {
	srv, err := bench.StartRedis()
	if errors.Is(err, bench.ErrNoRedisServer) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	sha, args, version, err := prepareRedis(context.Background(), srv.Addr)
	if err != nil || sha == "" || len(args) < 4 || args[0] != "EVALSHA" || version == "" {
		t.Fatalf("prepareRedis: %q %q %q %v", sha, args, version, err)
	}
}
