package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/storetest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/redisstore"
)

// TestHoldKeyTTL: a key with holds lives until its last hold comes
// back, plus the margin; one whose last hold is released is deleted.
func TestHoldKeyTTL(t *testing.T) {
	c := redistest.Shared(t).Client()
	prefix := fmt.Sprintf("holdttl:%d:", time.Now().UnixNano())
	st := newGoRedis(t, c, redisstore.WithPrefix(prefix), redisstore.WithTTLMargin(time.Second))
	defer st.Close()
	lim := sluice.New(st)
	ctx := context.Background()
	short, err := lim.Acquire(ctx, "k", sluice.MaxConcurrent(3).WithLifetime(10*time.Second), 1)
	if err != nil || !short.Allowed {
		t.Fatal(short, err)
	}
	long, err := lim.Acquire(ctx, "k", sluice.MaxConcurrent(3).WithLifetime(time.Minute), 1)
	if err != nil || !long.Allowed {
		t.Fatal(long, err)
	}
	key := redisstore.HoldKey(st, "k")
	if key != prefix+"hold:k" {
		t.Fatalf("HoldKey %q", key)
	}
	ttl := c.PTTL(ctx, key).Val()
	if ttl <= 60*time.Second || ttl > 61*time.Second {
		t.Fatalf("PTTL %v, want the longest hold's lifetime plus the 1s margin", ttl)
	}
	if c.Exists(ctx, prefix+"k").Val() != 0 {
		t.Fatal("a hold wrote the rate limit's key")
	}
	lim.Release(ctx, long)
	if ttl := c.PTTL(ctx, key).Val(); ttl <= 9*time.Second || ttl > 11*time.Second {
		t.Fatalf("PTTL %v after the long hold's release, want the short one's lifetime plus the margin", ttl)
	}
	lim.Release(ctx, short)
	if n := c.Exists(ctx, key).Val(); n != 0 {
		t.Fatal("the key of a released last hold is still there")
	}
}

// TestHoldForeignKey: a hold key holding another program's value, or a
// rate limit's state, is an error naming it, never read as no holds.
func TestHoldForeignKey(t *testing.T) {
	c := redistest.Shared(t).Client()
	prefix := fmt.Sprintf("holdforeign:%d:", time.Now().UnixNano())
	st := newGoRedis(t, c, redisstore.WithPrefix(prefix))
	defer st.Close()
	lim := sluice.New(st)
	ctx := context.Background()
	c.Set(ctx, redisstore.HoldKey(st, "s"), "hello", time.Minute)
	c.HSet(ctx, redisstore.HoldKey(st, "h"), "a", 1)
	c.Expire(ctx, redisstore.HoldKey(st, "h"), time.Minute)
	// A rate state at the hold key: the rate limit of key "hold:r".
	if _, err := lim.Take(ctx, "hold:r", sluice.PerMinute(5), 1); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"s", "h", "r"} {
		ls, err := lim.Acquire(ctx, k, sluice.MaxConcurrent(2), 1)
		if !errors.Is(err, redisstore.ErrForeignKey) || ls.Allowed {
			t.Errorf("acquire on %q: %+v %v, want ErrForeignKey", k, ls, err)
		}
	}
	if c.Get(ctx, redisstore.HoldKey(st, "s")).Val() != "hello" {
		t.Error("the foreign value was overwritten")
	}
}

// TestHoldFailurePolicy: with Redis gone, an acquire is FailOpen's grant
// (held nowhere), FailLocal's hold in the local store (whose release frees
// it there), or FailClosed's ErrStoreUnavailable.
func TestHoldFailurePolicy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: every call is an outage
	ctx := context.Background()
	c1 := sluice.MaxConcurrent(1)
	for _, policy := range []redisstore.FailurePolicy{redisstore.FailClosed, redisstore.FailOpen, redisstore.FailLocal} {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
		st := newGoRedis(t, c, redisstore.WithFailurePolicy(policy), redisstore.WithTimeout(200*time.Millisecond))
		lim := sluice.New(st)
		a, err := lim.Acquire(ctx, "k", c1, 1)
		b, errB := lim.Acquire(ctx, "k", c1, 1)
		switch policy {
		case redisstore.FailClosed:
			if !errors.Is(err, sluice.ErrStoreUnavailable) || a.Allowed {
				t.Errorf("FailClosed: %+v %v, want ErrStoreUnavailable", a, err)
			}
		case redisstore.FailOpen:
			if err != nil || errB != nil || !a.Allowed || !b.Allowed || !a.Degraded || a.ID != 0 {
				t.Errorf("FailOpen: %+v %v / %+v %v, want both granted, degraded, held nowhere", a, err, b, errB)
			}
			if r, err := lim.Release(ctx, a); err != nil || !r.Degraded {
				t.Errorf("FailOpen release: %+v %v", r, err)
			}
		case redisstore.FailLocal:
			if err != nil || !a.Allowed || !a.Degraded || a.ID == 0 || errB != nil || b.Allowed {
				t.Errorf("FailLocal: %+v %v / %+v %v, want the first held locally, the second refused there", a, err, b, errB)
			}
			if r, err := lim.Release(ctx, a); err != nil || !r.Allowed || !r.Degraded {
				t.Errorf("FailLocal release: %+v %v, want the local hold given back", r, err)
			}
			if again, err := lim.Acquire(ctx, "k", c1, 1); err != nil || !again.Allowed {
				t.Errorf("FailLocal after the release: %+v %v", again, err)
			}
		}
		// A hold kept in Redis cannot be released while it is gone: an
		// error, whatever the policy (it comes back with its lifetime).
		held := sluice.Lease{Key: "k", Limit: c1, Units: 1, ID: 77}
		if _, err := lim.Release(ctx, held); !errors.Is(err, sluice.ErrStoreUnavailable) {
			t.Errorf("policy %d: release of a Redis hold: %v, want ErrStoreUnavailable", policy, err)
		}
		st.Close()
		c.Close()
	}
}

// TestHoldLuaEqualsGo runs random traces of hold operations at given
// times through the Lua script (HoldAt) and through memstore, clocks that
// go back included (which the model does not state): every answer agrees.
func TestHoldLuaEqualsGo(t *testing.T) {
	for name, c := range map[string]redis.UniversalClient{"standalone": redistest.Shared(t).Client(), "cluster": redistest.SharedCluster(t).Client()} {
		t.Run(name, func(t *testing.T) {
			seed := testenv.Seed(t)
			r := rand.New(rand.NewPCG(seed, 26))
			st := newGoRedis(t, c, redisstore.WithPrefix(fmt.Sprintf("holdlua:%d:", time.Now().UnixNano())))
			defer st.Close()
			rs, ms := holder{st}, holder{memstore.New()}
			ctx := context.Background()
			now := int64(1_764_000_000_000_000)
			var ids []int64
			for i := range 600 {
				now += r.Int64N(30) - 6 // sometimes back
				op := holdOp{Op: algo.OpAcquire, Key: []string{"x", "y"}[r.IntN(2)], Limit: algo.Concurrency{Limit: 1 + r.Int64N(4), Lifetime: 1 + r.Int64N(60)}}
				if k := r.IntN(3); k > 0 && len(ids) > 0 {
					op.Op, op.ID = int64(k)+1, ids[r.IntN(len(ids))]
				} else {
					op.Units, op.ID = r.Int64N(op.Limit.Limit+1), 1+r.Int64N(40)
				}
				got, gerr := rs.HoldAt(ctx, op, now)
				want, werr := ms.HoldAt(ctx, op, now)
				want.Decision.FreshAt = 0
				if !errors.Is(gerr, werr) && (gerr == nil || werr == nil) || got != want {
					t.Fatalf("seed %d op %d %+v at %d: Lua %+v %v, Go %+v %v", seed, i, op, now, got, gerr, want, werr)
				}
				if op.Op == algo.OpAcquire && got.Expiry > 0 {
					ids = append(ids, op.ID)
				}
			}
		})
	}
}

// BenchmarkHold is an acquire and its release on one standalone server:
// one script call each, serially (two round trips) and from 64 goroutines
// (the calls share pipelines).
func BenchmarkHold(b *testing.B) {
	c := redistest.Shared(b).Client()
	ctx := context.Background()
	for _, par := range []int{1, 64} {
		b.Run(fmt.Sprintf("goroutines=%d", par), func(b *testing.B) {
			s := newGoRedis(b, c, redisstore.WithPrefix(fmt.Sprintf("bench:%d:", time.Now().UnixNano())))
			defer s.Close()
			lim := sluice.New(s)
			conc := sluice.MaxConcurrent(1_000_000)
			b.ReportAllocs()
			b.SetParallelism(max(1, par/runtime.GOMAXPROCS(0))) // par goroutines in all
			if par == 1 {
				for b.Loop() {
					holdOnce(b, lim, ctx, conc)
				}
				return
			}
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					holdOnce(b, lim, ctx, conc)
				}
			})
		})
	}
}

func holdOnce(b *testing.B, lim *sluice.Limiter, ctx context.Context, c sluice.Concurrency) {
	ls, err := lim.Acquire(ctx, "job", c, 1)
	if err != nil || !ls.Allowed {
		b.Fatal(ls, err)
	}
	if _, err := lim.Release(ctx, ls); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkHoldAt is one hold operation on a key that holds 1 hold, then
// 10,000 (storetest.HoldAtBench), over a redis-server of its own: the cost
// of an acquire, a release or an extension must not grow with the holds
// of its key. Besides the round trip (ns/op), it reports the server's
// time in the scripts an operation ran (server-µs/op, from INFO
// commandstats: EVALSHA's time, its script's commands included).
func BenchmarkHoldAt(b *testing.B) {
	srv := redistest.Shared(b)
	c := srv.Client()
	ctx := context.Background()
	for _, op := range storetest.HoldOps {
		for _, n := range []int{1, 10_000} { // side by side, for their ratio
			b.Run(fmt.Sprintf("op=%s/holds=%d", op, n), func(b *testing.B) {
				st := newGoRedis(b, c, redisstore.WithPrefix(fmt.Sprintf("holdat:%d:", time.Now().UnixNano())))
				defer st.Close()
				b.ReportAllocs()
				var before float64
				storetest.HoldAtBench(b, st, "k", n, op, func() { before = evalUsec(b, c) })
				b.ReportMetric((evalUsec(b, c)-before)/float64(b.N), "server-µs/op")
				c.Del(ctx, redisstore.HoldKey(st, "k"))
			})
		}
	}
}

// evalUsec is the server's time (µs) in EVALSHA since its start, from
// INFO commandstats.
func evalUsec(b *testing.B, c *redis.Client) float64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:"); ok {
			for f := range strings.SplitSeq(strings.TrimSpace(rest), ",") {
				if v, ok := strings.CutPrefix(f, "usec="); ok {
					u, _ := strconv.ParseFloat(v, 64)
					return u
				}
			}
		}
	}
	return 0
}
