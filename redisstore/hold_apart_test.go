package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/redisstore"
)

// TestHoldAllApart: on a cluster, a composite of a hold and rate parts
// whose keys are in different slots is decided in turn: admitted, the
// hold is held and the parts spent; refused by the hold or by a part,
// nothing is held or spent; with a {hash tag} it is one script.
func TestHoldAllApart(t *testing.T) {
	c := redistest.SharedCluster(t).Client()
	prefix := fmt.Sprintf("holdapart:%d:", time.Now().UnixNano())
	st := newGoRedis(t, c, redisstore.WithPrefix(prefix))
	defer st.Close()
	if redisrun.Slot(redisstore.HoldKey(st, "job")) == redisrun.Slot(prefix+"rate") {
		t.Fatal("the hold and the rate part share a slot")
	}
	lim := sluice.New(st)
	ctx := context.Background()
	one := sluice.MaxConcurrent(1)
	rate := []sluice.Part{{Key: "rate", Limit: sluice.PerHour(2), Cost: 1}}
	first, err := lim.Acquire(ctx, "job", one, 1, rate...)
	if err != nil || !first.Allowed || first.ID == 0 || first.Remaining != 0 {
		t.Fatalf("keys in two slots: %+v %v, want held", first, err)
	}
	// Refused by the hold: the rate part is not reached, and spends nothing.
	if ls, err := lim.Acquire(ctx, "job", one, 1, rate...); err != nil || ls.Allowed || ls.ID != 0 || ls.RetryAfter == 0 {
		t.Fatalf("the hold held: %+v %v, want a refusal", ls, err)
	}
	if _, err := lim.Release(ctx, first); err != nil {
		t.Fatal(err)
	}
	// The second unit of the rate, then a refusal by the rate part: the
	// hold taken first is released.
	second, err := lim.Acquire(ctx, "job", one, 1, rate...)
	if err != nil || !second.Allowed {
		t.Fatalf("the second unit: %+v %v", second, err)
	}
	if _, err := lim.Release(ctx, second); err != nil {
		t.Fatal(err)
	}
	if ls, err := lim.Acquire(ctx, "job", one, 1, rate...); err != nil || ls.Allowed || ls.ID != 0 || ls.RetryAfter == 0 {
		t.Fatalf("the rate spent: %+v %v, want a refusal", ls, err)
	}
	if ls, err := lim.Acquire(ctx, "job", one, 1); err != nil || !ls.Allowed {
		t.Fatalf("the refused composite kept the hold: %+v %v", ls, err)
	}
	tagged := []sluice.Part{{Key: "{u}rate", Limit: sluice.PerMinute(1), Cost: 1}}
	if ls, err := lim.Acquire(ctx, "{u}job", one, 1, tagged...); err != nil || !ls.Allowed || ls.ID == 0 {
		t.Fatalf("keys with one hash tag: %+v %v", ls, err)
	}
}

// TestHoldAllApartError: a part that fails after the hold and an earlier
// part were taken (a key of another type; the node of its slot stopped)
// is an error that leaves nothing held and nothing spent; under FailOpen,
// the policy's grant, with nothing held or spent in Redis either.
func TestHoldAllApartError(t *testing.T) {
	t.Parallel()
	cl := redistest.Cluster(t)
	c := cl.NewClient(t, func(o *redis.ClusterOptions) {
		o.MaxRedirects, o.DialTimeout, o.ReadTimeout = 1, 200*time.Millisecond, 500*time.Millisecond
	})
	ctx := context.Background()
	prefix := fmt.Sprintf("holdapartfail:%d:", time.Now().UnixNano())
	st := newGoRedis(t, c, redisstore.WithPrefix(prefix))
	defer st.Close()
	lim := sluice.New(st)
	one := sluice.MaxConcurrent(1)
	node := func(key string) string {
		m, err := c.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return m.Options().Addr
	}
	// The hold and the first part on one node, in two slots; the part to
	// fail on another node.
	alive := node(redisstore.HoldKey(st, "job"))
	key := func(base string, there bool) string {
		for i := 0; ; i++ {
			k := fmt.Sprintf("%s%d", base, i)
			if (node(prefix+k) == alive) == there && redisrun.Slot(prefix+k) != redisrun.Slot(redisstore.HoldKey(st, "job")) {
				return k
			}
		}
	}
	spent := sluice.Part{Key: key("spent", true), Limit: sluice.PerHour(1), Cost: 1}
	far := key("far", false)
	nothingHeld := func(what string) {
		t.Helper()
		ls, err := lim.Acquire(ctx, "job", one, 1)
		if err != nil || !ls.Allowed {
			t.Fatalf("%s: the hold was kept: %+v %v", what, ls, err)
		}
		if _, err := lim.Release(ctx, ls); err != nil {
			t.Fatal(err)
		}
		if r, err := lim.Take(ctx, spent.Key, spent.Limit, 0); err != nil || r.Remaining != 1 {
			t.Fatalf("%s: the first part stayed spent: %+v %v", what, r, err)
		}
	}
	// A key of another type: its part's script fails.
	if err := c.Set(ctx, prefix+"list", "not a limit's state", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	bad := sluice.Part{Key: "list", Limit: sluice.PerHour(1), Cost: 1}
	if ls, err := lim.Acquire(ctx, "job", one, 1, spent, bad); err == nil || ls.Allowed {
		t.Fatalf("a part of another type: %+v %v, want an error", ls, err)
	}
	nothingHeld("a part of another type")

	// The node of the last part's slot stopped.
	down, err := c.MasterForKey(ctx, prefix+far)
	if err != nil {
		t.Fatal(err)
	}
	_ = down.Do(ctx, "SHUTDOWN", "NOSAVE").Err() // the connection drops as the node exits
	gone := sluice.Part{Key: far, Limit: sluice.PerHour(1), Cost: 1}
	if ls, err := lim.Acquire(ctx, "job", one, 1, spent, gone); !errors.Is(err, sluice.ErrStoreUnavailable) || ls.Allowed {
		t.Fatalf("a part on a stopped node: %+v %v, want ErrStoreUnavailable", ls, err)
	}
	nothingHeld("a part on a stopped node")
	// Under FailOpen the error, after the give-back, is the policy's grant.
	open := newGoRedis(t, c, redisstore.WithPrefix(prefix), redisstore.WithFailurePolicy(redisstore.FailOpen))
	defer open.Close()
	if ls, err := sluice.New(open).Acquire(ctx, "job", one, 1, spent, gone); err != nil || !ls.Allowed || !ls.Degraded || ls.ID != 0 {
		t.Fatalf("FailOpen, a part on a stopped node: %+v %v, want its grant", ls, err)
	}
	nothingHeld("FailOpen's grant")
}

// TestHoldAllApartLoad: goroutines acquire a hold of 1 unit under a limit
// of 3 together with two rate parts, every key in its own slot, and
// release it after a short while. Counted independently (after the grant,
// before the release), never more than 3 are in flight; the parts never
// admit more than their budget (no refill within the test); and at the
// end every part has spent exactly the composites admitted and the hold
// key holds nothing: each refusal gave back what it took (once the tight
// part is spent, every acquire takes the hold and a unit of the wide part
// before the tight one refuses, and gives both back).
func TestHoldAllApartLoad(t *testing.T) {
	c := redistest.SharedCluster(t).Client()
	st := newGoRedis(t, c, redisstore.WithPrefix(fmt.Sprintf("holdapartload:%d:", time.Now().UnixNano())))
	defer st.Close()
	lim := sluice.New(st)
	ctx := context.Background()
	const n = 3
	conc := sluice.MaxConcurrent(n).WithLifetime(time.Minute)
	tight := sluice.Part{Key: "tight", Limit: sluice.PerHour(40), Cost: 1}                          // refills one unit in 90s
	wide := sluice.Part{Key: "wide", Limit: sluice.PerHour(60).WithAlgorithm(sluice.GCRA), Cost: 1} // one in 60s
	parts := []sluice.Part{wide, tight}                                                             // wide first: once tight is spent, each refusal gives back a unit of wide
	var inFlight, most, admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 40 {
				ls, err := lim.Acquire(ctx, "job", conc, 1, parts...)
				if err != nil {
					errs <- fmt.Errorf("goroutine %d: %w", g, err)
					return
				}
				if !ls.Allowed {
					continue
				}
				admitted.Add(1)
				v := inFlight.Add(1)
				for m := most.Load(); v > m && !most.CompareAndSwap(m, v); m = most.Load() {
				}
				time.Sleep(time.Millisecond)
				inFlight.Add(-1)
				if _, err := lim.Release(ctx, ls); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if most.Load() > n {
		t.Fatalf("%d holds in flight at once, limit %d", most.Load(), n)
	}
	a := admitted.Load()
	if a == 0 || a > 40 {
		t.Fatalf("%d composites admitted, want 1..40", a)
	}
	for _, p := range []struct {
		part sluice.Part
		cap  int64
	}{{tight, 40}, {wide, 60}} {
		r, err := lim.Take(ctx, p.part.Key, p.part.Limit, 0)
		if err != nil || r.Remaining != p.cap-a {
			t.Fatalf("%s after %d admitted: %+v %v, want %d remaining", p.part.Key, a, r, err, p.cap-a)
		}
	}
	if ls, err := lim.Acquire(ctx, "job", conc, 0); err != nil || ls.Remaining != n {
		t.Fatalf("the hold key after the run: %+v %v, want %d remaining", ls, err, n)
	}
	t.Logf("%d of 320 composites admitted, at most %d in flight", a, most.Load())
}
