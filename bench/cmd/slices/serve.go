package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/bench"
	"github.com/sluice-go/sluice/bench/rls"
)

// serveRun is one `sluice serve` measured on the hot descriptor.
type serveRun struct {
	name    string
	m       *rls.Measurement
	scripts int64 // Redis script calls over the measured run
}

// runServe measures `sluice serve` (built from this working tree) on one
// hot descriptor (rls's value u0, 1,000,000/s: above demand): in memory,
// over Redis, and over Redis with --store-slices, each in turn with
// c.callers callers over the h2 load generator; it reports calls/s, the
// server's and Redis's CPU per call, and Redis script calls per call.
func runServe(c *config, w io.Writer) error {
	ctx := context.Background()
	modDir, err := rls.ModuleDir(ctx)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "sluice-slices-serve-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Fprintln(os.Stderr, "building sluice serve ...")
	bin, err := rls.BuildSluice(ctx, modDir, dir)
	if err != nil {
		return err
	}
	files, err := rls.WriteConfig(dir)
	if err != nil {
		return err
	}
	srv, err := bench.StartRedis()
	if err != nil {
		return err
	}
	defer srv.Stop()
	rc := redis.NewClient(bench.RedisOptions(srv.Addr))
	defer rc.Close()
	var runs []serveRun
	for _, k := range []struct{ name, store, kind string }{
		{"memory", "memory", "memory"},
		{"redis", "redis://" + srv.Addr, "redis"},
		{"redis, slices " + c.life.String(), "redis://" + srv.Addr, "redis-slices"},
	} {
		var flags []string
		if k.kind == "redis-slices" {
			flags = []string{"--store-slices", c.life.String()}
		}
		s, err := rls.StartSluiceFlags(ctx, bin, dir, files, k.store, k.kind, flags, nil)
		if err != nil {
			return err
		}
		r, err := measureServe(ctx, c, rc, srv, s, k.name)
		_ = s.Stop()
		if err != nil {
			return err
		}
		runs = append(runs, r)
	}
	reportServe(w, c, runs)
	return nil
}

// measureServe warms s up on the hot descriptor, then measures it for
// c.duration, counting Redis's script calls over the measured run only.
func measureServe(ctx context.Context, c *config, rc *redis.Client, srv *bench.RedisServer, s *rls.Server, name string) (serveRun, error) {
	fmt.Fprintf(os.Stderr, "serve %s ...\n", name)
	if err := rc.FlushAll(ctx).Err(); err != nil {
		return serveRun{}, err
	}
	o := rls.Options{Callers: c.callers, Conns: 4, Duration: 2 * time.Second, Values: []string{"u0"}}
	if _, err := rls.Measure(ctx, s, srv.Pid(), o, 0); err != nil {
		return serveRun{}, err
	}
	if err := rc.ConfigResetStat(ctx).Err(); err != nil {
		return serveRun{}, err
	}
	o.Duration = c.duration
	m, err := rls.Measure(ctx, s, srv.Pid(), o, 0)
	if err != nil {
		return serveRun{}, err
	}
	info, err := rc.Info(ctx, "commandstats").Result()
	if err != nil {
		return serveRun{}, err
	}
	return serveRun{name: name, m: m, scripts: scriptCalls(info)}, nil
}

func reportServe(w io.Writer, c *config, runs []serveRun) {
	fmt.Fprintf(w, "`sluice serve`, one hot descriptor (1,000,000/s, above demand), %d callers over HTTP/2, %v per server in turn:\n\n", c.callers, c.duration)
	fmt.Fprintln(w, "| store | calls/s | errors | server CPU µs/call | Redis CPU µs/call | Redis calls per 100 calls |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
	for _, r := range runs {
		calls := max(r.m.Calls, 1)
		fmt.Fprintf(w, "| %s | %.0f | %d | %.2f | %.2f | %.3f |\n", r.name, r.m.Rate(), r.m.Errors,
			us(r.m.ServerCPU)/float64(calls), us(r.m.RedisCPU)/float64(calls), 100*float64(r.scripts)/float64(calls))
	}
	if len(runs) == 3 {
		mem, sliced := runs[0].m, runs[2].m
		ratio := (us(sliced.ServerCPU) / float64(max(sliced.Calls, 1))) / (us(mem.ServerCPU) / float64(max(mem.Calls, 1)))
		fmt.Fprintf(w, "\nServer CPU per call with slices ÷ in memory: %.2f (target ≤ 1.10); Redis calls per 100 calls with slices: %.3f (target ≤ 1).\n",
			ratio, 100*float64(runs[2].scripts)/float64(max(sliced.Calls, 1)))
	}
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
