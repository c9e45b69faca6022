package redisstore_test

// Fault tests of the Redis store against real redis-server processes: the
// script cache flushed under load, a server killed and started again under
// load (per failure policy), a server that accepts connections and never
// answers, and a server that stalls.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/storetest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/redisstore"
)

// hour is one hour in µs: with one unit per hour, a limit admits its burst
// and then nothing for the length of a test.
const hour = int64(3_600_000_000)

// burstOnly returns, for every algorithm, a limit that admits exactly n units
// within a test and nothing more.
func burstOnly(n int64) []algo.Params {
	return []algo.Params{
		{Kind: algo.TokenBucket, Rate: 1, Period: hour, Burst: n},
		{Kind: algo.GCRA, Rate: 1, Period: hour, Burst: n},
		{Kind: algo.LeakyBucket, Rate: 1, Period: hour, Burst: n - 1},
		{Kind: algo.FixedWindow, Rate: n, Period: hour},
		// Windows aligned to multiples of 2^40µs (12.7 days) since the
		// epoch: a test does not see a seam.
		{Kind: algo.SlidingWindow, Rate: n, Period: 1 << 40},
		{Kind: algo.SlidingLog, Rate: n, Period: hour},
	}
}

// countingClient passes calls to a real client and counts the round trips,
// those that carried more than one call (a pipeline), and the calls that
// carried several decisions (the batcher's multi-decision scripts).
type countingClient struct {
	redisrun.Client
	runs, multi, merged atomic.Int64
}

// Group passes on the real client's routing (see redisrun.Router).
func (c *countingClient) Group(key string) (uint64, bool) {
	if r, ok := c.Client.(redisrun.Router); ok {
		return r.Group(key)
	}
	return 0, false
}

func (c *countingClient) Run(ctx context.Context, calls []*redisrun.Call) {
	c.runs.Add(1)
	if len(calls) > 1 {
		c.multi.Add(1)
	}
	for _, call := range calls {
		if len(call.Keys) > 1 {
			c.merged.Add(1)
		}
	}
	c.Client.Run(ctx, calls)
}

// noScriptErrors returns how many NOSCRIPT errors the server at addr has
// replied since it started (INFO errorstats).
func noScriptErrors(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "errorstats").Result()
	if err != nil {
		t.Fatalf("INFO errorstats: %v", err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_NOSCRIPT:count="); ok {
			n, err := strconv.ParseInt(rest, 10, 64)
			if err != nil {
				t.Fatalf("INFO errorstats: %q: %v", line, err)
			}
			return n
		}
	}
	return 0
}

// flushUnderLoad runs workers taking decisions through st (all seven
// algorithms, limits admitting exactly n units per key, costs 0 to 2) while
// flush empties the script cache several times. No call may fail, and every
// key must have admitted exactly n units once drained.
func flushUnderLoad(t *testing.T, st *redisstore.Store, flush func(ctx context.Context, i int) error) {
	t.Helper()
	const n, keysPer = 20, 3
	flushes, workers := 8, 6
	gap := 60 * time.Millisecond
	if !testenv.Long() {
		flushes, gap = 4, 40*time.Millisecond
	}
	ps := burstOnly(n)
	type slot struct{ admitted, decisions atomic.Int64 }
	slots := make([]slot, len(ps)*keysPer)
	keyOf := func(i int) string { return fmt.Sprintf("%s:%d", ps[i/keysPer].Kind, i%keysPer) }
	ctx := context.Background()

	var failures atomic.Int64
	fail := func(format string, args ...any) {
		if failures.Add(1) <= 5 {
			t.Errorf(format, args...)
		}
	}
	take := func(i int, cost int64) (sluice.Result, error) {
		return take(ctx, st, storelink.Request{Key: keyOf(i), Params: ps[i/keysPer], Cost: cost, MaxDelay: algo.Never})
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			costs := []int64{0, 1, 1, 1, 2}
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := r.IntN(len(slots))
				cost := costs[r.IntN(len(costs))]
				res, err := take(i, cost)
				slots[i].decisions.Add(1)
				switch {
				case err != nil:
					fail("%s cost %d: error surfaced to the caller: %v", keyOf(i), cost, err)
				case res.Degraded:
					fail("%s cost %d: degraded decision %+v", keyOf(i), cost, res)
				case cost == 0 && !res.Allowed:
					fail("%s: a query was denied: %+v", keyOf(i), res)
				case res.Allowed:
					slots[i].admitted.Add(cost)
				}
			}
		})
	}
	for i := range flushes {
		time.Sleep(gap)
		if err := flush(ctx, i); err != nil {
			t.Errorf("SCRIPT FLUSH %d: %v", i, err)
		}
	}
	time.Sleep(gap) // decisions after the last flush too
	close(stop)
	wg.Wait()

	// Drain what is left one unit at a time: over the whole run each key
	// admits exactly n units, whatever the flushes did.
	var decisions int64
	for i := range slots {
		for range n + 1 {
			res, err := take(i, 1)
			if err != nil {
				t.Fatalf("%s: drain: %v", keyOf(i), err)
			}
			if !res.Allowed {
				if res.Remaining != 0 {
					t.Errorf("%s: denied with remaining %d", keyOf(i), res.Remaining)
				}
				break
			}
			slots[i].admitted.Add(1)
		}
		if got := slots[i].admitted.Load(); got != n {
			t.Errorf("%s: admitted %d units over the run, want exactly %d", keyOf(i), got, n)
		}
		decisions += slots[i].decisions.Load()
	}
	t.Logf("%d decisions under load, %d script flushes, no error", decisions, flushes)
}

// TestScriptFlushUnderLoad flushes the script cache of a standalone server
// while a batched or an unbatched store decides continuously: every EVALSHA
// that meets NOSCRIPT falls back to EVAL, no error reaches a caller, and the
// limits stay exact.
func TestScriptFlushUnderLoad(t *testing.T) {
	for _, batched := range []bool{true, false} {
		name := map[bool]string{true: "batched", false: "unbatched"}[batched]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Standalone(t)
			c := srv.Client()
			cc := &countingClient{Client: redisrun.GoRedis(c)}
			opts := []redisstore.Option{redisstore.WithPrefix("flush:")}
			if !batched {
				opts = append(opts, redisstore.WithoutBatching())
			}
			st := newStore(t, cc, opts...)
			defer st.Close()
			flushUnderLoad(t, st, func(ctx context.Context, i int) error {
				mode := []string{"SYNC", "ASYNC"}[i%2]
				return c.Do(ctx, "SCRIPT", "FLUSH", mode).Err()
			})
			noscript := noScriptErrors(t, c)
			t.Logf("%d round trips, %d of them pipelines of several calls, %d multi-decision scripts; %d NOSCRIPT replies recovered by EVAL",
				cc.runs.Load(), cc.multi.Load(), cc.merged.Load(), noscript)
			if noscript == 0 {
				t.Error("no EVALSHA met NOSCRIPT: the flushes did not exercise the fallback")
			}
			if batched && cc.multi.Load()+cc.merged.Load() == 0 {
				t.Error("the batched store never sent several decisions in one round trip: the batched fallback was not exercised")
			}
		})
	}
}

// TestScriptFlushUnderLoadCluster is TestScriptFlushUnderLoad on a Redis
// Cluster, every master's script cache flushed at once.
func TestScriptFlushUnderLoadCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster; the standalone test covers the fallback in -short")
	}
	t.Parallel()
	cl := redistest.Cluster(t)
	cc := cl.Client()
	st := newGoRedis(t, cc, redisstore.WithPrefix("flush:"))
	defer st.Close()
	flushUnderLoad(t, st, func(ctx context.Context, i int) error {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return c.Do(ctx, "SCRIPT", "FLUSH").Err()
		})
	})
	var noscript int64
	for _, addr := range cl.Addrs() {
		c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
		noscript += noScriptErrors(t, c)
		c.Close()
	}
	t.Logf("%d NOSCRIPT replies over the three masters, recovered by EVAL", noscript)
	if noscript == 0 {
		t.Error("no EVALSHA met NOSCRIPT: the flushes did not exercise the fallback")
	}
}

// outcome is one decision observed under load.
type outcome struct {
	store      string
	start, end time.Time
	res        sluice.Result
	err        error
}

var policyNames = map[redisstore.FailurePolicy]string{
	redisstore.FailClosed: "FailClosed",
	redisstore.FailOpen:   "FailOpen",
	redisstore.FailLocal:  "FailLocal",
}

// fromRedis reports whether a decision was made by Redis.
func fromRedis(res sluice.Result, err error) bool { return err == nil && !res.Degraded }

// byPolicy reports whether a decision is what policy gives when Redis cannot
// decide.
func byPolicy(p redisstore.FailurePolicy, res sluice.Result, err error) bool {
	switch p {
	case redisstore.FailClosed:
		return errors.Is(err, sluice.ErrStoreUnavailable) && res == sluice.Result{}
	case redisstore.FailOpen:
		return err == nil && res == sluice.Result{Allowed: true, Degraded: true}
	default:
		return err == nil && res.Degraded
	}
}

// TestRestartMidLoad kills the server under load (batched and unbatched
// stores at once) and starts it again on the same address, for each failure
// policy: during the outage every decision is the policy's, after it the same
// stores decide in Redis again.
func TestRestartMidLoad(t *testing.T) {
	for _, p := range []redisstore.FailurePolicy{redisstore.FailClosed, redisstore.FailOpen, redisstore.FailLocal} {
		t.Run(policyNames[p], func(t *testing.T) {
			t.Parallel()
			restartMidLoad(t, p)
		})
	}
}

func restartMidLoad(t *testing.T, policy redisstore.FailurePolicy) {
	srv := redistest.Standalone(t)
	client := srv.NewClient(t, nil) // go-redis defaults, as an application would have them
	const timeout = 250 * time.Millisecond
	stores := map[string]*redisstore.Store{
		"batched": newGoRedis(t, client, redisstore.WithPrefix("b:"),
			redisstore.WithTimeout(timeout), redisstore.WithFailurePolicy(policy)),
		"unbatched": newGoRedis(t, client, redisstore.WithPrefix("u:"),
			redisstore.WithTimeout(timeout), redisstore.WithFailurePolicy(policy), redisstore.WithoutBatching()),
	}
	for _, st := range stores {
		defer st.Close()
	}
	ctx := context.Background()
	lim := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: hour, Burst: 3}
	takeKey := func(st *redisstore.Store, key string) (sluice.Result, error) {
		return take(ctx, st, storelink.Request{Key: key, Params: lim, Cost: 1, MaxDelay: algo.Never})
	}

	// Background load: two workers per store, each on its own keys.
	var mu sync.Mutex
	var seen []outcome
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for name, st := range stores {
		for w := range 2 {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					o := outcome{store: name, start: time.Now()}
					o.res, o.err = takeKey(st, fmt.Sprintf("load:%d:%d", w, i%50))
					o.end = time.Now()
					mu.Lock()
					seen = append(seen, o)
					mu.Unlock()
					time.Sleep(time.Millisecond)
				}
			})
		}
	}

	time.Sleep(200 * time.Millisecond)
	stopCalled := time.Now()
	srv.Stop(t)
	stopped := time.Now()

	// Decisions made entirely within the outage: concurrent calls on one
	// fresh key per store.
	const probes = 8
	var probeMax time.Duration
	for name, st := range stores {
		var allowed atomic.Int64
		var pwg sync.WaitGroup
		for range probes {
			pwg.Go(func() {
				start := time.Now()
				res, err := takeKey(st, "outage")
				d := time.Since(start)
				mu.Lock()
				probeMax = max(probeMax, d)
				mu.Unlock()
				if !byPolicy(policy, res, err) {
					t.Errorf("%s during the outage: %+v, %v; want the %s decision", name, res, err, policyNames[policy])
				}
				if res.Allowed {
					allowed.Add(1)
				}
			})
		}
		pwg.Wait()
		want := map[redisstore.FailurePolicy]int64{redisstore.FailClosed: 0, redisstore.FailOpen: probes, redisstore.FailLocal: lim.Burst}[policy]
		if got := allowed.Load(); got != want {
			t.Errorf("%s: %d of %d calls on a fresh key allowed during the outage, want %d", name, got, probes, want)
		}
	}
	if probeMax > timeout+250*time.Millisecond && testenv.Timing(t, "outage calls within the timeout plus 250ms") {
		t.Errorf("a call during the outage took %v, with a timeout of %v", probeMax, timeout)
	}
	time.Sleep(100 * time.Millisecond)
	startCalled := time.Now()
	srv.Start(t)
	up := time.Now()

	// Recovery: the same stores, not recreated, decide in Redis again.
	// (inspect is a client of the test's own, whose pool saw no outage.)
	inspect := srv.NewClient(t, nil)
	var recovered time.Time
	for name, st := range stores {
		// Poll with queries, which spend nothing even when a reply comes
		// too late.
		for {
			res, err := take(ctx, st, storelink.Request{Key: "recover", Params: lim, MaxDelay: algo.Never})
			if fromRedis(res, err) {
				break
			}
			if !byPolicy(policy, res, err) {
				t.Errorf("%s while recovering: %+v, %v", name, res, err)
			}
			if d := time.Since(up); d > time.Minute || d > 5*time.Second && testenv.TimingOn() {
				t.Fatalf("%s: no decision from Redis 5s after it was back: last %+v, %v", name, res, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		recovered = time.Now()
		// The server came back empty, and nothing of the outage reached
		// it: the outage's key is fresh in Redis, whatever the local
		// fallback holds for it.
		res, err := takeKey(st, "outage")
		if !fromRedis(res, err) || !res.Allowed || res.Remaining != lim.Burst-1 {
			t.Errorf("%s: first decision on the outage's key after the restart %+v, %v; want Redis's, allowed with %d remaining",
				name, res, err, lim.Burst-1)
		}
		if n, err := inspect.Exists(ctx, redisstore.RateKey(st, "outage")).Result(); err != nil || n != 1 {
			t.Errorf("%s: EXISTS %s after recovery = %d, %v; want 1", name, redisstore.RateKey(st, "outage"), n, err)
		}
	}
	t.Logf("%s: outage of %v (calls in it took at most %v); Redis decided again %v after it answered PING",
		policyNames[policy], startCalled.Sub(stopped), probeMax, recovered.Sub(up))
	// go-redis stops dialing after as many failed dials as its pool size
	// and then retries once a second: new connections may fail for up to
	// a second after the server is back, though decisions already pass on
	// the connections it has. From then on every decision is Redis's.
	steady := up.Add(1100 * time.Millisecond)
	if now := time.Now(); now.After(steady) {
		steady = now
	}
	time.Sleep(time.Until(steady) + 200*time.Millisecond)
	close(stop)
	wg.Wait()

	// Every decision under load was either Redis's or the policy's; those
	// wholly before the kill were Redis's, those wholly within the outage the
	// policy's, and those after recovery Redis's again.
	var before, during, after, other int
	for _, o := range seen {
		redisMade, policyMade := fromRedis(o.res, o.err), byPolicy(policy, o.res, o.err)
		switch {
		case o.end.Before(stopCalled):
			before++
			if !redisMade {
				t.Errorf("%s before the outage: %+v, %v", o.store, o.res, o.err)
			}
		case o.start.After(stopped) && o.end.Before(startCalled):
			during++
			if !policyMade {
				t.Errorf("%s during the outage: %+v, %v; want the %s decision", o.store, o.res, o.err, policyNames[policy])
			}
		case o.start.After(steady):
			after++
			if !redisMade {
				t.Errorf("%s after recovery: %+v, %v", o.store, o.res, o.err)
			}
		default:
			other++
			if !redisMade && !policyMade {
				t.Errorf("%s around the restart: %+v, %v; neither Redis's nor the policy's", o.store, o.res, o.err)
			}
		}
	}
	t.Logf("load: %d decisions before the kill, %d in the outage, %d around the restart, %d after recovery", before, during, other, after)
	if (before == 0 || during == 0 || after == 0) && testenv.Timing(t, "load in every phase") {
		t.Errorf("load too thin to judge: %d before, %d during, %d after", before, during, after)
	}
}

// hungServer accepts TCP connections on 127.0.0.1 and reads everything sent
// to it, never replying: a Redis that hangs.
type hungServer struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	read  atomic.Int64
	wg    sync.WaitGroup
}

func newHungServer(t *testing.T) *hungServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hungServer{ln: ln}
	h.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.mu.Lock()
			h.conns = append(h.conns, c)
			h.mu.Unlock()
			h.wg.Go(func() {
				n, _ := io.Copy(io.Discard, c)
				h.read.Add(n)
			})
		}
	})
	return h
}

func (h *hungServer) addr() string { return h.ln.Addr().String() }

func (h *hungServer) accepted() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.conns)
}

// close stops listening and closes every accepted connection, which ends any
// read blocked on them.
func (h *hungServer) close() {
	h.ln.Close()
	h.mu.Lock()
	for _, c := range h.conns {
		c.Close()
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// TestHungServer points stores at a server that accepts connections and never
// answers: with WithTimeout(100ms) every decision, sequential or concurrent,
// batched or not, returns within the timeout plus slack, as the policy says.
// The go-redis client keeps its defaults (ReadTimeout 3s, context deadlines
// not applied to reads and writes), as an application would, or has
// ContextTimeoutEnabled, where a lone caller's call runs on its own goroutine.
func TestHungServer(t *testing.T) {
	const timeout, bound = 100 * time.Millisecond, 500 * time.Millisecond
	var mu sync.Mutex
	var worst time.Duration
	t.Cleanup(func() { t.Logf("slowest decision against the hung server: %v (timeout %v)", worst, timeout) })
	for _, batched := range []bool{true, false} {
		for _, policy := range []redisstore.FailurePolicy{redisstore.FailClosed, redisstore.FailOpen} {
			for _, ctxDeadlines := range []bool{false, true} {
				name := map[bool]string{true: "batched", false: "unbatched"}[batched] + "/" + policyNames[policy] +
					map[bool]string{true: "/context-deadlines", false: ""}[ctxDeadlines]
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					h := newHungServer(t)
					client := redis.NewClient(&redis.Options{Addr: h.addr(), DisableIdentity: true, ContextTimeoutEnabled: ctxDeadlines})
					opts := []redisstore.Option{redisstore.WithTimeout(timeout), redisstore.WithFailurePolicy(policy)}
					if !batched {
						opts = append(opts, redisstore.WithoutBatching())
					}
					st := newGoRedis(t, client, opts...)
					ctx := context.Background()
					lim := algo.Params{Kind: algo.TokenBucket, Rate: 10, Period: 1_000_000, Burst: 10}

					var slowest atomic.Int64
					check := func(key string) {
						start := time.Now()
						res, err := take(ctx, st, storelink.Request{Key: key, Params: lim, Cost: 1, MaxDelay: algo.Never})
						d := time.Since(start)
						for {
							old := slowest.Load()
							if int64(d) <= old || slowest.CompareAndSwap(old, int64(d)) {
								break
							}
						}
						if d > bound && testenv.Timing(t, "each decision within 500ms") {
							t.Errorf("%s: decision took %v, want < %v", key, d, bound)
						}
						if !byPolicy(policy, res, err) {
							t.Errorf("%s: %+v, %v; want the %s decision", key, res, err, policyNames[policy])
						}
					}
					for i := range 5 {
						check(fmt.Sprintf("seq:%d", i))
					}
					var wg sync.WaitGroup
					for g := range 8 {
						wg.Go(func() {
							for i := range 3 {
								check(fmt.Sprintf("conc:%d:%d", g, i))
							}
						})
					}
					wg.Wait()
					if h.accepted() == 0 {
						t.Errorf("the hung server accepted %d connections: the store never reached it", h.accepted())
					}
					mu.Lock()
					worst = max(worst, time.Duration(slowest.Load()))
					mu.Unlock()

					// Once the server goes away, nothing is left blocked: Close
					// returns promptly.
					h.close()
					start := time.Now()
					st.Close()
					client.Close()
					if d := time.Since(start); d > time.Second && testenv.Timing(t, "Close within 1s") {
						t.Errorf("Close took %v after the server went away", d)
					}
					t.Logf("slowest of 29 decisions %v; the server accepted %d connections", time.Duration(slowest.Load()), h.accepted())
				})
			}
		}
	}
}

// TestStalledServerChargesOnlyCallsInFlight stalls the server (DEBUG SLEEP)
// while callers of a batched store time out one after the other. The calls
// the store had already sent are executed when the server wakes up (nothing
// can recall them), but the calls still queued in the store when their
// caller gave up must not be sent late: their callers were told the store
// was unavailable, so they must not be charged for them.
func TestStalledServerChargesOnlyCallsInFlight(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	client := srv.NewClient(t, nil)
	const loops = 2
	st := newGoRedis(t, client, redisstore.WithPrefix("stall:"),
		redisstore.WithTimeout(100*time.Millisecond), redisstore.WithBatching(loops))
	defer st.Close()
	ctx := context.Background()
	lim := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: hour, Burst: 1000}
	take := func(cost int64) (sluice.Result, error) {
		return take(ctx, st, storelink.Request{Key: "k", Params: lim, Cost: cost, MaxDelay: algo.Never})
	}
	if _, err := take(1); err != nil { // scripts loaded, connections open
		t.Fatal(err)
	}

	sleeper := srv.NewClient(t, nil)
	slept := make(chan error, 1)
	go func() { slept <- sleeper.Do(ctx, "DEBUG", "SLEEP", "2").Err() }()
	// The server is asleep once a PING goes unanswered for 20ms (a fixed
	// pause was not enough on a busy machine); the 2s sleep leaves the loop
	// below a wide margin.
	probe := srv.NewClient(t, func(o *redis.Options) { o.ReadTimeout, o.MaxRetries = 20*time.Millisecond, -1 })
	for asleep := time.Now().Add(5 * time.Second); probe.Ping(ctx).Err() == nil; time.Sleep(time.Millisecond) {
		if time.Now().After(asleep) {
			t.Fatal("the server answered PING for 5s after DEBUG SLEEP was sent")
		}
	}
	failed := 0
	for start := time.Now(); time.Since(start) < 650*time.Millisecond; failed++ {
		if res, err := take(1); !errors.Is(err, sluice.ErrStoreUnavailable) {
			t.Fatalf("call %d while the server sleeps: %+v, %v; want ErrStoreUnavailable", failed, res, err)
		}
	}
	if err := <-slept; err != nil {
		t.Fatalf("DEBUG SLEEP: %v", err)
	}
	time.Sleep(200 * time.Millisecond) // the store's loops have caught up

	res, err := take(0)
	if err != nil {
		t.Fatal(err)
	}
	charged := lim.Burst - 1 - res.Remaining
	t.Logf("%d calls failed while the server slept; %d of them were executed when it woke up", failed, charged)
	if charged > loops {
		t.Errorf("%d failed calls were charged, but at most %d (one per pipeline in flight) had been sent before their callers gave up",
			charged, loops)
	}
}

// TestFailLocalUsesCallerTime: a store that decides at the caller's time
// (WithClock) keeps deciding at the caller's time when FailLocal takes
// over, so the fallback's decisions are those of a memstore at that time.
func TestFailLocalUsesCallerTime(t *testing.T) {
	t.Parallel()
	h := newHungServer(t)
	client := redis.NewClient(&redis.Options{Addr: h.addr(), DisableIdentity: true})
	defer client.Close()
	var now atomic.Int64
	now.Store(base)
	st := newGoRedis(t, client, redisstore.WithTimeout(50*time.Millisecond),
		redisstore.WithFailurePolicy(redisstore.FailLocal),
		redisstore.WithClock(storelink.MicroClock(now.Load)))
	defer st.Close()
	defer h.close()

	ref := memstore.New()
	lim := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: 1_000_000, Burst: 2}
	ctx := context.Background()
	for i, step := range []int64{0, 0, 0, 1_000_000, 0, 250_000, 2_000_000, 0} {
		now.Add(step)
		req := storelink.Request{Key: "k", Params: lim, Cost: 1, MaxDelay: algo.Never}
		got, err := take(ctx, st, req)
		if err != nil || !got.Degraded {
			t.Fatalf("call %d: %+v, %v; want a degraded local decision", i, got, err)
		}
		d, _ := storetest.TakeAt(ctx, ref, req, now.Load())
		want := resultOf(new(storelink.DecisionOf(&d)))
		want.Degraded = true
		if got != want {
			t.Errorf("call %d at caller time +%dµs: local fallback decided %+v, want %+v (the decision at the caller's time)",
				i, now.Load()-base, got, want)
		}
	}
}

// TestQueuedCallNotSentAfterItsCallerGaveUp: a batched call that waited in
// the store's queue behind a busy loop, then for a connection, must not reach
// Redis after its caller was told the store was unavailable. The client's
// only connection is held by a BLPOP that ends 700ms in, the store's timeout
// is 400ms: call Z (t=0) holds the single loop until 400ms, call A (t=200ms)
// is picked up at 400ms with 200ms left and its caller gives up at 600ms;
// the loop must give up with it, not send A when the connection frees.
// Unbatched, each call waits for the connection itself, and gives up with
// its caller. With ContextTimeoutEnabled, Z goes on its caller's goroutine
// and A's caller keeps no timer: the loop's pipeline ends by A's deadline
// and answers it then, unsent.
func TestQueuedCallNotSentAfterItsCallerGaveUp(t *testing.T) {
	for _, batched := range []bool{true, false} {
		for _, ctxDeadlines := range []bool{false, true} {
			name := map[bool]string{true: "batched", false: "unbatched"}[batched] +
				map[bool]string{true: "/context-deadlines", false: ""}[ctxDeadlines]
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				queuedCall(t, batched, ctxDeadlines)
			})
		}
	}
}

func queuedCall(t *testing.T, batched, ctxDeadlines bool) {
	srv := redistest.Standalone(t)
	client := srv.NewClient(t, func(o *redis.Options) { o.PoolSize, o.ContextTimeoutEnabled = 1, ctxDeadlines })
	batching := redisstore.WithBatching(1)
	if !batched {
		batching = redisstore.WithoutBatching()
	}
	st := newGoRedis(t, client, redisstore.WithPrefix("queued:"),
		redisstore.WithTimeout(400*time.Millisecond), batching)
	defer st.Close()
	ctx := context.Background()
	lim := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: hour, Burst: 10}
	take := func(cost int64) (sluice.Result, error) {
		return take(ctx, st, storelink.Request{Key: "k", Params: lim, Cost: cost, MaxDelay: algo.Never})
	}

	blocked := make(chan error, 1)
	start := time.Now()
	go func() { blocked <- client.Do(ctx, "BLPOP", "queued:nothing", "0.7").Err() }()
	time.Sleep(20 * time.Millisecond) // BLPOP holds the connection
	var wg sync.WaitGroup
	for _, at := range []time.Duration{20 * time.Millisecond, 200 * time.Millisecond} {
		time.Sleep(time.Until(start.Add(at)))
		wg.Go(func() {
			if res, err := take(1); !errors.Is(err, sluice.ErrStoreUnavailable) {
				t.Errorf("call at %v: %+v, %v; want ErrStoreUnavailable (no connection before its deadline)", at, res, err)
			}
		})
	}
	wg.Wait()
	if d := time.Since(start); d > 680*time.Millisecond && testenv.Timing(t, "both callers answered by their deadlines") {
		t.Errorf("the callers were answered %v in, want by 620ms (their deadlines)", d)
	}
	if err := <-blocked; !errors.Is(err, redis.Nil) {
		t.Fatalf("BLPOP: %v", err)
	}
	time.Sleep(100 * time.Millisecond) // the loop has given up or sent
	res, err := take(0)
	if err != nil {
		t.Fatal(err)
	}
	if spent := lim.Burst - res.Remaining; spent != 0 {
		t.Errorf("%d units spent by calls whose callers were told the store was unavailable before they were sent", spent)
	}
}

// TestCancelledWhileQueuedNotSent: with a client that ends calls by their
// deadline, a batched caller waits for its call's outcome alone; when its
// context ends while the call still waits to be sent, the loop that
// gathers it answers the context's error and does not send it. The single
// connection is held by a BLPOP for 500ms: call Z (t=0) waits for it on its
// caller's goroutine, call A (t=50ms) waits in the store, and A's context is
// cancelled at t=100ms.
func TestCancelledWhileQueuedNotSent(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	client := srv.NewClient(t, func(o *redis.Options) { o.PoolSize, o.ContextTimeoutEnabled = 1, true })
	st := newGoRedis(t, client, redisstore.WithPrefix("cancelq:"), redisstore.WithTimeout(2*time.Second),
		redisstore.WithBatching(1), redisstore.WithFailurePolicy(redisstore.FailOpen))
	defer st.Close()
	lim := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: hour, Burst: 10}
	take := func(ctx context.Context) (sluice.Result, error) {
		return take(ctx, st, storelink.Request{Key: "k", Params: lim, Cost: 1, MaxDelay: algo.Never})
	}
	blocked := make(chan error, 1)
	go func() { blocked <- client.Do(context.Background(), "BLPOP", "cancelq:nothing", "0.5").Err() }()
	time.Sleep(20 * time.Millisecond) // BLPOP holds the connection
	var wg sync.WaitGroup
	wg.Go(func() {
		if r, err := take(context.Background()); err != nil || !r.Allowed || r.Degraded {
			t.Errorf("call Z: %+v, %v; want allowed by Redis", r, err)
		}
	})
	time.Sleep(50 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	wg.Go(func() {
		r, err := take(ctx)
		if !errors.Is(err, context.Canceled) || r.Allowed {
			t.Errorf("call A, cancelled while queued: %+v, %v; want context.Canceled, not allowed (not FailOpen)", r, err)
		}
	})
	time.Sleep(50 * time.Millisecond)
	cancel()
	wg.Wait()
	if err := <-blocked; !errors.Is(err, redis.Nil) {
		t.Fatalf("BLPOP: %v", err)
	}
	r, err := take(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if spent := lim.Burst - r.Remaining; spent != 2 {
		t.Errorf("%d units spent by Z and this look-and-take; want 2 (A was not sent)", spent)
	}
}
