package redisstore_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/redisstore"
)

// BenchmarkTake is a Limiter's take on one standalone server: serially (a
// round trip each) and from 64 goroutines on 8 keys (the calls share
// pipelines and multi-decision scripts).
func BenchmarkTake(b *testing.B) {
	benchDecisions(b, "takebench", func(ctx context.Context, l *sluice.Limiter, key string, lim sluice.Limit) (sluice.Result, error) {
		return l.Take(ctx, key, lim, 1)
	})
}

// BenchmarkCharge is BenchmarkTake's load of charges (Limiter.Charge of 1
// unit, never in debt): one script each (charge.lua), sharing pipelines
// but not scripts.
func BenchmarkCharge(b *testing.B) {
	benchDecisions(b, "chargebench", func(ctx context.Context, l *sluice.Limiter, key string, lim sluice.Limit) (sluice.Result, error) {
		return l.Charge(ctx, key, lim, 1)
	})
}

// benchDecisions runs decide, each call allowed, under a limit that never
// refuses: serially on one key, and from 64 goroutines on 8 keys. Besides
// the round trip (ns/op) it reports the server's time in the scripts a
// decision ran (server-µs/op, INFO commandstats: BenchmarkHoldAt's).
func benchDecisions(b *testing.B, name string, decide func(context.Context, *sluice.Limiter, string, sluice.Limit) (sluice.Result, error)) {
	c := redistest.Shared(b).Client()
	ctx := context.Background()
	lim := sluice.PerSecond(1_000_000_000).WithBurst(1_000_000_000)
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"}
	for _, par := range []int{1, 64} {
		b.Run(fmt.Sprintf("goroutines=%d", par), func(b *testing.B) {
			s := newGoRedis(b, c, redisstore.WithPrefix(fmt.Sprintf("%s:%d:", name, time.Now().UnixNano())))
			defer s.Close()
			l := sluice.New(s)
			b.ReportAllocs()
			before := evalUsec(b, c)
			defer func() { b.ReportMetric((evalUsec(b, c)-before)/float64(b.N), "server-µs/op") }()
			if par == 1 {
				for b.Loop() {
					if r, err := decide(ctx, l, "k0", lim); err != nil || !r.Allowed {
						b.Fatal(r, err)
					}
				}
				return
			}
			b.SetParallelism(max(1, par/runtime.GOMAXPROCS(0)))
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					if r, err := decide(ctx, l, keys[i%len(keys)], lim); err != nil || !r.Allowed {
						b.Error(r, err)
						return
					}
				}
			})
		})
	}
}
