package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/storetest"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/redisstore"
)

// takeAllAt returns a store's TakeAllAt (through Run) under a fresh
// key prefix.
func takeAllAt(t *testing.T, c redis.UniversalClient) storetest.TakeAllAt {
	take, _ := takeAllAtPrefix(t, c)
	return take
}

func takeAllAtPrefix(t *testing.T, c redis.UniversalClient) (storetest.TakeAllAt, string) {
	take, _, prefix := takeAtPrefix(t, c)
	return take, prefix
}

// takeEachAt returns a store's TakeEachAt (through Run) under a
// fresh key prefix.
func takeEachAt(t *testing.T, c redis.UniversalClient) storetest.TakeEachAt {
	_, each, _ := takeAtPrefix(t, c)
	return each
}

// takeAtPrefix returns a store's TakeAllAt and TakeEachAt under a fresh key
// prefix, and the prefix.
func takeAtPrefix(t *testing.T, c redis.UniversalClient) (storetest.TakeAllAt, storetest.TakeEachAt, string) {
	prefix := fmt.Sprintf("composite:%d:", time.Now().UnixNano())
	s := newGoRedis(t, c, redisstore.WithPrefix(prefix), redisstore.WithTTLMargin(time.Hour))
	t.Cleanup(func() { s.Close() })
	return storetest.AllAt(s), storetest.EachAt(s), prefix
}

func TestCompositeStandalone(t *testing.T) {
	c := redistest.Shared(t).Client()
	storetest.OneUserBurst(t, takeAllAt(t, c), "")
	storetest.OneUserBurstEach(t, takeEachAt(t, c), "")
	take, each, _ := takeAtPrefix(t, c)
	storetest.RandomComposites(t, take, each, "", 20, 100)
}

// On a cluster, parts whose keys share a {hash tag} are one atomic script and
// match the model exactly; parts in different slots go through the take,
// then give back protocol, which still admits exactly one of the burst.
func TestCompositeCluster(t *testing.T) {
	c := redistest.SharedCluster(t).Client()
	take, each, _ := takeAtPrefix(t, c)
	storetest.RandomComposites(t, take, each, "{tenant:1}", 6, 80)
	storetest.OneUserBurst(t, takeAllAt(t, c), "{tenant:1}")
	storetest.OneUserBurstEach(t, takeEachAt(t, c), "{tenant:1}")
	// Keys in different slots are taken in turn and given back; the parts
	// report the same figures.
	take, each, storePrefix := takeAtPrefix(t, c)
	storetest.OneUserBurst(t, take, apart(storePrefix, ""))
	storetest.OneUserBurstEach(t, each, apart(storePrefix, "each:"))
}

// apart returns a prefix, from base on, that puts a store's (prefixed by
// storePrefix) keys "user:1" and "global" in different slots.
func apart(storePrefix, base string) string {
	prefix := base
	for i := 0; redisrun.Slot(storePrefix+prefix+"user:1") == redisrun.Slot(storePrefix+prefix+"global"); i++ {
		prefix = fmt.Sprintf("%sp%d:", base, i)
	}
	return prefix
}

func TestRefund(t *testing.T) {
	s := newGoRedis(t, redistest.Shared(t).Client(), redisstore.WithPrefix(fmt.Sprintf("refund:%d:", time.Now().UnixNano())))
	defer s.Close()
	storetest.Refund(t, sluice.New(s), "")
}

func TestChangedLimits(t *testing.T) {
	for name, c := range map[string]redis.UniversalClient{"standalone": redistest.Shared(t).Client(), "cluster": redistest.SharedCluster(t).Client()} {
		t.Run(name, func(t *testing.T) {
			s := newGoRedis(t, c, redisstore.WithPrefix(fmt.Sprintf("changed:%d:", time.Now().UnixNano())))
			defer s.Close()
			storetest.ChangedLimits(t, sluice.New(s), "")
		})
	}
}

// TestEachFailurePolicy: with Redis gone, each part reports the failure
// policy's parts: FailOpen admits every part, FailLocal reports its
// fallback's (which part refused, as memstore would), all Degraded;
// FailClosed returns the error with each zeroed.
func TestEachFailurePolicy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: every call is an outage
	ctx := context.Background()
	parts := []sluice.Part{{Key: "user:1", Limit: sluice.PerMinute(1), Cost: 1}, {Key: "global", Limit: sluice.PerMinute(10), Cost: 1}}
	for _, policy := range []redisstore.FailurePolicy{redisstore.FailClosed, redisstore.FailOpen, redisstore.FailLocal} {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
		st := newGoRedis(t, c, redisstore.WithFailurePolicy(policy), redisstore.WithTimeout(200*time.Millisecond))
		lim := sluice.New(st)
		for i := range 2 {
			each := []sluice.Result{{Remaining: -1}, {Remaining: -1}}
			r, err := lim.TakeAll(ctx, parts, each)
			var want []sluice.Result
			switch policy {
			case redisstore.FailClosed:
				if !errors.Is(err, sluice.ErrStoreUnavailable) {
					t.Errorf("FailClosed: %+v, %v; want ErrStoreUnavailable", r, err)
				}
				want = make([]sluice.Result, 2)
			case redisstore.FailOpen:
				want = []sluice.Result{{Allowed: true, Degraded: true}, {Allowed: true, Degraded: true}}
			case redisstore.FailLocal:
				want = []sluice.Result{
					{Allowed: true, ResetAfter: time.Minute, Degraded: true},
					{Allowed: true, Remaining: 9, ResetAfter: 6 * time.Second, Degraded: true},
				}
				if i == 1 {
					want[0] = sluice.Result{RetryAfter: time.Minute, ResetAfter: time.Minute, Degraded: true}
				}
			}
			if policy != redisstore.FailClosed && (err != nil || !r.Degraded || r.Allowed != (policy == redisstore.FailOpen || i == 0)) {
				t.Errorf("policy %d request %d: %+v, %v", policy, i, r, err)
			}
			if policy == redisstore.FailLocal {
				// The local store's clock runs: compare what it does not move.
				for j := range each {
					if each[j].Remaining == want[j].Remaining && each[j].ResetAfter <= want[j].ResetAfter && each[j].ResetAfter > want[j].ResetAfter-time.Second {
						each[j].ResetAfter = want[j].ResetAfter
					}
					if each[j].RetryAfter <= want[j].RetryAfter && each[j].RetryAfter > want[j].RetryAfter-time.Second {
						each[j].RetryAfter = want[j].RetryAfter
					}
				}
			}
			if !slices.Equal(each, want) {
				t.Errorf("policy %d request %d: parts %+v, want %+v", policy, i, each, want)
			}
		}
		st.Close()
		c.Close()
	}
}

// TestEachCrossSlot: on a cluster, a composite whose keys are in different
// slots is taken in turn, the parts that can be given back first (here
// both can, so the order taken is the order given), and each part's figures
// land at its own place: where the protocol reaches the same states as one
// atomic step (a refused token bucket given back, a part not reached that
// would have granted), they equal memstore's.
func TestEachCrossSlot(t *testing.T) {
	c := redistest.SharedCluster(t).Client()
	_, each, storePrefix := takeAtPrefix(t, c)
	prefix := apart(storePrefix, "")
	mem := storetest.EachAt(memstore.New())
	window := algo.Params{Kind: algo.FixedWindow, Rate: 1, Period: 60_000_000}
	bucket := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: 3_600_000_000, Burst: 2}
	parts := []storelink.Request{
		{Key: prefix + "global", Params: bucket, Cost: 1, MaxDelay: algo.Never},
		{Key: prefix + "user:1", Params: window, Cost: 1, MaxDelay: algo.Never},
	}
	for i, step := range []struct {
		at      int64 // µs after storetest.Base
		allowed bool
	}{
		{0, true},
		{0, false},           // the window refuses; the bucket, taken first, is given back
		{61_000_000, true},   // a new window
		{122_000_000, false}, // the bucket refuses first; the window is not reached
	} {
		sameAsMemory(t, i, each, mem, parts, storetest.Base+step.at, step.allowed)
	}
}

// TestHeadroomCrossSlot: on a cluster, the parts of a composite across
// slots keep their headroom when taken in turn (headroom.lua), and a part
// given back reports its class's figures: they equal memstore's atomic
// step.
func TestHeadroomCrossSlot(t *testing.T) {
	c := redistest.SharedCluster(t).Client()
	_, each, storePrefix := takeAtPrefix(t, c)
	prefix := apart(storePrefix, "")
	mem := storetest.EachAt(memstore.New())
	window := algo.Params{Kind: algo.FixedWindow, Rate: 1, Period: 60_000_000}
	bucket := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: 60_000_000, Burst: 4}
	parts := []storelink.Request{
		{Key: prefix + "global", Params: bucket, Cost: 1, MaxDelay: algo.Never, Reserve: 2},
		{Key: prefix + "user:1", Params: window, Cost: 1, MaxDelay: algo.Never},
	}
	for i, step := range []struct {
		at      int64 // µs after storetest.Base
		user    string
		allowed bool
	}{
		{0, "user:1", true},
		{0, "user:1", false},          // the window refuses; the bucket, taken first, is given back
		{61_000_000, "user:1", true},  // a new window, the bucket full again
		{62_000_000, "user:2", true},  // 3 left: 1 + the 2 kept pass
		{63_000_000, "user:3", false}, // 2 left: the headroom refuses, the window is not reached
	} {
		parts[1].Key = prefix + step.user
		sameAsMemory(t, i, each, mem, parts, storetest.Base+step.at, step.allowed)
	}
}

// TestWindowGivenBackCrossSlot: on a cluster, a window part taken before a
// part in another slot refuses is given back, for both window algorithms:
// its window then admits as if the refused composite had never been made.
func TestWindowGivenBackCrossSlot(t *testing.T) {
	c := redistest.SharedCluster(t).Client()
	for _, kind := range []algo.Kind{algo.FixedWindow, algo.AlignedWindow} {
		take, _, storePrefix := takeAtPrefix(t, c)
		prefix := apart(storePrefix, "")
		window := algo.Params{Kind: kind, Rate: 2, Period: 60_000_000}
		bucket := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: 3_600_000_000, Burst: 1}
		user := storelink.Request{Key: prefix + "user:1", Params: window, Cost: 1, MaxDelay: algo.Never}
		parts := []storelink.Request{user, {Key: prefix + "global", Params: bucket, Cost: 1, MaxDelay: algo.Never}}
		now := storetest.Base
		for i, want := range []bool{true, false} { // the second: the bucket refuses, the window is given back
			d, err := take(t.Context(), parts, now)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != want {
				t.Fatalf("%s: composite %d: %+v, want allowed %v", kind, i, d, want)
			}
		}
		for i, want := range []bool{true, false} { // the window holds 1 of its 2
			d, err := take(t.Context(), []storelink.Request{user}, now)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != want {
				t.Fatalf("%s: the window alone, take %d: %+v, want allowed %v (a window unit of the refused composite was not given back)", kind, i, d, want)
			}
		}
	}
}

// sameAsMemory takes parts at now through each (a store's composite in
// turn) and through mem's atomic step, and fails step i unless both decide
// alike, allowed as said, with the same parts' figures.
func sameAsMemory(t *testing.T, i int, each, mem storetest.TakeEachAt, parts []storelink.Request, now int64, allowed bool) {
	t.Helper()
	got, want := make([]algo.Decision, len(parts)), make([]algo.Decision, len(parts))
	d, err := each(t.Context(), parts, now, got)
	if err != nil {
		t.Fatal(err)
	}
	md, err := mem(t.Context(), parts, now, want)
	if err != nil {
		t.Fatal(err)
	}
	for j := range got {
		got[j].FreshAt, want[j].FreshAt = 0, 0
	}
	d.FreshAt, md.FreshAt = 0, 0
	if d.Allowed != allowed || d != md || !slices.Equal(got, want) {
		t.Fatalf("step %d: %+v, parts %+v; memstore %+v, parts %+v", i, d, got, md, want)
	}
}
