package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	throttledmem "github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/memstore"
)

var ctx = context.Background()

// A taker answers one request for key: whether it passed. Errors are not
// expected with in-memory stores; a taker panics on one.
type taker func(key string) bool

// newTakers builds a fresh limiter per library, set to Rate and Burst. Each
// run of a benchmark function gets its own, so no state leaks between runs.
var newTakers = map[string]func(tb testing.TB) taker{
	Ref: func(tb testing.TB) taker {
		lim := sluice.New(memstore.New())
		l := sluice.PerSecond(Rate).WithBurst(Burst)
		return func(key string) bool {
			res, err := lim.Take(ctx, key, l, 1)
			if err != nil {
				panic(err)
			}
			return res.Allowed
		}
	},
	"xtimerate": func(tb testing.TB) taker {
		var m sync.Map // key → *rate.Limiter
		return func(key string) bool {
			v, ok := m.Load(key)
			if !ok {
				v, _ = m.LoadOrStore(key, rate.NewLimiter(Rate, Burst))
			}
			return v.(*rate.Limiter).Allow()
		}
	},
	"sethvargo": func(tb testing.TB) taker {
		st, err := memorystore.New(&memorystore.Config{Tokens: Burst, Interval: Window})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { st.Close(ctx) })
		return func(key string) bool {
			_, _, _, ok, err := st.Take(ctx, key)
			if err != nil {
				panic(err)
			}
			return ok
		}
	},
	"ulule": func(tb testing.TB) taker {
		lim := ulule.New(ululemem.NewStore(), ulule.Rate{Period: Window, Limit: Burst})
		return func(key string) bool {
			c, err := lim.Get(ctx, key)
			if err != nil {
				panic(err)
			}
			return !c.Reached
		}
	},
	"throttled": func(tb testing.TB) taker {
		st, err := throttledmem.NewCtx(0) // 0: a plain map, no LRU bookkeeping
		if err != nil {
			tb.Fatal(err)
		}
		// throttled admits MaxBurst+1 units at once.
		lim, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerSec(Rate), MaxBurst: Burst - 1})
		if err != nil {
			tb.Fatal(err)
		}
		return func(key string) bool {
			limited, _, err := lim.RateLimitCtx(ctx, key, 1)
			if err != nil {
				panic(err)
			}
			return !limited
		}
	},
}

type lib struct {
	name string
	new  func(tb testing.TB) taker
}

// libs returns the takers in the order of Libs.
func libs(tb testing.TB) []lib {
	if len(Libs) != len(newTakers) {
		tb.Fatalf("Libs lists %d libraries, newTakers %d", len(Libs), len(newTakers))
	}
	out := make([]lib, len(Libs))
	for i, l := range Libs {
		nt, ok := newTakers[l.Name]
		if !ok {
			tb.Fatalf("no taker for %q", l.Name)
		}
		out[i] = lib{l.Name, nt}
	}
	return out
}

// BenchmarkOneKey takes from one key, serially.
func BenchmarkOneKey(b *testing.B) {
	const key = "user:42"
	for _, l := range libs(b) {
		b.Run(l.name, func(b *testing.B) {
			b.ReportAllocs()
			take := l.new(b)
			take(key)
			n := 0
			for b.Loop() {
				if take(key) {
					n++
				}
			}
			b.ReportMetric(float64(n)/float64(b.N), "allowed/op")
		})
	}
}

// BenchmarkKeys10k takes from Keys keys, round-robin, from b.RunParallel
// goroutines that each start at a different offset. Every key exists before
// the timer starts.
func BenchmarkKeys10k(b *testing.B) {
	keys := make([]string, Keys)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	for _, l := range libs(b) {
		b.Run(l.name, func(b *testing.B) {
			b.ReportAllocs()
			take := l.new(b)
			for _, k := range keys {
				take(k)
			}
			var goroutines atomic.Uint64
			var allowed atomic.Int64
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(goroutines.Add(1) * 2654435761 % Keys)
				n := int64(0)
				for pb.Next() {
					if take(keys[i]) {
						n++
					}
					if i++; i == len(keys) {
						i = 0
					}
				}
				allowed.Add(n)
			})
			b.ReportMetric(float64(allowed.Load())/float64(b.N), "allowed/op")
		})
	}
}

// TestSameLimit checks that every library is set to the same limit: a fresh
// key lets at least Burst requests through at once, and no more than the
// refill over the loop's time allows.
func TestSameLimit(t *testing.T) {
	for _, l := range libs(t) {
		t.Run(l.name, func(t *testing.T) {
			take := l.new(t)
			for k := range 3 {
				key := fmt.Sprintf("k%d", k)
				start := time.Now()
				n := 0
				for range 3 * Burst {
					if take(key) {
						n++
					}
				}
				elapsed := time.Since(start)
				// A token bucket refills Rate·elapsed; a window library may
				// open a new window of Burst per Window elapsed, plus one.
				most := Burst + max(int(elapsed.Seconds()*Rate)+1, Burst*(1+int(elapsed/Window)))
				if n < Burst || n > most {
					t.Errorf("key %s: %d of %d passed in %v, want %d to %d", key, n, 3*Burst, elapsed, Burst, most)
				}
			}
		})
	}
}
