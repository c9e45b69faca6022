package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/redisstore"
)

// BenchmarkEach is a composite of two parts whose caller needs each part's
// figures, on one standalone server: TakeAll with each (one script)
// against TakeAll and a look at each part (what the middleware did
// before), admitted and refused.
func BenchmarkEach(b *testing.B) {
	c := redistest.Shared(b).Client()
	for _, refused := range []bool{false, true} {
		global := sluice.PerSecond(1_000_000_000).WithBurst(1_000_000)
		if refused {
			global = sluice.PerHour(1)
		}
		for _, way := range []string{"TakeAll(each)", "TakeAll+looks"} {
			b.Run(fmt.Sprintf("refused=%v/%s", refused, way), func(b *testing.B) {
				s := newGoRedis(b, c, redisstore.WithPrefix(fmt.Sprintf("bench:%d:", time.Now().UnixNano())))
				defer s.Close()
				lim := sluice.New(s)
				parts := []sluice.Part{
					{Key: "{t}chat:1", Limit: sluice.PerSecond(1_000_000_000).WithBurst(1_000_000), Cost: 1},
					{Key: "{t}global", Limit: global, Cost: 1},
				}
				ctx := context.Background()
				each := make([]sluice.Result, len(parts))
				b.ReportAllocs()
				for b.Loop() {
					if way == "TakeAll(each)" {
						if _, err := lim.TakeAll(ctx, parts, each); err != nil {
							b.Fatal(err)
						}
						continue
					}
					if _, err := lim.TakeAll(ctx, parts, nil); err != nil {
						b.Fatal(err)
					}
					for i, p := range parts {
						r, err := lim.Take(ctx, p.Key, p.Limit, 0)
						if err != nil {
							b.Fatal(err)
						}
						each[i] = r
					}
				}
			})
		}
	}
}
