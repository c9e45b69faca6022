package redisstore_test

// Routing tests: the store names several keys in one script only where the
// client puts them together (redisrun.Router), on a real go-redis Ring of
// two redis-servers and a real three-master cluster, through every
// constructor.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/redisstore"
)

// newRing returns a go-redis Ring over two standalone redis-servers, and the
// shards' own clients.
func newRing(t *testing.T) (*redis.Ring, []*redis.Client) {
	t.Helper()
	a, b := redistest.Standalone(t), redistest.Standalone(t)
	ring := redis.NewRing(&redis.RingOptions{
		Addrs:           map[string]string{"a": a.Addr(), "b": b.Addr()},
		DisableIdentity: true,
	})
	t.Cleanup(func() { _ = ring.Close() })
	return ring, []*redis.Client{a.Client(), b.Client()}
}

// patient gives the stores of correctness tests a timeout that a loaded
// test machine does not reach: they count admissions, not latency.
var patient = redisstore.WithTimeout(30 * time.Second)

// unrouted is a Client that says nothing about where keys live.
type unrouted struct{ c redisrun.Client }

func (u unrouted) Run(ctx context.Context, calls []*redisrun.Call) { u.c.Run(ctx, calls) }

// routeHammer runs goroutines each making perG decisions of one unit, key
// (g + i) mod keys, under a limit of burst units per hour (nothing refills
// within a test), and returns the units admitted per key. Errors fail t.
func routeHammer(t *testing.T, st *redisstore.Store, goroutines, perG, keys int, burst int64) []int64 {
	t.Helper()
	p := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: hour, Burst: burst}
	admitted := make([]atomic.Int64, keys)
	var errs atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range perG {
				k := (g + i) % keys
				r, err := take(context.Background(), st, storelink.Request{Key: fmt.Sprintf("u%d", k), Params: p, Cost: 1, MaxDelay: algo.Never})
				if err != nil {
					if errs.Add(1) == 1 {
						first.Store(err.Error())
					}
					continue
				}
				if r.Allowed {
					admitted[k].Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := errs.Load(); n > 0 {
		t.Errorf("%d errors, the first: %v", n, first.Load())
	}
	out := make([]int64, keys)
	for k := range out {
		out[k] = admitted[k].Load()
	}
	return out
}

// checkExact fails t unless every key admitted exactly burst units.
func checkExact(t *testing.T, got []int64, burst int64) {
	t.Helper()
	var total int64
	for k, n := range got {
		total += n
		if n != burst {
			t.Errorf("key u%d admitted %d, want %d", k, n, burst)
		}
	}
	t.Logf("admitted %d for a bound of %d", total, int64(len(got))*burst)
}

// checkOneShard fails t unless each key u0..u(keys-1) of st lives on exactly
// one of shards, the one where (if given) want says.
func checkOneShard(t *testing.T, st *redisstore.Store, shards []*redis.Client, keys int, want func(key string) *redis.Client) {
	t.Helper()
	ctx := context.Background()
	for k := range keys {
		key := redisstore.RateKey(st, fmt.Sprintf("u%d", k))
		var on []*redis.Client
		for _, c := range shards {
			n, err := c.Exists(ctx, key).Result()
			if err != nil && strings.HasPrefix(err.Error(), "MOVED") {
				continue // a cluster node that does not own the slot
			}
			if err != nil {
				t.Fatalf("EXISTS %s: %v", key, err)
			}
			if n == 1 {
				on = append(on, c)
			}
		}
		if len(on) != 1 {
			t.Errorf("%s lives on %d shards, want 1", key, len(on))
			continue
		}
		if want != nil && want(key).Options().Addr != on[0].Options().Addr {
			t.Errorf("%s lives on %s, the ring places it on %s", key, on[0].Options().Addr, want(key).Options().Addr)
		}
	}
}

// On a Ring each key lives on the shard the Ring places it on: 64 goroutines
// on 20 keys of 10/hour admit exactly 200 (before: 400, every key on both
// shards).
func TestRingSingles(t *testing.T) {
	ring, shards := newRing(t)
	for name, mk := range map[string]func() *redisstore.Store{
		"New(GoRedis(ring))": func() *redisstore.Store {
			return newStore(t, redisrun.GoRedis(ring), redisstore.WithPrefix("new:"), patient)
		},
		"NewGoRedis(ring)": func() *redisstore.Store { return newGoRedis(t, ring, redisstore.WithPrefix("ngr:"), patient) },
		"unrouted": func() *redisstore.Store {
			return newStore(t, unrouted{redisrun.GoRedis(ring)}, redisstore.WithPrefix("unr:"), patient)
		},
	} {
		t.Run(name, func(t *testing.T) {
			st := mk()
			defer st.Close()
			const keys, burst = 20, 10
			checkExact(t, routeHammer(t, st, 64, 40, keys, burst), burst)
			checkOneShard(t, st, shards, keys, func(key string) *redis.Client {
				c, err := ring.GetShardClientForKey(key)
				if err != nil {
					t.Fatalf("GetShardClientForKey: %v", err)
				}
				return c
			})
		})
	}
}

// compositeSerial makes n composite requests in turn, each on a per-user key
// (users of 10/hour) and a global key of global/hour, and returns how many
// passed.
func compositeSerial(t *testing.T, st *redisstore.Store, users, n int, global int64) int64 {
	t.Helper()
	user := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: hour, Burst: 10}
	all := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: hour, Burst: global}
	var admitted int64
	for i := range n {
		r, err := takeAll(context.Background(), st, []storelink.Request{
			{Key: fmt.Sprintf("user:%d", i%users), Params: user, Cost: 1, MaxDelay: algo.Never},
			{Key: "global", Params: all, Cost: 1, MaxDelay: algo.Never},
		})
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if r.Allowed {
			admitted++
		}
	}
	return admitted
}

// compositeHammer is compositeSerial from 32 goroutines at once.
func compositeHammer(t *testing.T, st *redisstore.Store, users, perG int, global int64) int64 {
	t.Helper()
	user := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: hour, Burst: 10}
	all := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: hour, Burst: global}
	var admitted, errs atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range perG {
				r, err := takeAll(context.Background(), st, []storelink.Request{
					{Key: fmt.Sprintf("user:%d", (g+i)%users), Params: user, Cost: 1, MaxDelay: algo.Never},
					{Key: "global", Params: all, Cost: 1, MaxDelay: algo.Never},
				})
				switch {
				case err != nil:
					if errs.Add(1) == 1 {
						first.Store(err.Error())
					}
				case r.Allowed:
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := errs.Load(); n > 0 {
		t.Errorf("%d errors, the first: %v", n, first.Load())
	}
	return admitted.Load()
}

// A composite of a per-user and a global key on a Ring admits the global
// bound, serial and under load, whichever shards its keys are on (before:
// 2x serially).
func TestRingComposite(t *testing.T) {
	ring, _ := newRing(t)
	const users, global = 10, 30
	for name, c := range map[string]redisrun.Client{
		"GoRedis":  redisrun.GoRedis(ring),
		"unrouted": unrouted{redisrun.GoRedis(ring)},
	} {
		t.Run(name, func(t *testing.T) {
			st := newStore(t, c, redisstore.WithPrefix(name+":serial:"), patient)
			defer st.Close()
			if got := compositeSerial(t, st, users, 200, global); got != global {
				t.Errorf("serial: %d admitted, want the global bound %d", got, global)
			}
			st2 := newStore(t, c, redisstore.WithPrefix(name+":load:"), patient)
			defer st2.Close()
			if got := compositeHammer(t, st2, users, 20, global); got > global || got < global/2 {
				t.Errorf("under load: %d admitted, want at most the global bound %d (and not far below)", got, global)
			} else {
				t.Logf("under load: %d admitted of a global bound of %d", got, global)
			}
		})
	}
}

// On a cluster, whatever the constructor, single decisions under load make
// no cross-slot call and admit exactly each key's bound, and composites
// across slots admit at most the global bound (before, through
// New(GoRedis(cluster)): CROSSSLOT errors, and 2558 admitted of 200 under
// FailOpen).
func TestClusterRouting(t *testing.T) {
	cl := redistest.SharedCluster(t)
	nodes := make([]*redis.Client, 0, 3)
	for _, addr := range cl.Addrs() {
		c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
		t.Cleanup(func() { _ = c.Close() })
		nodes = append(nodes, c)
	}
	for name, mk := range map[string]func(opts ...redisstore.Option) *redisstore.Store{
		"New(GoRedis(cluster))": func(opts ...redisstore.Option) *redisstore.Store {
			return newStore(t, redisrun.GoRedis(cl.Client()), opts...)
		},
		"NewGoRedis(cluster)": func(opts ...redisstore.Option) *redisstore.Store {
			return newGoRedis(t, cl.Client(), opts...)
		},
		"New(BySlot(GoRedis(cluster)))": func(opts ...redisstore.Option) *redisstore.Store {
			return newStore(t, redisrun.BySlot(unrouted{redisrun.GoRedis(cl.Client())}), opts...)
		},
	} {
		t.Run(name, func(t *testing.T) {
			// The cluster is shared: keys of their own, run after run.
			prefix := fmt.Sprintf("%s:%d:", name, time.Now().UnixNano())
			st := mk(redisstore.WithPrefix(prefix), redisstore.WithFailurePolicy(redisstore.FailOpen), patient)
			defer st.Close()
			const keys, burst = 20, 10
			checkExact(t, routeHammer(t, st, 64, 40, keys, burst), burst)
			checkOneShard(t, st, nodes, keys, nil)
			const users, global = 10, 30
			cs := mk(redisstore.WithPrefix(prefix + "c:"))
			defer cs.Close()
			if got := compositeSerial(t, cs, users, 200, global); got != global {
				t.Errorf("serial composite: %d admitted, want %d", got, global)
			}
			ch := mk(redisstore.WithPrefix(name + ":ch:"))
			defer ch.Close()
			if got := compositeHammer(t, ch, users, 20, global); got > global {
				t.Errorf("composite under load: %d admitted, want at most %d", got, global)
			}
		})
	}
}
