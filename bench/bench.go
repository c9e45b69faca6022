// Package bench compares sluice's in-process limiter with the Go rate
// limiters users reach for instead: golang.org/x/time/rate (one *rate.Limiter
// per key in a sync.Map), github.com/sethvargo/go-limiter (memorystore),
// github.com/ulule/limiter/v3 (memory store) and
// github.com/throttled/throttled/v2 (GCRA over its memstore).
//
// It is a module of its own so that the peers never enter the library's
// go.mod; its go.mod replaces github.com/sluice-go/sluice with the working
// tree (../), so the numbers are always those of the code next to it.
//
// Over Redis it compares sluice's redisstore with
// github.com/go-redis/redis_rate/v10 and ulule's Redis store, all over the
// same go-redis client options against one redis-server (redis.go starts it).
//
// The benchmarks live in bench_test.go and redis_test.go and only run with
// -bench:
//
//	BenchmarkOneKey/<lib>          one key, serial
//	BenchmarkKeys10k/<lib>         Keys pre-warmed keys, round-robin, b.RunParallel
//	BenchmarkRedisOneKey/<lib>     one key, serial, over Redis
//	BenchmarkRedisKeys10k64/<lib>  Keys keys, round-robin, Callers goroutines, over Redis
//	BenchmarkComposite/<variant>   TakeAll of 2 parts vs Take, memory and Redis
//	BenchmarkHTTP/<lib>            net/http middleware per admitted request, in process
//
// cmd/compare runs them and prints a Markdown table of medians and ratios.
package bench

import (
	"fmt"
	"time"
)

// The limit every library is held to: Rate units per second with a burst of
// Burst. Libraries with a token bucket or GCRA take the pair directly; the
// window-based ones (go-limiter, ulule) get Burst units per Window, which is
// the same average rate and the same largest instantaneous burst.
const (
	Rate  = 1_000_000
	Burst = 1000
	// Window is the interval over which Burst units are Rate per second.
	Window = time.Second * Burst / Rate
)

// Keys is the number of distinct keys in the Keys10k workload.
const Keys = 10_000

// Ref is the library name the peers are compared with.
const Ref = "sluice"

// Baseline names the row of a group that measures the work without any
// library (BenchmarkHTTP/none: the handler alone). It is not a peer: the
// others' overhead is their figures minus its.
const Baseline = "none"

// LimitString describes the limit in words, for the output of cmd/compare.
func LimitString() string {
	return fmt.Sprintf("%d per second, burst %d (window libraries: %d per %v)", Rate, Burst, Burst, Window)
}

// Lib names a library in the comparison, its module, and how it is set up to
// the limit.
type Lib struct {
	Name   string // the sub-benchmark name, as in BenchmarkOneKey/<Name>
	Module string // the module path whose pinned version is reported
	Setup  string // how the library is configured and called
}

// Libs lists the libraries in the order the benchmarks run them, sluice first.
var Libs = []Lib{
	{Ref, "github.com/sluice-go/sluice",
		fmt.Sprintf("memstore.New(); Take(ctx, key, PerSecond(%d).WithBurst(%d), 1) (token bucket)", Rate, Burst)},
	{"xtimerate", "golang.org/x/time",
		fmt.Sprintf("sync.Map key → rate.NewLimiter(%d, %d) (Load, LoadOrStore on a miss); Allow()", Rate, Burst)},
	{"sethvargo", "github.com/sethvargo/go-limiter",
		fmt.Sprintf("memorystore.New(Tokens: %d, Interval: %v); Take(ctx, key)", Burst, Window)},
	{"ulule", "github.com/ulule/limiter/v3",
		fmt.Sprintf("limiter.New(memory.NewStore(), Rate{Limit: %d, Period: %v}); Get(ctx, key) (fixed window)", Burst, Window)},
	{"throttled", "github.com/throttled/throttled/v2",
		fmt.Sprintf("NewGCRARateLimiterCtx(memstore.NewCtx(0), RateQuota{PerSec(%d), MaxBurst: %d}); RateLimitCtx(ctx, key, 1) (GCRA; MaxBurst n admits n+1)", Rate, Burst-1)},
}

// HTTPLibs lists the middlewares of BenchmarkHTTP, each keyed on the client
// IP (RemoteAddr) and wrapping the same trivial handler.
var HTTPLibs = []Lib{
	{Baseline, "", "the handler alone, no middleware"},
	{Ref, "github.com/sluice-go/sluice",
		fmt.Sprintf("httplimit.New(sluice.New(memstore.New()), []Policy{{Name: \"ip\", Limit: PerSecond(%d).WithBurst(%d)}}).Handler (key: ClientIP, the default)", Rate, Burst)},
	{Ref + "-bare", "github.com/sluice-go/sluice",
		"sluice as above, with httplimit.WithoutDecisionContext() (the next handler gets the request uncopied: no Refund or DecisionFrom there); a variant, not a peer"},
	{"httprate", "github.com/go-chi/httprate",
		fmt.Sprintf("LimitBy(%d, %v, RemoteAddr's host through CanonicalizeIP (KeyByIP's body)) (sliding window, local counter)", Burst, Window)},
	{"sethvargo", "github.com/sethvargo/go-limiter",
		fmt.Sprintf("httplimit.NewMiddleware(memorystore.New(Tokens: %d, Interval: %v), IPKeyFunc()).Handle", Burst, Window)},
	{"tollbooth", "github.com/didip/tollbooth/v7",
		fmt.Sprintf("LimitHandler(NewLimiter(%d, nil).SetBurst(%d).SetIPLookups([RemoteAddr]).SetIgnoreURL(true)) (x/time/rate per key)", Rate, Burst)},
	{"ulule", "github.com/ulule/limiter/v3",
		fmt.Sprintf("drivers/middleware/stdlib.NewMiddleware(limiter.New(memory.NewStore(), Rate{Limit: %d, Period: %v})).Handler", Burst, Window)},
}
