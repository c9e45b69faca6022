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
	"github.com/sluice-go/sluice/internal/redisrun"
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
	t.Parallel()
	if os.Getenv(holdChildEnv) != "" {
		t.Skip("in a child process")
	}
	srv := redistest.Standalone(t)
	cfg := holdConfig{Addr: srv.Addr(), Prefix: fmt.Sprintf("holdproc:%d:", time.Now().UnixNano()), Lifetime: 1500 * time.Millisecond, Work: 3 * time.Millisecond}
	runHolds(t, srv.Client(), cfg, 4*time.Second)
}

// TestHoldsApartAcrossProcesses is TestHoldsAcrossProcesses on a Redis
// Cluster, each acquire joined to a rate part (Acquire with parts) whose key is on
// another master than the hold's, so that redisstore takes them in turn
// (holdInTurn): the hold, then the part, the hold released when the part
// refuses. A child killed between the steps leaves its hold to come back
// at its expiry, never before (SEMANTICS.md, "A lease in a composite"):
// the checks of TestHoldsAcrossProcesses, the in-flight set in a slot of
// its own. And one more: the units granted to the survivors are at most
// what the part allows over the run. It is a fixed window of apartRate
// per apartWindow, on a fresh key; each window is opened by a take after
// the last one ended, so from the server's time before the first take to
// that after the survivors' last, at most span/apartWindow + 1 windows
// admit apartRate each. The part is the acquire's last step, so it is
// never given back. A killed child may have spent a unit it was never
// granted: the check is an upper bound on the grants. The part is
// generous enough that the hold refuses most acquires, but spent out now
// and then (checked under SLUICE_TIMING=1).
func TestHoldsApartAcrossProcesses(t *testing.T) {
	t.Parallel()
	if os.Getenv(holdChildEnv) != "" {
		t.Skip("in a child process")
	}
	cl := redistest.SharedCluster(t)
	client := cl.Client()
	prefix := fmt.Sprintf("holdapartproc:%d:", time.Now().UnixNano())
	st := newGoRedis(t, client, redisstore.WithPrefix(prefix))
	hold := redisstore.HoldKey(st, holdKey)
	st.Close()
	rateKey := keyOnAnotherNode(t, client, prefix, hold)
	if redisrun.Slot(hold) == redisrun.Slot(prefix+rateKey) {
		t.Fatal("the hold and the rate part share a slot")
	}
	cfg := holdConfig{Addrs: cl.Addrs(), Prefix: prefix, Lifetime: 1500 * time.Millisecond, Work: apartWork,
		Parts: []sluice.Part{{Key: rateKey, Limit: sluice.Per(apartRate, apartWindow).WithAlgorithm(sluice.FixedWindow), Cost: 1}}}
	runHolds(t, client, cfg, 3*time.Second)
}

// keyOnAnotherNode returns a key, "rate" and a number, whose slot (with
// prefix) is on another master than key's.
func keyOnAnotherNode(t *testing.T, c *redis.ClusterClient, prefix, key string) string {
	ctx := context.Background()
	node := func(key string) string {
		m, err := c.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return m.Options().Addr
	}
	for i := 0; ; i++ {
		k := "rate" + strconv.Itoa(i)
		if node(prefix+k) != node(key) {
			return k
		}
	}
}

// runHolds starts the children of cfg, lets them run for run, kills some
// of them (killHolders), and checks what TestHoldsAcrossProcesses says,
// and, when cfg has a rate part, the grants against it (rateWatch).
func runHolds(t *testing.T, client redis.UniversalClient, cfg holdConfig, run time.Duration) {
	ctx := context.Background()
	children := make([]*childproc.Child, holdProcs)
	for i := range children {
		cfg.Index = i
		env, _ := json.Marshal(cfg)
		children[i] = childproc.Start(t, "TestHoldChild", []string{holdChildEnv + "=" + string(env)}, 5*time.Minute, nil)
	}
	for _, c := range children {
		c.WaitReady(t, loadReadyWithin)
	}
	st := newGoRedis(t, client, redisstore.WithPrefix(cfg.Prefix))
	defer st.Close()
	lim := sluice.New(st)
	var rate *rateWatch
	if len(cfg.Parts) > 0 {
		rate = watchRate(t, client, lim, cfg.Prefix, cfg.Parts[0])
	}
	begin := time.Now()
	stop := begin.Add(run)
	startAt(t, children, stop)
	killed, orphans, lastKill := killHolders(t, client, cfg.Prefix, children, begin, run)
	var granted, refused, byRate, end int64
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
		refused += rep.Refused
		byRate += rep.ByRate
		end = max(end, rep.End)
	}
	if rate != nil {
		rate.check(t, granted, end)
	}
	most, _ := client.Get(ctx, inFlightKeys(cfg.Prefix)[1]).Int64()
	t.Logf("%d holds granted to the survivors, %d refused, at most %d in flight (limit %d)", granted, refused, most, holdLimit)
	if rate != nil {
		t.Logf("about %d of the refusals by the rate part (a retry within its window)", byRate)
	}
	if most > holdLimit || most == 0 {
		t.Fatalf("the independent count saw %d in flight, limit %d", most, holdLimit)
	}
	if n := heldBy(t, client, cfg.Prefix, 0); n != 0 {
		t.Fatalf("child 0, killed early, still has %d holds of a %v lifetime", n, cfg.Lifetime)
	}
	if orphans == 0 && testenv.Timing(t, "a child killed near the end has a hold") {
		t.Error("no child killed near the end had a hold: their return is not checked")
	}
	heldUntilExpiry(t, lim, client, cfg, orphans, lastKill)
}

// killHolders kills children with SIGKILL while they have holds, in two
// waves. First, child 0, whose slots must come back while the others
// still run. Second, near the end, children from 1 on, until the killed
// ones have a hold, whose return is checked after the run. It returns the
// children killed, the holds those of the second wave had, and when the
// last was killed.
func killHolders(t *testing.T, client redis.UniversalClient, prefix string, children []*childproc.Child, begin time.Time, run time.Duration) (killed []int, orphans int, lastKill time.Time) {
	stop := begin.Add(run)
	time.Sleep(run / 4)
	for heldBy(t, client, prefix, 0) == 0 && time.Since(begin) < run/2 {
		time.Sleep(time.Millisecond) // kill it while it has a hold
	}
	killed = []int{0}
	if err := children[0].Kill(); err != nil { // SIGKILL: no deferred release runs
		t.Fatal(err)
	}
	first, firstAt := heldBy(t, client, prefix, 0), time.Since(begin)
	time.Sleep(time.Until(stop.Add(-run / 5)))
	for i := 1; i < holdProcs-1 && orphans == 0 && time.Now().Before(stop); i++ {
		for heldBy(t, client, prefix, i) == 0 && time.Now().Before(stop) {
			time.Sleep(time.Millisecond)
		}
		if err := children[i].Kill(); err != nil {
			t.Fatal(err)
		}
		killed = append(killed, i)
		orphans += heldBy(t, client, prefix, i)
	}
	t.Logf("killed child 0 at +%v with %d holds, then %d more near the end holding %d", firstAt.Round(time.Millisecond), first, len(killed)-1, orphans)
	return killed, orphans, time.Now()
}

// heldUntilExpiry checks, once the survivors are done, that the slots
// still held are the killed holders', and come back at their expiry, not
// before.
func heldUntilExpiry(t *testing.T, lim *sluice.Limiter, client redis.UniversalClient, cfg holdConfig, orphans int, lastKill time.Time) {
	ctx := context.Background()
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

// rateWatch watches a fixed-window rate part while the children run: the
// server's time at the part's node when it starts (before the first
// take), and how often a look at the part, every rateLookEvery, found it
// spent out.
type rateWatch struct {
	part       sluice.Part
	from       int64 // µs
	stop, done chan struct{}
	looks, dry int64 // written by the watching goroutine until done
	err        error
}

const rateLookEvery = 10 * time.Millisecond

// watchRate starts watching part (a fixed window on a fresh key) of the
// store of lim, whose client and prefix are client and prefix.
func watchRate(t *testing.T, client redis.UniversalClient, lim *sluice.Limiter, prefix string, part sluice.Part) *rateWatch {
	w := &rateWatch{part: part, stop: make(chan struct{}), done: make(chan struct{})}
	w.from = serverMicros(t, client, prefix+part.Key)
	go func() {
		defer close(w.done)
		tick := time.NewTicker(rateLookEvery)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			r, err := lim.Take(context.Background(), part.Key, part.Limit, 0)
			if err != nil {
				w.err = err
				return
			}
			w.looks++
			if r.Remaining < part.Cost {
				w.dry++
			}
		}
	}()
	return w
}

// check stops the watch and checks the acquires granted to the survivors
// by to (the server's time after their last acquire) against the part:
// windows of Period, each opened by a take after the last one ended, on
// a key fresh at w.from, so at most (to − from)/Period + 1 of them opened
// by to, each admitting Rate units, Rate/Cost acquires.
func (w *rateWatch) check(t *testing.T, granted, to int64) {
	close(w.stop)
	<-w.done
	windows := (to-w.from)/w.part.Limit.Period.Microseconds() + 1
	bound := windows * (w.part.Limit.Rate / w.part.Cost)
	t.Logf("%d acquires granted to the survivors, at most %d by the rate part (%d windows of %d over %v); spent out at %d of %d looks",
		granted, bound, windows, w.part.Limit.Rate, time.Duration(to-w.from)*time.Microsecond, w.dry, w.looks)
	if w.err != nil {
		t.Fatalf("a look at the rate part: %v", w.err)
	}
	if granted > bound {
		t.Fatalf("%d acquires granted to the survivors, over the rate part's %d (%d windows of %d)", granted, bound, windows, w.part.Limit.Rate)
	}
	if w.dry == 0 && testenv.Timing(t, "the rate part was spent out within the run") {
		t.Error("the rate part was never seen spent out: it refused nothing, and its bound is not checked")
	}
}

const (
	holdChildEnv   = "SLUICE_HOLD_CHILD"
	holdResultMark = "hold-result: "
	holdProcs      = 8
	holdGoroutines = 32
	holdLimit      = 8
	holdKey        = "expensive"

	// apartRate per apartWindow is TestHoldsApartAcrossProcesses's rate
	// part: below what the holds alone pass under -race on a busy machine,
	// so that it is spent out in some windows, but not far below, so that
	// the hold refuses most acquires. apartWork is the most a hold is
	// worked with: long beside the round trips of a cross-slot acquire, so
	// that the count of holders reaches the limit.
	apartRate   = 20
	apartWindow = 250 * time.Millisecond
	apartWork   = 10 * time.Millisecond
)

// holdConfig is what a child of runHolds is asked to do.
type holdConfig struct {
	Addr  string   // a server's address, or
	Addrs []string // a cluster's masters'
	// Parts are the rate parts each acquire is joined to (Acquire with parts).
	Parts    []sluice.Part
	Prefix   string
	Lifetime time.Duration
	Work     time.Duration // the most a goroutine works with a hold
	Index    int           // the child's, in its members of the in-flight set
}

// client returns a client of the server or the cluster of cfg.
func (cfg *holdConfig) client() redis.UniversalClient {
	const wait = 20 * time.Second
	if len(cfg.Addrs) > 0 {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cfg.Addrs, DisableIdentity: true, MaxRetries: -1,
			ReadTimeout: wait, WriteTimeout: wait, PoolTimeout: wait})
	}
	return redis.NewClient(&redis.Options{Addr: cfg.Addr, DisableIdentity: true, MaxRetries: -1,
		ReadTimeout: wait, WriteTimeout: wait, PoolTimeout: wait})
}

type holdReport struct {
	Granted, Refused, Errors int64
	// ByRate is the refusals whose RetryAfter is within the first rate
	// part's window: the part's refusals (the hold is taken first, and
	// refuses with the wait to its first lease's expiry), and those of the
	// hold while a killed holder's lease is that close to its end.
	ByRate     int64
	FirstError string
	// End is, with rate parts, the server's TIME (µs) at the first part's
	// node after the child's last acquire returned.
	End int64
}

// inFlightKeys are the in-flight set of holders and the key of the most
// it counted, in one slot of a cluster (their {hash tag}).
func inFlightKeys(prefix string) []string {
	return []string{"{" + prefix + "}inflight", "{" + prefix + "}most"}
}

// The scripts below read the server's TIME, on a cluster that of the node
// of their keys' slot (TIME names no key: a script routes it by KEYS[1]).
// The nodes of redistest's cluster share the machine's clock, the one the
// hold's node decides expiries by. They write the µs as TIME's two
// integers joined, not as a Lua number, which Lua prints with 14 digits.
// They are sent by EVAL: a redis.Script made at init would hash them with
// SHA-1, which the test binary's run under GODEBUG=fips140=only
// (fips_test.go) refuses.
const (
	// inFlight adds a holder, scored by its hold's expiry, to the set of
	// work in flight (KEYS[1]) and counts the members whose hold has not
	// ended at the server's TIME, keeping the most ever counted in
	// KEYS[2].
	inFlight = `
local t = redis.call('TIME')
local now = t[1] .. string.format('%06d', t[2])
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
local n = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
if n > tonumber(redis.call('GET', KEYS[2]) or '0') then
  redis.call('SET', KEYS[2], n)
end
return n`

	// liveMembers returns the members of the set KEYS[1] whose hold has
	// not ended at the server's TIME.
	liveMembers = `
local t = redis.call('TIME')
return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. t[1] .. string.format('%06d', t[2]), '+inf')`

	// serverTime returns the server's TIME in µs, at KEYS[1]'s node.
	serverTime = `
local t = redis.call('TIME')
return tonumber(t[1]) * 1000000 + tonumber(t[2])`
)

// serverMicros is the server's TIME, in µs, at the node of key's slot.
func serverMicros(t *testing.T, c redis.UniversalClient, key string) int64 {
	now, err := c.Eval(context.Background(), serverTime, []string{key}).Int64()
	if err != nil {
		t.Fatal(err)
	}
	return now
}

// live returns the holders counted in flight at the server's TIME.
func live(t *testing.T, c redis.UniversalClient, prefix string) []string {
	members, err := c.Eval(context.Background(), liveMembers, inFlightKeys(prefix)[:1]).StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	return members
}

// liveCount is the number of holders counted in flight at the server's
// TIME.
func liveCount(t *testing.T, c redis.UniversalClient, prefix string) int64 {
	return int64(len(live(t, c, prefix)))
}

// heldBy is the number of holds child i has by the in-flight set at the
// server's TIME: its members ("i:id") not removed and not expired.
func heldBy(t *testing.T, c redis.UniversalClient, prefix string, i int) int {
	n := 0
	for _, m := range live(t, c, prefix) {
		if strings.HasPrefix(m, strconv.Itoa(i)+":") {
			n++
		}
	}
	return n
}

// TestHoldChild is the body of one child process of runHolds: its
// goroutines acquire a hold (with cfg's rate parts), count themselves in
// flight, work a little, and release it, until the stop time.
func TestHoldChild(t *testing.T) {
	raw, ok := childproc.Config(holdChildEnv)
	if !ok {
		t.Skip("a child process of TestHoldsAcrossProcesses")
	}
	var cfg holdConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	client := cfg.client()
	defer client.Close()
	st := newGoRedis(t, client, redisstore.WithPrefix(cfg.Prefix), redisstore.WithTimeout(20*time.Second))
	defer st.Close()
	lim := sluice.New(st)
	ctx := context.Background()
	stop := awaitStart(t)
	c := sluice.MaxConcurrent(holdLimit).WithLifetime(cfg.Lifetime)
	keys := inFlightKeys(cfg.Prefix)
	var window time.Duration // the first rate part's
	if len(cfg.Parts) > 0 {
		window = cfg.Parts[0].Limit.Period
	}
	var rep holdReport
	var firstErr atomic.Pointer[string]
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range holdGoroutines {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(g)))
			var granted, refused, byRate, errs int64
			fail := func(err error) {
				errs++
				s := err.Error()
				firstErr.CompareAndSwap(nil, &s)
			}
			for time.Now().Before(stop) {
				ls, err := lim.Acquire(ctx, holdKey, c, 1, cfg.Parts...) // Acquire when there are none
				if err != nil {
					fail(err)
					continue
				}
				if !ls.Allowed {
					refused++
					if ls.RetryAfter <= window {
						byRate++
					}
					time.Sleep(time.Duration(r.Int64N(int64(2 * time.Millisecond))))
					continue
				}
				granted++
				member := fmt.Sprintf("%d:%d", cfg.Index, ls.ID)
				if err := client.Eval(ctx, inFlight, keys, ls.Expiry, member).Err(); err != nil {
					fail(err)
				}
				time.Sleep(time.Duration(r.Int64N(int64(cfg.Work)))) // the work
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
			rep.ByRate += byRate
			rep.Errors += errs
			mu.Unlock()
		})
	}
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		rep.FirstError = *p
	}
	if len(cfg.Parts) > 0 {
		rep.End = serverMicros(t, client, cfg.Prefix+cfg.Parts[0].Key)
	}
	b, _ := json.Marshal(rep)
	fmt.Println(holdResultMark + string(b))
}
