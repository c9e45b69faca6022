package redisstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testsupport/childproc"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/redisstore"
)

// TestHoldsAcrossProcesses holds a concurrency limit of holdLimit from
// holdProcs processes of holdGoroutines goroutines each, on one Redis,
// and kills some of them with SIGKILL while their goroutines have holds.
//
// The work in flight is counted outside the limiter, in a sorted set of its
// own (inFlight): a goroutine that was granted a hold adds itself, scored
// by the hold's expiry, and in the same script counts the members whose
// score is after the server's TIME, keeping the most it ever saw in a key;
// it removes itself before it releases. Its membership lies within its
// hold (it joins after the grant and leaves before the release, or at the
// hold's expiry if killed), so if the limiter never holds more than the
// limit, the count never passes it; a hold that came back early, before
// its expiry, would let a new holder join while the killed one still
// counts. The checks:
//
//   - the count never passed holdLimit, in any process, killed or not;
//   - once the survivors are done, the slots still held include the
//     killed holders' that the set counts (a holder killed between its
//     grant and its count has a hold the set does not see), and they
//     come back at their expiry: the whole limit is refused while the set
//     counts one, and granted once they have all ended;
//   - a child killed early holds nothing at the end: its slots came back
//     while the others ran;
//   - the survivors made no errors.
func TestHoldsAcrossProcesses(t *testing.T) {
	if os.Getenv(holdChildEnv) != "" {
		t.Skip("in a child process")
	}
	srv := redistest.Standalone(t)
	client := srv.Client()
	ctx := context.Background()
	cfg := holdConfig{Addr: srv.Addr(), Prefix: fmt.Sprintf("holdproc:%d:", time.Now().UnixNano()), Lifetime: 1500 * time.Millisecond}
	children := make([]*childproc.Child, holdProcs)
	for i := range children {
		cfg.Index = i
		env, _ := json.Marshal(cfg)
		children[i] = childproc.Start(t, "TestHoldChild", []string{holdChildEnv + "=" + string(env)}, 5*time.Minute, nil)
	}
	for _, c := range children {
		c.WaitReady(t, loadReadyWithin)
	}
	run := 4 * time.Second
	begin := time.Now()
	stop := begin.Add(run)
	startAt(t, children, stop)

	// First wave: child 0, whose slots must come back while the others
	// still run. Second wave, near the end: children from 1 on, until the
	// killed ones have a hold, whose return is checked after the run.
	time.Sleep(run / 4)
	for heldBy(t, client, cfg.Prefix, 0) == 0 && time.Since(begin) < run/2 {
		time.Sleep(time.Millisecond) // kill it while it has a hold
	}
	killed := []int{0}
	if err := children[0].Kill(); err != nil { // SIGKILL: no deferred release runs
		t.Fatal(err)
	}
	first, firstAt := heldBy(t, client, cfg.Prefix, 0), time.Since(begin)
	time.Sleep(time.Until(stop.Add(-run / 5)))
	orphans := 0
	for i := 1; i < holdProcs-1 && orphans == 0 && time.Now().Before(stop); i++ {
		for heldBy(t, client, cfg.Prefix, i) == 0 && time.Now().Before(stop) {
			time.Sleep(time.Millisecond)
		}
		if err := children[i].Kill(); err != nil {
			t.Fatal(err)
		}
		killed = append(killed, i)
		orphans += heldBy(t, client, cfg.Prefix, i)
	}
	lastKill := time.Now()
	t.Logf("killed child 0 at +%v with %d holds, then %d more near the end holding %d", firstAt.Round(time.Millisecond), first, len(killed)-1, orphans)
	var granted int64
	for i, c := range children {
		if slices.Contains(killed, i) {
			<-c.Done()
			continue
		}
		out, result, werr := childResult(t, i, c, stop, holdResultMark)
		var rep holdReport
		if werr != nil || json.Unmarshal([]byte(result), &rep) != nil {
			t.Fatalf("child %d: %v\n%s", i, werr, out)
		}
		if rep.Errors > 0 || rep.Granted == 0 {
			t.Errorf("child %d: %d errors (first: %s), %d holds", i, rep.Errors, rep.FirstError, rep.Granted)
		}
		granted += rep.Granted
	}
	most, _ := client.Get(ctx, cfg.Prefix+"most").Int64()
	t.Logf("%d holds granted to the survivors, at most %d in flight (limit %d)", granted, most, holdLimit)
	if most > holdLimit || most == 0 {
		t.Fatalf("the independent count saw %d in flight, limit %d", most, holdLimit)
	}
	if n := heldBy(t, client, cfg.Prefix, 0); n != 0 {
		t.Fatalf("child 0, killed at +%v, still has %d holds of a %v lifetime", firstAt, n, cfg.Lifetime)
	}
	if orphans == 0 && testenv.Timing(t, "a child killed near the end has a hold") {
		t.Error("no child killed near the end had a hold: their return is not checked")
	}

	// The slots still held are the killed holders', and come back at their
	// expiry, not before.
	st := newGoRedis(t, client, redisstore.WithPrefix(cfg.Prefix))
	defer st.Close()
	lim := sluice.New(st)
	c := sluice.MaxConcurrent(holdLimit).WithLifetime(cfg.Lifetime)
	for {
		before := liveCount(t, client, cfg.Prefix)
		q, err := lim.Acquire(ctx, holdKey, c, 0)
		after := liveCount(t, client, cfg.Prefix)
		if err != nil {
			t.Fatal(err)
		}
		// A killed holder may have a hold it had not yet counted (killed
		// between the grant and its count), never one it counts and the
		// limiter has given back.
		if q.Remaining > holdLimit-after {
			t.Fatalf("%d free by the limiter, while %d to %d held by killed holders by the count", q.Remaining, before, after)
		}
		if time.Since(lastKill) > cfg.Lifetime+30*time.Second {
			t.Fatalf("%d slots still held %v after the last kill, lifetime %v", holdLimit-q.Remaining, time.Since(lastKill), cfg.Lifetime)
		}
		if q.Remaining == holdLimit {
			break
		}
		// Not before the killed holders' last hold ends: all of it is
		// refused until then, by exactly the wait to that expiry.
		all, err := lim.Acquire(ctx, holdKey, c, holdLimit)
		if err != nil || all.Allowed && liveCount(t, client, cfg.Prefix) > 0 {
			t.Fatalf("the whole limit while killed holders' holds live: %+v %v", all, err)
		}
		if all.Allowed {
			lim.Release(ctx, all)
			continue
		}
		time.Sleep(min(all.RetryAfter, 100*time.Millisecond))
	}
	all, err := lim.Acquire(ctx, holdKey, c, holdLimit)
	if err != nil || !all.Allowed {
		t.Fatalf("after the killed holders' holds ended: %+v %v", all, err)
	}
	t.Logf("the %d slots held by killed holders came back at their expiry", orphans)
}

const (
	holdChildEnv   = "SLUICE_HOLD_CHILD"
	holdResultMark = "hold-result: "
	holdProcs      = 8
	holdGoroutines = 32
	holdKilled     = 2
	holdLimit      = 8
	holdKey        = "expensive"
)

type holdConfig struct {
	Addr, Prefix string
	Lifetime     time.Duration
	Index        int // the child's, in its members of the in-flight set
}

type holdReport struct {
	Granted, Refused, Errors int64
	FirstError               string
}

// inFlight adds a holder, scored by its hold's expiry, to the set of work
// in flight (KEYS[1]) and counts the members whose hold has not ended at
// the server's TIME, keeping the most ever counted in KEYS[2]. It is sent
// by EVAL: a redis.Script made at init would hash it with SHA-1, which the
// test binary's run under GODEBUG=fips140=only (fips_test.go) refuses.
const inFlight = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
local n = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
if n > tonumber(redis.call('GET', KEYS[2]) or '0') then
  redis.call('SET', KEYS[2], n)
end
return n`

// liveCount is the number of holders counted in flight at the server's
// TIME.
func liveCount(t *testing.T, c *redis.Client, prefix string) int64 {
	now, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return c.ZCount(context.Background(), prefix+"inflight", "("+strconv.FormatInt(now.UnixMicro(), 10), "+inf").Val()
}

// heldBy is the number of holds child i has by the in-flight set at the
// server's TIME: its members ("i:id") not removed and not expired.
func heldBy(t *testing.T, c *redis.Client, prefix string, i int) int {
	ctx := context.Background()
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	members, err := c.ZRangeByScore(ctx, prefix+"inflight", &redis.ZRangeBy{Min: "(" + strconv.FormatInt(now.UnixMicro(), 10), Max: "+inf"}).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range members {
		if strings.HasPrefix(m, strconv.Itoa(i)+":") {
			n++
		}
	}
	return n
}

// TestHoldChild is the body of one child process of
// TestHoldsAcrossProcesses.
func TestHoldChild(t *testing.T) {
	raw, ok := childproc.Config(holdChildEnv)
	if !ok {
		t.Skip("a child process of TestHoldsAcrossProcesses")
	}
	var cfg holdConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: cfg.Addr, DisableIdentity: true, MaxRetries: -1,
		ReadTimeout: 20 * time.Second, WriteTimeout: 20 * time.Second, PoolTimeout: 20 * time.Second})
	defer client.Close()
	st := newGoRedis(t, client, redisstore.WithPrefix(cfg.Prefix), redisstore.WithTimeout(20*time.Second))
	defer st.Close()
	lim := sluice.New(st)
	ctx := context.Background()
	stop := awaitStart(t)
	c := sluice.MaxConcurrent(holdLimit).WithLifetime(cfg.Lifetime)
	keys := []string{cfg.Prefix + "inflight", cfg.Prefix + "most"}
	var rep holdReport
	var firstErr atomic.Pointer[string]
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range holdGoroutines {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(g)))
			var granted, refused, errs int64
			fail := func(err error) {
				errs++
				s := err.Error()
				firstErr.CompareAndSwap(nil, &s)
			}
			for time.Now().Before(stop) {
				ls, err := lim.Acquire(ctx, holdKey, c, 1)
				if err != nil {
					fail(err)
					continue
				}
				if !ls.Allowed {
					refused++
					time.Sleep(time.Duration(r.Int64N(int64(2 * time.Millisecond))))
					continue
				}
				granted++
				member := fmt.Sprintf("%d:%d", cfg.Index, ls.ID)
				if err := client.Eval(ctx, inFlight, keys, ls.Expiry, member).Err(); err != nil {
					fail(err)
				}
				time.Sleep(time.Duration(r.Int64N(int64(3 * time.Millisecond)))) // the work
				if err := client.ZRem(ctx, keys[0], member).Err(); err != nil {
					fail(err)
				}
				if res, err := lim.Release(ctx, ls); err != nil || !res.Allowed {
					fail(fmt.Errorf("release: %+v %v", res, err))
				}
			}
			mu.Lock()
			rep.Granted += granted
			rep.Refused += refused
			rep.Errors += errs
			mu.Unlock()
		})
	}
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		rep.FirstError = *p
	}
	b, _ := json.Marshal(rep)
	fmt.Println(holdResultMark + string(b))
}
