package bench

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	ulule "github.com/ulule/limiter/v3"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/redisstore"
	"github.com/sluice-go/sluice/store"
)

// The test binary's redis-server: started on first use (or taken from
// RedisEnv), stopped by TestMain.
var (
	redisOnce sync.Once
	redisSrv  *RedisServer
	redisErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := redisSrv.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "bench: stopping redis-server:", err)
	}
	os.Exit(code)
}

// redisAddr returns the address of the test binary's Redis server, and skips
// tb when there is none to start.
func redisAddr(tb testing.TB) string {
	tb.Helper()
	redisOnce.Do(func() { redisSrv, redisErr = StartRedis() })
	if errors.Is(redisErr, ErrNoRedisServer) {
		tb.Skipf("SKIPPING: %v; install redis-server or set %s=host:port", redisErr, RedisEnv)
	}
	if redisErr != nil {
		tb.Fatal(redisErr)
	}
	return redisSrv.Addr
}

// newRedisClient returns a client with RedisOptions, closed when tb ends.
func newRedisClient(tb testing.TB, addr string) *redis.Client {
	c := redis.NewClient(RedisOptions(addr))
	tb.Cleanup(func() { c.Close() })
	return c
}

// A redisTaker answers one request for key: whether it passed.
type redisTaker func(key string) (bool, error)

// newRedisTakers builds each Redis library over a client, set to Rate and
// Burst.
var newRedisTakers = map[string]func(tb testing.TB, c *redis.Client) redisTaker{
	Ref: func(tb testing.TB, c *redis.Client) redisTaker { return sluiceRedis(tb, c) },
	NoBatch: func(tb testing.TB, c *redis.Client) redisTaker {
		return sluiceRedis(tb, c, redisstore.WithoutBatching())
	},
	Peer: func(tb testing.TB, c *redis.Client) redisTaker {
		lim := redis_rate.NewLimiter(c)
		l := redis_rate.Limit{Rate: Rate, Burst: Burst, Period: time.Second}
		return func(key string) (bool, error) {
			res, err := lim.Allow(ctx, key, l)
			if err != nil {
				return false, err
			}
			return res.Allowed > 0, nil
		}
	},
	"ulule": func(tb testing.TB, c *redis.Client) redisTaker {
		st, err := ululeredis.NewStore(c)
		if err != nil {
			tb.Fatal(err)
		}
		lim := ulule.New(st, ulule.Rate{Period: Window, Limit: Burst})
		return func(key string) (bool, error) {
			res, err := lim.Get(ctx, key)
			return !res.Reached, err
		}
	},
}

func sluiceRedis(tb testing.TB, c *redis.Client, opts ...redisstore.Option) redisTaker {
	st, err := redisstore.New(c, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	lim := sluice.New(st)
	l := sluice.PerSecond(Rate).WithBurst(Burst)
	return func(key string) (bool, error) {
		res, err := lim.Take(ctx, key, l, 1)
		return res.Allowed, err
	}
}

type redisLib struct {
	name string
	new  func(tb testing.TB, c *redis.Client) redisTaker
}

// redisLibs returns the Redis takers in the order of RedisLibs.
func redisLibs(tb testing.TB) []redisLib {
	if len(RedisLibs) != len(newRedisTakers) {
		tb.Fatalf("RedisLibs lists %d libraries, newRedisTakers %d", len(RedisLibs), len(newRedisTakers))
	}
	out := make([]redisLib, len(RedisLibs))
	for i, l := range RedisLibs {
		nt, ok := newRedisTakers[l.Name]
		if !ok {
			tb.Fatalf("no Redis taker for %q", l.Name)
		}
		out[i] = redisLib{l.Name, nt}
	}
	return out
}

// An op is the i-th request of a workload: whether it passed.
type op func(i int) (bool, error)

// A probe reads the server's time spent in scripts (ScriptMicros); nil for
// no server.
type probe func() int64

// redisProbe returns the probe of the server at addr, over its own client.
func redisProbe(tb testing.TB, addr string) probe {
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, PoolSize: 1})
	tb.Cleanup(func() { c.Close() })
	return func() int64 {
		us, err := ScriptMicros(ctx, c)
		if err != nil {
			tb.Fatal(err)
		}
		return us
	}
}

// reportServer reports the server's time in scripts per request, srv-µs/op,
// from the probe's readings before and after the timed loop.
func reportServer(b *testing.B, p probe, before int64) {
	if p != nil {
		b.ReportMetric(float64(p()-before)/float64(b.N), "srv-µs/op")
	}
}

// serial runs op b.N times in a row (b.Loop) and reports allowed/op and,
// with a probe, srv-µs/op.
func serial(b *testing.B, o op, p probe) {
	b.ReportAllocs()
	var before int64
	if p != nil {
		before = p()
	}
	n, i := 0, 0
	for b.Loop() {
		ok, err := o(i)
		if err != nil {
			b.Fatal(err)
		}
		if ok {
			n++
		}
		i++
	}
	b.ReportMetric(float64(n)/float64(b.N), "allowed/op")
	reportServer(b, p, before)
}

// concurrent runs op b.N times from exactly Callers goroutines, each taking
// the next request as soon as it is free, and reports allowed/op and, with a
// probe, srv-µs/op.
func concurrent(b *testing.B, o op, p probe) {
	b.ReportAllocs()
	var allowed atomic.Int64
	var before int64
	if p != nil {
		before = p()
	}
	b.ResetTimer()
	err := Spread(b.N, Callers, func(_, i int) error {
		ok, err := o(i)
		if ok {
			allowed.Add(1)
		}
		return err
	})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(allowed.Load())/float64(b.N), "allowed/op")
	reportServer(b, p, before)
}

// touch makes one request on each of n keys from Callers goroutines.
func touch(tb testing.TB, n int, o op) {
	if err := Spread(n, Callers, func(_, i int) error { _, err := o(i); return err }); err != nil {
		tb.Fatal(err)
	}
}

func userKeys() []string {
	keys := make([]string, Keys)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	return keys
}

// BenchmarkRedisOneKey takes from one key, serially, over one Redis server.
func BenchmarkRedisOneKey(b *testing.B) {
	addr := redisAddr(b)
	const key = "user:42"
	for _, l := range redisLibs(b) {
		b.Run(l.name, func(b *testing.B) {
			take := l.new(b, newRedisClient(b, addr))
			if _, err := take(key); err != nil {
				b.Fatal(err)
			}
			serial(b, func(int) (bool, error) { return take(key) }, redisProbe(b, addr))
		})
	}
}

// BenchmarkRedisKeys10k64 takes from Keys keys, round-robin, from Callers
// goroutines over one Redis server. Every key is touched before the timer
// starts.
func BenchmarkRedisKeys10k64(b *testing.B) {
	addr := redisAddr(b)
	keys := userKeys()
	for _, l := range redisLibs(b) {
		b.Run(l.name, func(b *testing.B) {
			take := l.new(b, newRedisClient(b, addr))
			o := func(i int) (bool, error) { return take(keys[i%len(keys)]) }
			touch(b, len(keys), o)
			concurrent(b, o, redisProbe(b, addr))
		})
	}
}

// BenchmarkComposite compares a composite decision (TakeAll of a per-chat
// and a global token bucket) with a single one (Take of the per-chat bucket)
// on the same keys: in memory and over Redis, where the two keys share a
// {hash tag} and the composite is one script; serially and from Callers
// goroutines.
func BenchmarkComposite(b *testing.B) {
	parts := make([][]sluice.Part, Keys)
	for i := range parts {
		parts[i] = []sluice.Part{{Key: ChatKey(i), Limit: ChatLimit, Cost: 1}, {Key: GlobalKey, Limit: GlobalLimit, Cost: 1}}
	}
	for _, store := range []string{"mem", "redis"} {
		for _, callers := range []int{1, Callers} {
			for _, kind := range []string{"single", "composite"} {
				name := store + "-" + kind
				if callers > 1 {
					name += fmt.Sprintf("-%dg", callers)
				}
				b.Run(name, func(b *testing.B) {
					var lim *sluice.Limiter
					var p probe
					if store == "mem" {
						lim = sluice.New(memstoreNew())
					} else {
						addr := redisAddr(b)
						st, err := redisstore.New(newRedisClient(b, addr))
						if err != nil {
							b.Fatal(err)
						}
						b.Cleanup(func() { st.Close() })
						lim = sluice.New(st)
						p = redisProbe(b, addr)
					}
					o := func(i int) (bool, error) {
						pt := parts[i%Keys]
						res, err := lim.Take(ctx, pt[0].Key, pt[0].Limit, 1)
						return res.Allowed, err
					}
					if kind == "composite" {
						o = func(i int) (bool, error) {
							res, err := lim.TakeAll(ctx, parts[i%Keys], nil)
							return res.Allowed, err
						}
					}
					touch(b, Keys, o)
					if callers == 1 {
						serial(b, o, p)
					} else {
						concurrent(b, o, p)
					}
				})
			}
		}
	}
}

// TestRedisSameLimit checks that every Redis library works over the client
// and lets at least Burst requests through on a fresh key. (At a round trip
// per request, the refill outpaces any loop, so no upper bound can be
// checked.)
func TestRedisSameLimit(t *testing.T) {
	addr := redisAddr(t)
	for _, l := range redisLibs(t) {
		t.Run(l.name, func(t *testing.T) {
			take := l.new(t, newRedisClient(t, addr))
			key := fmt.Sprintf("same:%d", time.Now().UnixNano())
			var n atomic.Int64
			err := Spread(Burst, Callers, func(_, _ int) error {
				ok, err := take(key)
				if ok {
					n.Add(1)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if n.Load() != Burst {
				t.Errorf("%d of a burst of %d passed on a fresh key", n.Load(), Burst)
			}
		})
	}
}

// TestOneRoundTrip checks with the server's command statistics that every
// sluice decision, composite or not, serial or concurrent, batched or not, is
// made inside a script, one round trip at most (under load the batcher puts
// many decisions in one script), and that clients send nothing else.
func TestOneRoundTrip(t *testing.T) {
	addr := redisAddr(t)
	const n = 1000
	rs, err := MeasureRoundTrips(ctx, addr, n)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		t.Logf("%s: %d decisions, %d EVALSHA, %d EVAL, other client commands: %s; %d client round trips; inside the script, per decision: %s", r.Mode, r.Decisions, r.EvalSha, r.Eval, r.OtherString(), r.RoundTrips, r.InScriptString())
		if !r.OK() {
			t.Errorf("%s: %.3f script calls per decision (want at most 1), other commands: %s", r.Mode, r.ScriptCalls(), r.OtherString())
		}
		if r.Eval != 0 {
			t.Errorf("%s: %d EVAL: the script should be loaded, EVALSHA only", r.Mode, r.Eval)
		}
		if r.RoundTrips > int64(r.Decisions) {
			t.Errorf("%s: %d round trips for %d decisions", r.Mode, r.RoundTrips, r.Decisions)
		}
	}
}

func memstoreNew() store.Store { return memstore.New() }
