package redisstore_test

// TestCompositeLoad hammers composite requests (the Telegram shape: a limit
// per chat and a global one, sluice.Limiter.TakeAll) on a real three-master
// Redis Cluster from several processes at once, and checks that no limit is
// ever exceeded for the server's clock.
//
// It is TestConcurrency's method (concurrency_test.go) for TakeAll on a
// cluster: the parent starts the cluster, picks the keys, and re-executes
// this test binary loadProcs times (the children run TestCompositeLoadChild,
// selected by -test.run and marked by the compositeChildEnv variable). Each
// child runs loadGoroutines goroutines calling
//
//	TakeAll(ctx, []sluice.Part{{chat, perChat, 1}, {"global", global, 1}})
//
// round-robin over compositeChats chats. The children start and stop
// together (loadChild's ready line, then the stop time on stdin) and print
// what they saw as one JSON line: the composites admitted and denied per
// chat, the errors, and every master's TIME just before their first TakeAll
// and just after their last one returned. Cluster nodes run on one machine
// and share its clock, but each key is still judged by the clock of the node
// that owns it: every admission on a key happened at that node's time in
// [tS, tE], tS the earliest child start and tE the latest child end read from
// that node, within [T0, T1], the parent's own TIME of that node before
// spawning and after every child exited.
//
// Four variants, one after the other on one cluster (the last is a
// comparison only, run with SLUICE_LONG=1):
//
//   - cross-slot: per-chat token bucket (5/s, burst 2) and global token
//     bucket (30/s, burst 10), every chat key in another slot than the global
//     key, the chats spread over the three masters. No script sees both keys:
//     redisstore takes the chat part, then the global part, and gives the
//     chat unit back when the global refuses (takeInTurn).
//   - same-slot: the same limits, every key under one {hash tag}: one atomic
//     composite script per decision.
//   - cross-slot-fixed-window: per-chat fixed window (5 per 1s) and the
//     global token bucket, across slots: the chat unit is given back when
//     the global refuses, as under the token bucket.
//   - same-slot-fixed-window: the same limits under one {hash tag}, for
//     comparison: a refused composite spends no window unit.
//
// The checks, per variant:
//
//   - per chat: composites admitted ≤ the worst case of SEMANTICS.md for a
//     span of tE−tS (and of T1−T0) on the chat's node: burst +
//     ⌊span·rate/period⌋ for the token bucket, rate·(⌊span/period⌋+1) for the
//     fixed window; and ≤ the bound its final state allows (TestConcurrency's
//     state bounds: units spent on a key, after give-backs, are at least the
//     composites admitted on it, so they bound those too).
//   - global: composites admitted over all chats ≤ burst + ⌊span·rate/period⌋
//     on the global key's node, and ≤ its state bound. The global part is the
//     last, so it is never given back: it is an ordinary token bucket.
//   - fixed window: the parent reads the chat keys every 50ms (on their
//     masters); no window ever holds more than rate units, windows never
//     overlap. Across slots the windows hold no more than the composites
//     admitted plus the units in flight at each read (taken by a composite
//     the global then refused, not yet given back: at most min(rate, callers)
//     per window sampled), and no more than the chat parts granted. In one
//     slot they hold no more than those admitted.
//   - token-bucket chat keys are deleted whenever a give-back fills them up
//     again (equivalent to fresh); for a missing key the state bound takes
//     it as full at the parent's TIME after the read.
//   - no errors; the server ran exactly the scripts the protocol implies
//     (INFO commandstats, reset before each run): one per decision in one
//     slot; across slots one per decision, one more per granted chat part,
//     and one give-back per chat part whose global refused. From that count
//     the parent derives how many chat units were spent and then given back.
//   - the same-slot runs saturate the global limit: ≥ 90% of its bound.
//
// The figures logged, per variant: admitted vs bound per key, the global's
// admitted vs its bound (how close the protocol comes to the limit; its
// weakness is under-admission, a chat unit held for a moment by a request the
// global then refuses), the global's
// refill left unused (its state bound minus its admissions: zero means it
// never sat full), decisions/s, and the chat units spent then given back.
// The test ends with the global's under-admission (1 − admitted/
// bound) of each variant side by side, each cross-slot run against the
// same-slot run with the same limits.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
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

const (
	// compositeChildEnv carries a child's compositeConfig (JSON); its
	// presence makes TestCompositeLoadChild run.
	compositeChildEnv = "SLUICE_COMPOSITE_LOAD_CHILD"

	// compositeResultMark starts the line a child prints its result on.
	compositeResultMark = "sluice-composite-load-child: result "

	compositeChats = 10
)

// compositePart is one limit of the composite, as a child is given it.
type compositePart struct {
	Algorithm string `json:"algorithm"`
	Rate      int64  `json:"rate"`
	Period    int64  `json:"period_us"`
	Burst     int64  `json:"burst"`
}

func (p compositePart) limit() (sluice.Limit, error) {
	alg, err := sluice.ParseAlgorithm(p.Algorithm)
	if err != nil {
		return sluice.Limit{}, err
	}
	l := sluice.Limit{Algorithm: alg, Rate: p.Rate, Period: time.Duration(p.Period) * time.Microsecond, Burst: p.Burst}
	return l, l.Validate()
}

func (p compositePart) String() string {
	if p.Algorithm == "fixed-window" {
		return fmt.Sprintf("%s %d/%v", p.Algorithm, p.Rate, time.Duration(p.Period)*time.Microsecond)
	}
	return fmt.Sprintf("%s %d/%v burst %d", p.Algorithm, p.Rate, time.Duration(p.Period)*time.Microsecond, p.Burst)
}

// compositeConfig is what a child process is asked to do.
type compositeConfig struct {
	Addrs      []string      `json:"addrs"` // the masters; TIME is read on each
	Prefix     string        `json:"prefix"`
	Chats      []string      `json:"chats"`
	Global     string        `json:"global"`
	ChatLimit  compositePart `json:"chat_limit"`
	GlobalLim  compositePart `json:"global_limit"`
	Goroutines int           `json:"goroutines"`
}

// compositeReport is what a child saw.
type compositeReport struct {
	Allowed    []int64 `json:"allowed"` // composites admitted, per chat
	Denied     []int64 `json:"denied"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	Start      []int64 `json:"start_us"` // per master: TIME before the first TakeAll
	End        []int64 `json:"end_us"`   // per master: TIME after the last TakeAll returned
}

// compositeNodeTimes reads TIME on every node, in order.
func compositeNodeTimes(ctx context.Context, nodes []*redis.Client) ([]int64, error) {
	out := make([]int64, len(nodes))
	for i, n := range nodes {
		tm, err := n.Time(ctx).Result()
		if err != nil {
			return nil, fmt.Errorf("TIME on %s: %w", n.Options().Addr, err)
		}
		out[i] = tm.UnixMicro()
	}
	return out, nil
}

// TestCompositeLoadChild is the body of one child process of
// TestCompositeLoad.
func TestCompositeLoadChild(t *testing.T) {
	raw := os.Getenv(compositeChildEnv)
	if raw == "" {
		t.Skip("a child process of TestCompositeLoad")
	}
	var cfg compositeConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatalf("%s: %v", compositeChildEnv, err)
	}
	chatLim, err := cfg.ChatLimit.limit()
	if err != nil {
		t.Fatal(err)
	}
	globalLim, err := cfg.GlobalLim.limit()
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:           cfg.Addrs,
		DisableIdentity: true,
		// No retry and no redirect: a command sent twice could be a second
		// decision, and the slot map does not change during the run. Every
		// error surfaces.
		MaxRedirects: -1,
		MaxRetries:   -1,
		// Eight race-instrumented processes on a small machine can be slow
		// to read replies; an error fails the test, so be patient.
		ReadTimeout:  20 * time.Second,
		WriteTimeout: 20 * time.Second,
		PoolTimeout:  20 * time.Second,
	})
	defer client.Close()
	// Unbatched: the parent counts the scripts the servers ran to check the
	// protocol (take, take, give back), which needs one script per step
	// rather than the batcher's multi-decision scripts.
	store := newGoRedis(t, client,
		redisstore.WithPrefix(cfg.Prefix),
		redisstore.WithTimeout(20*time.Second),
		redisstore.WithTTLMargin(time.Minute),
		redisstore.WithoutBatching())
	defer store.Close()
	l := sluice.New(store)
	ctx := context.Background()
	nodes := make([]*redis.Client, len(cfg.Addrs))
	for i, a := range cfg.Addrs {
		nodes[i] = redis.NewClient(&redis.Options{Addr: a, DisableIdentity: true, ReadTimeout: 20 * time.Second})
		defer nodes[i].Close()
	}
	// Load the slot map and open a connection to every master.
	if err := client.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		return c.Ping(ctx).Err()
	}); err != nil {
		t.Fatal(err)
	}
	parts := make([][]sluice.Part, len(cfg.Chats))
	for k, chat := range cfg.Chats {
		parts[k] = []sluice.Part{{Key: chat, Limit: chatLim, Cost: 1}, {Key: cfg.Global, Limit: globalLim, Cost: 1}}
	}

	stop := awaitStart(t)

	start, err := compositeNodeTimes(ctx, nodes)
	if err != nil {
		t.Fatal(err)
	}
	tl := hammer(cfg.Goroutines, len(cfg.Chats), stop, func(k int) (sluice.Result, error) {
		r, err := l.TakeAll(ctx, parts[k], nil)
		if err == nil && r.Degraded {
			err = fmt.Errorf("degraded decision %+v", r)
		}
		return r, err
	})
	end, err := compositeNodeTimes(ctx, nodes)
	if err != nil {
		t.Fatal(err)
	}

	rep := compositeReport{Allowed: tl.allowed, Denied: tl.denied, Errors: tl.errors, FirstError: tl.firstErr, Start: start, End: end}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(compositeResultMark + string(b))
}

// compositeVariant is one run of TestCompositeLoad.
type compositeVariant struct {
	name string
	tag  bool // every key under one {hash tag}: one slot
	chat compositePart
	long bool // run only with SLUICE_LONG=1
}

// compositeOutcome is a variant's figures for the final comparison.
type compositeOutcome struct {
	global, bound int64   // composites admitted over all chats; the global's run bound
	unused        int64   // the global's state bound minus its admissions: refill lost at the burst cap, or before the first admission
	perSec        float64 // decisions per second
	back          int64   // chat units spent by refused composites (given back or not)
	backKind      string
}

func TestCompositeLoad(t *testing.T) {
	if os.Getenv(compositeChildEnv) != "" {
		t.Skip("in a child process")
	}
	d := 10 * time.Second // SLUICE_LONG: long enough for a load burst to come and go
	if !testenv.Long() {
		d = time.Second
	}
	cl := redistest.SharedCluster(t)
	global := compositePart{Algorithm: "token-bucket", Rate: 30, Period: 1_000_000, Burst: 10}
	perChat := compositePart{Algorithm: "token-bucket", Rate: 5, Period: 1_000_000, Burst: 2}
	perChatWindow := compositePart{Algorithm: "fixed-window", Rate: 5, Period: 1_000_000}
	variants := []compositeVariant{
		{name: "cross-slot", chat: perChat},
		{name: "same-slot", tag: true, chat: perChat},
		{name: "cross-slot-fixed-window", chat: perChatWindow},
		{name: "same-slot-fixed-window", tag: true, chat: perChatWindow, long: true},
	}
	outcomes := map[string]*compositeOutcome{}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			if v.long && !testenv.Long() {
				t.Skip("a comparison only, run with " + testenv.LongEnv + "=1; the three other runs check the protocol")
			}
			outcomes[v.name] = runCompositeLoad(t, cl, v, global, d)
		})
	}
	// Side by side: how close each run's global came to its bound, and the
	// cross-slot protocol against the one-slot script with the same limits.
	for _, v := range variants {
		o := outcomes[v.name]
		if o == nil {
			continue
		}
		share := float64(o.global) / float64(o.bound)
		line := fmt.Sprintf("%-24s global admitted %4d of bound %4d (%5.1f%%, under-admission %4.1f%%; %d of its refill unused), %6.0f decisions/s, %d chat units %s",
			v.name, o.global, o.bound, 100*share, 100*(1-share), o.unused, o.perSec, o.back, o.backKind)
		if !v.tag {
			for _, w := range variants {
				if same := outcomes[w.name]; w.tag && w.chat == v.chat && same != nil {
					line += fmt.Sprintf("; %.3f× the share of %s", share/(float64(same.global)/float64(same.bound)), w.name)
				}
			}
		}
		t.Log(line)
	}
}

// runCompositeLoad runs one variant and checks it; it returns its figures,
// nil when the run itself failed.
func runCompositeLoad(t *testing.T, cl *redistest.ClusterServer, v compositeVariant, global compositePart, d time.Duration) *compositeOutcome {
	ctx := context.Background()
	cc := cl.Client()
	addrs := cl.Addrs()
	nodes := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		nodes[i] = redis.NewClient(&redis.Options{Addr: a, DisableIdentity: true})
		t.Cleanup(func() { _ = nodes[i].Close() })
	}
	nodeOf := func(key string) int {
		m, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatalf("master of %s: %v", key, err)
		}
		i := slices.Index(addrs, m.Options().Addr)
		if i < 0 {
			t.Fatalf("master of %s is %s, not one of %v", key, m.Options().Addr, addrs)
		}
		return i
	}

	// The keys.
	prefix := fmt.Sprintf("compload:%s:%d:", v.name, time.Now().UnixNano())
	if v.tag {
		prefix = fmt.Sprintf("compload:{%s:%d}:", v.name, time.Now().UnixNano())
	}
	cfg := compositeConfig{
		Addrs: addrs, Prefix: prefix, Global: "global",
		ChatLimit: v.chat, GlobalLim: global, Goroutines: loadGoroutines,
	}
	globalSlot := redisrun.Slot(prefix + cfg.Global)
	for i := 0; len(cfg.Chats) < compositeChats; i++ {
		if i > 100_000 {
			t.Fatalf("no chat keys found for prefix %q", prefix)
		}
		chat := "chat:" + strconv.Itoa(i)
		full := prefix + chat
		if v.tag {
			if redisrun.Slot(full) != globalSlot {
				t.Fatalf("%s: slot %d, not the global's %d: the hash tag does not hold", full, redisrun.Slot(full), globalSlot)
			}
			cfg.Chats = append(cfg.Chats, chat)
			continue
		}
		// Another slot than the global's, and the chats dealt round-robin
		// over the masters.
		if redisrun.Slot(full) == globalSlot || nodeOf(full) != len(cfg.Chats)%len(addrs) {
			continue
		}
		cfg.Chats = append(cfg.Chats, chat)
	}
	keys := append(slices.Clone(cfg.Chats), cfg.Global) // chats, then the global
	fullKeys := make([]string, len(keys))
	keyNode := make([]int, len(keys))
	layout := make([]string, len(keys))
	for i, k := range keys {
		fullKeys[i] = prefix + k
		keyNode[i] = nodeOf(fullKeys[i])
		layout[i] = fmt.Sprintf("%s→slot %d/node %d", k, redisrun.Slot(fullKeys[i]), keyNode[i])
	}
	env, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}

	for i, n := range nodes {
		if err := n.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatalf("CONFIG RESETSTAT on node %d: %v", i, err)
		}
	}
	t0, err := compositeNodeTimes(ctx, nodes)
	if err != nil {
		t.Fatal(err)
	}
	children := startLoadChildren(t, "TestCompositeLoadChild", compositeChildEnv, env, d)

	// Sample the window keys while the children run, each from its node.
	sampled := make([]chan loadSamples, len(nodes)) // nil: nothing sampled there
	byNode := make([][]int, len(nodes))             // key indexes sampled on each node
	stopSampling := make(chan struct{})
	stopOnce := sync.OnceFunc(func() { close(stopSampling) })
	defer stopOnce()
	if v.chat.Algorithm == "fixed-window" {
		for k := range cfg.Chats {
			byNode[keyNode[k]] = append(byNode[keyNode[k]], k)
		}
		for n, ks := range byNode {
			if len(ks) == 0 {
				continue
			}
			ch := make(chan loadSamples, 1)
			sampled[n] = ch
			names := make([]string, len(ks))
			for i, k := range ks {
				names[i] = fullKeys[k]
			}
			go func() { ch <- loadSampleKeys(ctx, nodes[n], names, stopSampling) }()
		}
	}

	reports := compositeRunChildren(t, children, d, len(cfg.Chats), len(nodes))
	stopOnce()
	samples := make([]loadSamples, len(sampled))
	for n, ch := range sampled {
		if ch != nil {
			samples[n] = <-ch
		}
	}
	t1, err := compositeNodeTimes(ctx, nodes)
	if err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		return nil
	}

	// Aggregate.
	admitted := make([]int64, len(cfg.Chats))
	denied := make([]int64, len(cfg.Chats))
	var errs int64
	tS, tE := slices.Clone(reports[0].Start), slices.Clone(reports[0].End)
	for i, r := range reports {
		for k := range cfg.Chats {
			admitted[k] += r.Allowed[k]
			denied[k] += r.Denied[k]
		}
		errs += r.Errors
		if r.Errors > 0 {
			t.Errorf("child %d: %d errors, the first: %s", i, r.Errors, r.FirstError)
		}
		for n := range nodes {
			tS[n], tE[n] = min(tS[n], r.Start[n]), max(tE[n], r.End[n])
		}
	}
	for n := range nodes {
		if tS[n] < t0[n] || tE[n] > t1[n] {
			t.Errorf("node %d: children ran over server time [%d, %d], outside the parent's [%d, %d]", n, tS[n], tE[n], t0[n], t1[n])
		}
	}
	var decisions, globalAdmitted int64
	for k := range cfg.Chats {
		decisions += admitted[k] + denied[k]
		globalAdmitted += admitted[k]
	}
	g := len(keys) - 1 // the global key's index
	gn := keyNode[g]
	span := tE[gn] - tS[gn]
	perSec := float64(decisions) / (float64(span) / 1e6)
	t.Logf("per chat %v, global %v; %d processes × %d goroutines over %d chats for %v; server span of the run %.3fs (T0..T1 %.3fs)",
		v.chat, global, loadProcs, loadGoroutines, len(cfg.Chats), d, float64(span)/1e6, float64(t1[gn]-t0[gn])/1e6)
	t.Logf("keys (prefix %q): %s", prefix, strings.Join(layout, ", "))
	t.Logf("%d composite decisions (%.0f/s), %d admitted, %d errors", decisions, perSec, globalAdmitted, errs)

	// The scripts the servers ran, against what the protocol implies.
	runs, err := compositeScriptRuns(ctx, nodes)
	if err != nil {
		t.Fatal(err)
	}
	out := &compositeOutcome{global: globalAdmitted, perSec: perSec}
	grants := decisions // chat parts granted
	crossSlot := !v.tag
	switch {
	case !crossSlot:
		// One composite script per decision.
		t.Logf("%d scripts run: one atomic composite script per decision", runs)
		if runs != decisions {
			t.Errorf("the servers ran %d scripts for %d composite decisions in one slot, want one each", runs, decisions)
		}
		out.backKind = "spent by refused composites (nothing is spent before all parts grant)"
	default:
		// One chat take per decision; for each granted chat part one global
		// take; for each global refusal one give-back of the chat unit
		// (TakeAll without each reads no part's figures, so the global
		// part a chat refusal never reached is not looked at).
		grants2 := runs - decisions + globalAdmitted
		grants = grants2 / 2
		back := grants - globalAdmitted
		t.Logf("%d scripts run: %d chat takes, %d chat grants, %d global takes, %d give-backs: %.2f chat units spent then given back per admitted composite",
			runs, decisions, grants, grants, back, float64(back)/float64(max(globalAdmitted, 1)))
		if grants2%2 != 0 || grants < globalAdmitted || grants > decisions {
			t.Errorf("the servers ran %d scripts for %d decisions of which %d admitted: not what take, take, give back implies", runs, decisions, globalAdmitted)
		}
		out.back, out.backKind = back, "spent then given back"
	}

	// Final states. A token bucket that fills up again is deleted (a store
	// may drop a key once it is equivalent to fresh): a chat whose last
	// operation gave its unit back is often missing. Its tokens were then
	// full at some time before the read, tRead on its node.
	final := make([][]int64, len(keys))
	missing := make([]bool, len(keys))
	for i, fk := range fullKeys {
		raw, err := cc.Get(ctx, fk).Result()
		if errors.Is(err, redis.Nil) {
			missing[i] = true
			continue
		}
		if err != nil {
			t.Errorf("%s: final state: %v", fk, err)
			continue
		}
		if final[i], err = loadParseState(raw); err != nil {
			t.Error(err)
		}
	}
	tRead, err := compositeNodeTimes(ctx, nodes)
	if err != nil {
		t.Fatal(err)
	}

	// Window samples, per chat.
	keySamples := make([][][]int64, len(cfg.Chats))
	for n, s := range samples {
		if s.errors > 0 {
			t.Logf("node %d: %d samples failed", n, s.errors)
		}
		for _, row := range s.rows {
			for i, raw := range row {
				if raw == "" {
					continue
				}
				st, err := loadParseState(raw)
				if err != nil {
					t.Error(err)
					continue
				}
				k := byNode[n][i]
				keySamples[k] = append(keySamples[k], st)
			}
		}
	}

	// Per key.
	var sampledSpent, sampledWindows int64
	for i, k := range keys {
		n := keyNode[i]
		span, window := tE[n]-tS[n], t1[n]-t0[n]
		lim, a, den := v.chat, int64(0), int64(0)
		if i == g {
			lim, a = global, globalAdmitted
		} else {
			a, den = admitted[i], denied[i]
		}
		var runBound, looseBound, stateBound int64
		var lines []string
		f := final[i]
		switch lim.Algorithm {
		case "token-bucket":
			runBound = lim.Burst + span*lim.Rate/lim.Period
			looseBound = lim.Burst + window*lim.Rate/lim.Period
			// "1 ls l 0 rate period": the level (full − tokens) scaled by
			// the period, last update.
			if missing[i] {
				f = []int64{1, 0, tRead[n], 0, lim.Rate, lim.Period}
				lines = append(lines, "final state: full again (key deleted)")
			}
			if len(f) != 6 || f[0] != 1 || f[5] != lim.Period {
				t.Errorf("%s: final state %v is not a token bucket's", k, f)
				break
			}
			xs, l := lim.Burst*lim.Period-f[1], f[2]
			stateBound = loadFloorDiv(lim.Burst*lim.Period-xs+lim.Rate*(l-tS[n]), lim.Period)
		case "fixed-window":
			runBound = lim.Rate * (span/lim.Period + 1)
			looseBound = lim.Rate * (window/lim.Period + 1)
			// "4 c e 0 rate period": the count of the window ending at e. A window
			// key outlives its window by the minute of TTL margin, unless a
			// give-back took its count to 0, which leaves the key fresh: then
			// the state bounds nothing the run does not.
			samples := keySamples[i]
			switch {
			case missing[i] && !v.tag:
				stateBound = runBound
				lines = append(lines, "final state: fresh (its last window given back)")
			case len(f) != 6 || f[0] != 4:
				t.Errorf("%s: final state %v is not a fixed window's", k, f)
			default:
				c, e := f[1], f[2]
				w := loadFloorDiv(e-tS[n], lim.Period) // windows that fit in [tS, e)
				if w < 1 || c > lim.Rate {
					t.Errorf("%s: final state %v impossible for a run from %d", k, f, tS[n])
				}
				// Windows holding admitted units never overlap (a give-back
				// takes back only units of refused composites, so their
				// count never reaches 0): at most w−1 of them end before e.
				stateBound = lim.Rate*(w-1) + c
				samples = append(samples, f)
			}
			sum, windows, line := compositeCheckWindows(t, k, lim, samples, !v.tag)
			sampledSpent += sum
			sampledWindows += windows
			lines = append(lines, line)
		}
		if a > runBound {
			t.Errorf("%s: admitted %d, over the bound %d for a span of %dµs", k, a, runBound, span)
		}
		if a > looseBound {
			t.Errorf("%s: admitted %d, over the bound %d for T1−T0 = %dµs", k, a, looseBound, window)
		}
		if a > stateBound {
			t.Errorf("%s: admitted %d, more than its final state %v allows: %d (start %d)", k, a, f, stateBound, tS[n])
		}
		pct := 100 * float64(a) / float64(max(runBound, 1))
		t.Logf("  %-8s node %d: admitted %4d of bound(run) %4d (%5.1f%%), bound(T0..T1) %d, bound(state) %d, denied %d%s",
			k, n, a, runBound, pct, looseBound, stateBound, den, strings.Join(append([]string{""}, lines...), " | "))
		if i == g {
			out.bound, out.unused = runBound, stateBound-a
			if v.tag && 10*a < 9*runBound && testenv.Timing(t, "the global limit saturated under load") {
				t.Errorf("%s: admitted %d, only %.1f%% of %d: the global limit was not saturated", k, a, pct, runBound)
			}
		}
	}
	switch {
	case v.chat.Algorithm != "fixed-window":
	case crossSlot:
		inFlight := sampledWindows * min(v.chat.Rate, int64(loadProcs*loadGoroutines))
		t.Logf("the sampled windows hold %d chat units, of the %d composites admitted (%+d; at most %d in flight at the reads of %d windows)",
			sampledSpent, globalAdmitted, sampledSpent-globalAdmitted, inFlight, sampledWindows)
		if sampledSpent > globalAdmitted+inFlight {
			t.Errorf("the sampled windows hold %d chat units, more than the %d composites admitted plus %d in flight: a window unit was not given back",
				sampledSpent, globalAdmitted, inFlight)
		}
		if sampledSpent > grants {
			t.Errorf("the sampled windows hold %d chat units, more than the %d chat parts granted", sampledSpent, grants)
		}
	case sampledSpent > globalAdmitted:
		t.Errorf("the sampled windows hold %d chat units, more than the %d composites admitted: a one-slot composite spent units it refused",
			sampledSpent, globalAdmitted)
	default:
		t.Logf("the sampled windows hold %d chat units, of the %d composites admitted: a refused composite spends nothing", sampledSpent, globalAdmitted)
	}
	return out
}

// compositeCheckWindows checks the sampled fixed-window states of one key:
// no window over rate, windows never overlapping. Unlike loadCheckFixed it
// does not compare with the admitted count: here the windows also hold the
// units in flight of composites that another part then refused. Where the
// parts are taken in turn (givesBack), a window may be overlapped by a later
// one: a give-back that takes a window's count to 0 leaves the key fresh, as
// a refused composite found it, so the next take opens a window of its own;
// the overlaps are counted, not refused. It returns the units the sampled
// windows hold, how many windows, and a summary.
func compositeCheckWindows(t *testing.T, name string, lim compositePart, states [][]int64, givesBack bool) (sum, n int64, summary string) {
	t.Helper()
	windows := map[int64]int64{} // end → highest count seen
	for _, st := range states {
		if len(st) != 6 || st[0] != 4 {
			t.Errorf("%s: sampled state %v is not a fixed window's", name, st)
			continue
		}
		c, e := st[1], st[2]
		if c < 0 || c > lim.Rate {
			t.Errorf("%s: sampled window ending at %d holds %d, over %d", name, e, c, lim.Rate)
		}
		windows[e] = max(windows[e], c)
	}
	ends := make([]int64, 0, len(windows))
	for e, c := range windows {
		ends = append(ends, e)
		sum += c
	}
	slices.Sort(ends)
	overlaps := 0
	for i := 1; i < len(ends); i++ {
		if ends[i]-ends[i-1] < lim.Period {
			overlaps++
			if !givesBack {
				t.Errorf("%s: windows ending at %d and %d overlap (period %dµs)", name, ends[i-1], ends[i], lim.Period)
			}
		}
	}
	return sum, int64(len(ends)), fmt.Sprintf("%d windows sampled, each ≤ %d, %d overlapping one given back, holding %d", len(ends), lim.Rate, overlaps, sum)
}

// compositeScriptRuns sums the scripts the nodes ran successfully since
// their statistics were reset: EVALSHA and EVAL calls that did not fail (a
// NOSCRIPT reply is a failed EVALSHA, followed by an EVAL).
func compositeScriptRuns(ctx context.Context, nodes []*redis.Client) (int64, error) {
	var runs int64
	for _, n := range nodes {
		info, err := n.Info(ctx, "commandstats").Result()
		if err != nil {
			return 0, fmt.Errorf("INFO commandstats on %s: %w", n.Options().Addr, err)
		}
		for line := range strings.SplitSeq(info, "\n") {
			rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:")
			if !ok {
				rest, ok = strings.CutPrefix(strings.TrimSpace(line), "cmdstat_eval:")
			}
			if !ok {
				continue
			}
			var calls, failed int64
			for field := range strings.SplitSeq(rest, ",") {
				name, val, _ := strings.Cut(field, "=")
				x, _ := strconv.ParseInt(val, 10, 64)
				switch name {
				case "calls":
					calls = x
				case "failed_calls":
					failed = x
				}
			}
			runs += calls - failed
		}
	}
	return runs, nil
}

// compositeRunChildren gives the ready children a stop time d from now,
// waits for them and returns their reports (only if every child reported).
func compositeRunChildren(t *testing.T, children []*childproc.Child, d time.Duration, chats, nodes int) []*compositeReport {
	stop := time.Now().Add(d)
	startAt(t, children, stop)
	var reports []*compositeReport
	for i, c := range children {
		out, res, werr := childResult(t, i, c, stop, compositeResultMark)
		var r *compositeReport
		var perr error
		if res != "" {
			r = new(compositeReport)
			perr = json.Unmarshal([]byte(res), r)
		}
		switch {
		case werr != nil || r == nil || perr != nil:
			t.Errorf("child %d: exit %v, result %v:\n%s", i, werr, perr, out)
		case len(r.Allowed) != chats || len(r.Denied) != chats:
			t.Errorf("child %d: result for %d chats, want %d", i, len(r.Allowed), chats)
		case len(r.Start) != nodes || len(r.End) != nodes:
			t.Errorf("child %d: times of %d nodes, want %d", i, len(r.Start), nodes)
		default:
			reports = append(reports, r)
		}
	}
	return reports
}
