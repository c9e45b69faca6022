package redisstore_test

// Key lifetimes in Redis (every key has a TTL that ends once its state is
// equivalent to fresh, plus the margin) and clocks that step backwards.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/storetest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/redisstore"
)

// maxToFresh is the longest a key's state can take to become equivalent to
// fresh under p, in µs: SEMANTICS.md's reset_after at its largest, a debt
// of p.Debt included.
func maxToFresh(p algo.Params) int64 {
	ceil := func(a, b int64) int64 { return (a + b - 1) / b }
	switch p.Kind {
	case algo.TokenBucket, algo.GCRA:
		return ceil((p.Burst+p.Debt)*p.Period, p.Rate) // a bucket in debt refills
	case algo.LeakyBucket:
		return ceil((p.Burst+1)*p.Period, p.Rate) // a full queue drains
	case algo.SlidingWindow:
		return 2 * p.Period // the current window, then the next, where it is prev
	case algo.FixedWindow, algo.AlignedWindow:
		return p.Period + ceil(p.Debt, p.Rate)*p.Period // the window, then those its debt carries into
	default:
		return p.Period // the newest entry of the log
	}
}

// ttlLimits covers every algorithm with short periods, so that keys expire
// within a test, and integer and non-integer emission intervals; and the
// algorithms that can charge with debt allowances too.
func ttlLimits() []algo.Params {
	var ps []algo.Params
	for _, k := range algo.Kinds() {
		for _, rp := range [][3]int64{{3, 200_000, 4}, {1, 500_000, 2}, {7, 100_000, 1}, {2, 1_500_000, 3}} {
			burst := rp[2]
			if k == algo.LeakyBucket {
				burst--
			}
			p := algo.Params{Kind: k, Rate: rp[0], Period: rp[1], Burst: burst}
			ps = append(ps, p)
			if algo.Chargeable(k) {
				p.Debt = 2 * p.Capacity()
				ps = append(ps, p)
			}
		}
	}
	return ps
}

// freshWindow brackets the instant (µs, wall clock = the server's TIME on
// this machine) from which a key's state is equivalent to fresh: the latest
// of now + reset_after over the decisions that found state to keep
// (reset_after > 0), with now between the call's start and end.
type freshWindow struct {
	p      algo.Params
	lo, hi int64
}

func (w *freshWindow) add(start, end time.Time, res sluice.Result) {
	r := res.ResetAfter.Microseconds()
	if r <= 0 {
		return
	}
	w.lo = max(w.lo, start.UnixMicro()+r)
	w.hi = max(w.hi, end.UnixMicro()+r)
}

// checkTTL checks one key's PTTL (ms, read between p0 and p1) against the
// window its decisions give and against the algorithm's bound. slack covers
// the rounding to ms.
func checkTTL(t *testing.T, key string, pttl time.Duration, p0, p1 time.Time, w freshWindow, margin int64) {
	t.Helper()
	const slack = 3_000 // µs
	ms := pttl.Milliseconds()
	switch {
	case pttl == -1 || ms == -1:
		t.Errorf("%s (%+v): no TTL", key, w.p)
		return
	case pttl == -2 || ms <= 0:
		// Expired (or expiring) between SCAN and PTTL, when no decision
		// ran: only once fresh plus the margin.
		if w.lo+margin-slack > p1.UnixMicro() {
			t.Errorf("%s (%+v): PTTL %v, %dµs before its state was fresh plus the margin", key, w.p, pttl, w.lo+margin-p1.UnixMicro())
		}
		return
	}
	us := ms * 1000
	if bound := maxToFresh(w.p) + margin + slack; us > bound {
		t.Errorf("%s (%+v): PTTL %dms, over the time to fresh at most (%dµs) plus the margin (%dµs)",
			key, w.p, ms, maxToFresh(w.p), margin)
	}
	if hi := w.hi + margin - p0.UnixMicro() + slack; us > hi {
		t.Errorf("%s (%+v): PTTL %dms, its state is fresh plus the margin within %dµs", key, w.p, ms, hi-slack)
	}
	if lo := w.lo + margin - p1.UnixMicro() - slack; us < lo {
		t.Errorf("%s (%+v): PTTL %dms, but its state is not fresh plus the margin for %dµs: expiry would change a decision",
			key, w.p, ms, lo+slack)
	}
}

// TestTTLAfterRandomLoad runs a random load over all seven algorithms (many
// keys, costs from 0 to capacity, the server's time; under a debt
// allowance, one decision in three a charge, of up to twice the capacity
// and the allowance), then scans the namespace: every key has a TTL, none
// longer than its algorithm's time to fresh (its debt paid) plus the
// margin, and each expires neither before nor (beyond rounding) after its
// state is fresh plus the margin; every key whose state is not yet fresh is
// still there.
func TestTTLAfterRandomLoad(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := srv.Client()
	ctx := context.Background()
	const margin = 100 * time.Millisecond
	seed := testenv.Seed(t)
	prefix := fmt.Sprintf("ttl:%d:%d:", seed, time.Now().UnixNano())
	st := newGoRedis(t, c, redisstore.WithPrefix(prefix), redisstore.WithTTLMargin(margin))
	defer st.Close()

	ps := ttlLimits()
	const keysPer = 8
	load, workers := time.Second, 6
	if !testenv.Long() {
		load = 400 * time.Millisecond
	}
	var mu sync.Mutex
	windows := map[string]*freshWindow{}
	var wg sync.WaitGroup
	end := time.Now().Add(load)
	decisions := 0
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			for time.Now().Before(end) {
				p := ps[r.IntN(len(ps))]
				key := fmt.Sprintf("%s:%d/%d/%d/%d:%d", p.Kind, p.Rate, p.Period, p.Burst, p.Debt, r.IntN(keysPer))
				cost := r.Int64N(p.Capacity() + 1)
				if r.IntN(3) == 0 {
					cost = min(cost, 1)
				}
				decide := take
				if p.Debt > 0 && r.IntN(3) == 0 {
					decide, cost = charge, r.Int64N(2*(p.Capacity()+p.Debt)+1)
				}
				start := time.Now()
				res, err := decide(ctx, st, storelink.Request{Key: key, Params: p, Cost: cost, MaxDelay: algo.Never})
				stop := time.Now()
				if err != nil {
					t.Errorf("%s: %v", key, err)
					return
				}
				mu.Lock()
				fw := windows[key]
				if fw == nil {
					fw = &freshWindow{p: p}
					windows[key] = fw
				}
				fw.add(start, stop, res)
				decisions++
				mu.Unlock()
			}
		})
	}
	wg.Wait()

	var keys []string
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	scanned := time.Now()
	p0 := time.Now()
	cmds, err := c.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for _, k := range keys {
			pl.PTTL(ctx, k)
		}
		return nil
	})
	p1 := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for i, k := range keys {
		name := strings.TrimPrefix(k, prefix)
		found[name] = true
		fw := windows[name]
		if fw == nil {
			t.Errorf("%s: a key no decision made", k)
			continue
		}
		checkTTL(t, k, cmds[i].(*redis.DurationCmd).Val(), p0, p1, *fw, margin.Microseconds())
	}
	// Keys that must still be there: those whose state is not fresh, and
	// those whose state is fresh but not yet fresh plus the margin, unless a
	// later decision found it fresh and deleted it (only a sliding log's
	// query does: it stores the pruned log, or deletes an empty one).
	alive := 0
	for name, fw := range windows {
		until := fw.lo + margin.Microseconds()
		if fw.p.Kind == algo.SlidingLog {
			until = fw.lo
		}
		if until-3_000 > scanned.UnixMicro() {
			alive++
			if !found[name] {
				t.Errorf("%s (%+v): gone %dµs too early (state fresh at %dµs from the scan, margin %v)", name, fw.p,
					until-scanned.UnixMicro(), fw.lo-scanned.UnixMicro(), margin)
			}
		}
	}
	t.Logf("%d decisions on %d keys; %d keys left, all with a TTL in bounds (%d had to be)", decisions, len(windows), len(keys), alive)
	if len(keys) == 0 {
		t.Error("no key left to check")
	}
}

// TestTTLIdleKeyExpires leaves a key of each algorithm idle after one
// decision and polls it: it stays until its state is fresh plus the margin
// (200ms periods, WithTTLMargin(100ms)) and is gone right after, and the
// next decision is a fresh key's. A key charged into debt stays until its
// debt is paid and it is fresh (plus the margin), three times as long as
// it would without the debt.
func TestTTLIdleKeyExpires(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := srv.Client()
	ctx := context.Background()
	const margin = 100 * time.Millisecond
	prefix := fmt.Sprintf("idle:%d:", time.Now().UnixNano())
	st := newGoRedis(t, c, redisstore.WithPrefix(prefix), redisstore.WithTTLMargin(margin))
	t.Cleanup(func() { st.Close() }) // after the parallel subtests
	for _, p := range []algo.Params{
		{Kind: algo.TokenBucket, Rate: 2, Period: 200_000, Burst: 3}, // refills in 300ms
		{Kind: algo.GCRA, Rate: 2, Period: 200_000, Burst: 3},
		{Kind: algo.LeakyBucket, Rate: 2, Period: 200_000, Burst: 2},
		{Kind: algo.FixedWindow, Rate: 3, Period: 200_000},
		{Kind: algo.SlidingWindow, Rate: 3, Period: 200_000},
		{Kind: algo.SlidingLog, Rate: 3, Period: 200_000},
		// Charged the capacity and the debt: fresh in 900ms, 600ms.
		{Kind: algo.TokenBucket, Rate: 2, Period: 200_000, Burst: 3, Debt: 6},
		{Kind: algo.GCRA, Rate: 2, Period: 200_000, Burst: 3, Debt: 6},
		{Kind: algo.FixedWindow, Rate: 3, Period: 200_000, Debt: 6},
		{Kind: algo.AlignedWindow, Rate: 3, Period: 200_000, Debt: 6},
	} {
		name, decide := p.Kind.String(), take
		if p.Debt > 0 {
			name, decide = name+"/debt", charge
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			key := name
			req := storelink.Request{Key: key, Params: p, Cost: p.Capacity() + p.Debt, MaxDelay: algo.Never}
			start := time.Now()
			res, err := decide(ctx, st, req)
			stop := time.Now()
			if err != nil || !res.Allowed {
				t.Fatalf("%+v, %v", res, err)
			}
			fw := freshWindow{p: p}
			fw.add(start, stop, res)
			expLo, expHi := fw.lo+margin.Microseconds(), fw.hi+margin.Microseconds()
			deadline := time.UnixMicro(expHi).Add(300 * time.Millisecond)
			polls := 0
			for {
				b := time.Now()
				n, err := c.Exists(ctx, redisstore.RateKey(st, key)).Result()
				a := time.Now()
				if err != nil {
					t.Fatal(err)
				}
				polls++
				if n == 0 {
					if a.UnixMicro() < expLo-2_000 {
						t.Errorf("gone %v before its state was fresh plus the margin", time.UnixMicro(expLo).Sub(a))
					}
					t.Logf("reset_after %v; gone %v after the decision (fresh plus margin: %v to %v), %d polls",
						res.ResetAfter, b.Sub(stop), time.UnixMicro(expLo).Sub(stop), time.UnixMicro(expHi).Sub(start), polls)
					break
				}
				if b.After(deadline) {
					t.Fatalf("still there %v after its state was fresh plus the margin", b.Sub(time.UnixMicro(expHi)))
				}
				time.Sleep(2 * time.Millisecond)
			}
			if p.Debt > 0 && res.Remaining != -p.Debt {
				t.Errorf("the charge left %+v, want a debt of %d", res, p.Debt)
			}
			// What follows is a fresh key's decision.
			got, err := decide(ctx, st, req)
			if err != nil || !got.Allowed || got.Remaining != res.Remaining {
				t.Errorf("after expiry: %+v, %v; want a fresh key's %+v", got, err, res)
			}
		})
	}
}

// TestTTLRepair removes the TTL of a key (PERSIST after a decision) and
// checks that the next decision, a cost-0 query included, gives it one
// again, within the algorithm's bound; also once the state has gone stale.
func TestTTLRepair(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := srv.Client()
	ctx := context.Background()
	const margin = 100 * time.Millisecond
	prefix := fmt.Sprintf("repair:%d:", time.Now().UnixNano())
	st := newGoRedis(t, c, redisstore.WithPrefix(prefix), redisstore.WithTTLMargin(margin))
	t.Cleanup(func() { st.Close() }) // after the parallel subtests

	type variant struct {
		name   string
		period int64 // µs
		idle   time.Duration
		cost   int64
	}
	variants := []variant{
		{"take", 10_000_000, 0, 1},
		{"query", 10_000_000, 0, 0},
		// The state is fresh again (two periods passed) but the key, with
		// no TTL, is still there.
		{"stale-take", 50_000, 120 * time.Millisecond, 1},
		{"stale-query", 50_000, 120 * time.Millisecond, 0},
	}
	for _, k := range algo.Kinds() {
		for _, v := range variants {
			t.Run(k.String()+"/"+v.name, func(t *testing.T) {
				t.Parallel()
				p := algo.Params{Kind: k, Rate: 3, Period: v.period, Burst: 3}
				if k == algo.LeakyBucket {
					p.Burst = 2
				}
				key := k.String() + ":" + v.name
				rk := redisstore.RateKey(st, key)
				take := func(cost int64) (sluice.Result, time.Time, time.Time) {
					t.Helper()
					start := time.Now()
					res, err := take(ctx, st, storelink.Request{Key: key, Params: p, Cost: cost, MaxDelay: algo.Never})
					if err != nil {
						t.Fatal(err)
					}
					return res, start, time.Now()
				}
				take(2)
				if ok, err := c.Persist(ctx, rk).Result(); err != nil || !ok {
					t.Fatalf("PERSIST %s = %v, %v", rk, ok, err)
				}
				if d, err := c.PTTL(ctx, rk).Result(); err != nil || d != -1 {
					t.Fatalf("PTTL after PERSIST = %v, %v; want -1", d, err)
				}
				time.Sleep(v.idle)
				res, start, stop := take(v.cost)
				p0 := time.Now()
				d, err := c.PTTL(ctx, rk).Result()
				p1 := time.Now()
				if err != nil {
					t.Fatal(err)
				}
				fw := freshWindow{p: p}
				fw.add(start, stop, res)
				if fw.lo == 0 {
					// Fresh state: expiry any time from now on is right,
					// but not never.
					if d == -1 || d > margin+3*time.Millisecond {
						t.Errorf("state fresh again, PTTL %v; want a TTL of at most the margin, or no key", d)
					}
					return
				}
				checkTTL(t, rk, d, p0, p1, fw, margin.Microseconds())
			})
		}
	}
}

// TestClockBackwardsTokenBucket: with the caller's time, a clock that goes
// back behind the key's stored time gives no refill and no penalty. The
// decision at the earlier time equals the decision at the stored time, on
// every step of random traces whose clock jumps back and forth (a twin key
// gets the clamped times), and equals memstore's.
func TestClockBackwardsTokenBucket(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	ctx := context.Background()
	seed := testenv.Seed(t)
	r := rand.New(rand.NewPCG(seed, 11))
	st := newGoRedis(t, srv.Client(), redisstore.WithPrefix(fmt.Sprintf("back:%d:%d:", seed, time.Now().UnixNano())), redisstore.WithTTLMargin(time.Hour))
	defer st.Close()

	traces, n := 6, 120
	if !testenv.Long() {
		traces, n = 2, 60
	}
	back := 0
	for ti := range traces {
		p := algo.Params{Kind: algo.TokenBucket, Rate: 1 + r.Int64N(5), Period: 1_000_000, Burst: 1 + r.Int64N(6)}
		ms := memstore.New()
		x, y := fmt.Sprintf("t%d:x", ti), fmt.Sprintf("t%d:y", ti)
		now, stored := base, int64(0)
		for i := range n {
			switch r.IntN(3) {
			case 0:
				now -= r.Int64N(2 * p.Period)
			default:
				now += r.Int64N(p.Period)
			}
			cost := r.Int64N(p.Burst + 1)
			at := max(now, stored) // the stored time, if the clock went back
			if now < stored {
				back++
			}
			req := storelink.Request{Key: x, Params: p, Cost: cost, MaxDelay: algo.Never}
			got, err := storetest.TakeAt(ctx, st, req, now)
			if err != nil {
				t.Fatal(err)
			}
			req.Key = y
			want, err := storetest.TakeAt(ctx, st, req, at)
			if err != nil {
				t.Fatal(err)
			}
			req.Key = x
			mem, _ := storetest.TakeAt(ctx, ms, req, now)
			mem.FreshAt = 0
			if got != want || got != mem {
				t.Fatalf("%+v step %d, cost %d at %d (stored time %d):\n at the earlier time %+v\n at the stored time %+v\n memstore %+v",
					p, i, cost, now-base, stored-base, got, want, mem)
			}
			if cost > 0 {
				stored = at
			}
		}
	}
	t.Logf("%d traces, %d decisions at a time behind the stored one, all equal to the decision at the stored time", traces, back)

	// The same through Take with WithClock and a clock stepped by hand:
	// burst 5, one unit per second.
	var mu sync.Mutex
	clock := base
	set := func(us int64) { mu.Lock(); clock = us; mu.Unlock() }
	cs := newGoRedis(t, srv.Client(), redisstore.WithPrefix(fmt.Sprintf("back:%d:%d:caller:", seed, time.Now().UnixNano())),
		redisstore.WithClock(storelink.MicroClock(func() int64 { mu.Lock(); defer mu.Unlock(); return clock })))
	defer cs.Close()
	p := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: 1_000_000, Burst: 5}
	take := func(cost int64) sluice.Result {
		t.Helper()
		res, err := take(ctx, cs, storelink.Request{Key: "k", Params: p, Cost: cost, MaxDelay: algo.Never})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	steps := []struct {
		at   int64 // µs after base
		cost int64
		want sluice.Result
	}{
		{0, 2, sluice.Result{Allowed: true, Remaining: 3, ResetAfter: 2 * time.Second}},
		// 700ms back: no refill (the clock is behind), no penalty.
		{-700_000, 1, sluice.Result{Allowed: true, Remaining: 2, ResetAfter: 3 * time.Second}},
		{-900_000, 3, sluice.Result{Remaining: 2, RetryAfter: time.Second, ResetAfter: 3 * time.Second}},
		// A second after the stored time (not after the earlier clock):
		// exactly one unit back.
		{1_000_000, 0, sluice.Result{Allowed: true, Remaining: 3, ResetAfter: 2 * time.Second}},
		{1_500_000, 3, sluice.Result{Allowed: true, Remaining: 0, ResetAfter: 4500 * time.Millisecond}},
		// 300ms back again: read at the stored 1.5s.
		{1_200_000, 0, sluice.Result{Allowed: true, Remaining: 0, ResetAfter: 4500 * time.Millisecond}},
		{1_200_000, 1, sluice.Result{Remaining: 0, RetryAfter: 500 * time.Millisecond, ResetAfter: 4500 * time.Millisecond}},
	}
	for i, s := range steps {
		set(base + s.at)
		if got := take(s.cost); got != s.want {
			t.Errorf("WithClock step %d (cost %d at %+dms): %+v, want %+v", i, s.cost, s.at/1000, got, s.want)
		}
	}
}

// TestClockBackwardsConformance replays random traces whose clock jumps back
// and forth, for every algorithm, through the Redis store and memstore: the
// scripts treat a clock that went back exactly as package algo does.
func TestClockBackwardsConformance(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	ctx := context.Background()
	seed := testenv.Seed(t)
	r := rand.New(rand.NewPCG(seed, 12))
	st := newGoRedis(t, srv.Client(), redisstore.WithPrefix(fmt.Sprintf("backconf:%d:%d:", seed, time.Now().UnixNano())), redisstore.WithTTLMargin(time.Hour))
	defer st.Close()
	n := 80
	if !testenv.Long() {
		n = 30
	}
	decisions := 0
	for li, p := range limits() {
		ms := memstore.New()
		now := base + r.Int64N(p.Period)
		for i := range n {
			if r.IntN(3) == 0 {
				now -= r.Int64N(2*p.Period + 1)
			} else {
				now += r.Int64N(p.Period + 1)
			}
			key := fmt.Sprintf("l%d:k%d", li, r.IntN(2))
			req := storelink.Request{Key: key, Params: p, Cost: r.Int64N(p.Capacity() + 1), MaxDelay: algo.Never}
			got, err := storetest.TakeAt(ctx, st, req, now)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := storetest.TakeAt(ctx, ms, req, now)
			want.FreshAt = 0
			if got != want {
				t.Fatalf("%+v request %d (cost %d at %d):\n redis  %+v\n memory %+v", p, i, req.Cost, now-base, got, want)
			}
			decisions++
		}
	}
	t.Logf("%d decisions with a clock going back, identical in Redis and memory", decisions)
}
