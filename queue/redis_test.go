package queue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var queues atomic.Int64

// queueName is a fresh queue name for t.
func queueName(t *testing.T) string {
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "."), queues.Add(1))
}

func redisMaker(c redis.UniversalClient) maker {
	return func(t *testing.T, l sluice.Limit, opts ...Option) Queue {
		q, err := NewRedis(c, queueName(t), l, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
}

func TestRedisBehaviours(t *testing.T) {
	t.Parallel()
	runBehaviours(t, redisMaker(redistest.Shared(t).Client()))
}

// TestCluster: the behaviours, the random invariants and eight workers over
// four queue values on a three-master cluster.
func TestCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.Cluster(t)
	mk := redisMaker(cl.Client())
	runBehaviours(t, mk)
	t.Run("Invariants", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(testenv.SeedOr(t, 5), 6))
		for range 3 {
			l := randomLimit(rng)
			p, _ := storelink.Params(l)
			clk := newFakeClock()
			q := mk(t, l, WithClock(clk), WithVisibilityTimeout(time.Duration(1+rng.Int64N(5*ceilDiv(p.Period, p.Rate)))*time.Microsecond))
			checkInvariants(t, q, clk, p, rng, 200)
		}
	})
	t.Run("Workers", func(t *testing.T) {
		name := queueName(t)
		var qs []Queue
		for range 4 {
			q, err := NewRedis(cl.NewClient(t, nil), name, leaky(100, time.Second, 100))
			if err != nil {
				t.Fatal(err)
			}
			qs = append(qs, q)
		}
		testWorkers(t, qs, 2, 100, 100)
	})
}

// TestRedisMatchesMemory runs the same random operations on a Memory and a
// Redis queue on one fake clock: every answer is the same.
func TestRedisMatchesMemory(t *testing.T) {
	t.Parallel()
	c := redistest.Shared(t).Client()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(testenv.SeedOr(t, 7), 8))
	for trace := range 20 {
		l := randomLimit(rng)
		p, _ := storelink.Params(l)
		tt := ceilDiv(p.Period, p.Rate)
		vis := WithVisibilityTimeout(time.Duration(1+rng.Int64N(5*tt)) * time.Microsecond)
		clk := newFakeClock()
		mem, err := NewMemory(l, WithClock(clk), vis)
		if err != nil {
			t.Fatal(err)
		}
		red, err := NewRedis(c, queueName(t), l, WithClock(clk), vis)
		if err != nil {
			t.Fatal(err)
		}
		// Jobs by payload, the one name both queues share.
		held := [2]map[string]*Job{{}, {}}
		now := t0.UnixMicro()
		for i := range 300 {
			now += rng.Int64N(2 * tt)
			clk.t = time.UnixMicro(now)
			var got [2]string
			switch op := rng.IntN(4); op {
			case 0:
				for k, q := range []Queue{mem, red} {
					r, err := q.Push(ctx, []byte(fmt.Sprint(i)))
					if err != nil {
						t.Fatal(err)
					}
					got[k] = fmt.Sprint(r.Accepted, r.ID, r.ReleaseAt.UnixMicro(), r.RetryAfter)
				}
			case 1, 2:
				for k, q := range []Queue{mem, red} {
					j, wait, err := q.TryPop(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if j == nil {
						got[k] = fmt.Sprint("none ", wait)
						continue
					}
					held[k][string(j.Payload)] = j
					got[k] = fmt.Sprint(j.ID, string(j.Payload), j.Attempt, j.ReleaseAt.UnixMicro(), j.DeliveredAt.UnixMicro(), j.Deadline.UnixMicro())
				}
			case 3:
				payload := ""
				for p := range held[0] {
					if payload == "" || rng.IntN(2) == 0 {
						payload = p
					}
				}
				if payload == "" {
					continue
				}
				for k, q := range []Queue{mem, red} {
					j := held[k][payload]
					if j == nil {
						t.Fatalf("trace %d op %d: %q held by memory only", trace, i, payload)
					}
					delete(held[k], payload)
					got[k] = fmt.Sprint(q.Ack(ctx, j))
				}
			}
			if got[0] != got[1] {
				t.Fatalf("trace %d (%v) op %d at %d: memory %q, redis %q", trace, l, i, now, got[0], got[1])
			}
			nm, _ := mem.Len(ctx)
			nr, err := red.Len(ctx)
			if err != nil || nm != nr {
				t.Fatalf("trace %d op %d: Len memory %d, redis %d, %v", trace, i, nm, nr, err)
			}
		}
	}
}

// TestRedisServerTime: by default the queue runs on the server's clock,
// and it leaves no key behind once empty but the schedule, which expires.
func TestRedisServerTime(t *testing.T) {
	t.Parallel()
	s := redistest.Standalone(t)
	c := s.Client()
	ctx := context.Background()
	q, err := NewRedis(c, "server-time", leaky(1000, time.Second, 10))
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	r, err := q.Push(ctx, []byte("x"))
	if err != nil || !r.Accepted {
		t.Fatal(r, err)
	}
	if d := r.ReleaseAt.Sub(before); d < -time.Second || d > time.Second {
		t.Errorf("slot %v from the local clock", d)
	}
	// After SCRIPT FLUSH (a restart, a failover) the scripts are sent again.
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	j, err := q.Pop(ctx)
	if err != nil || string(j.Payload) != "x" {
		t.Fatal(j, err)
	}
	if err := q.Ack(ctx, j); err != nil {
		t.Fatal(err)
	}
	keys := q.Keys()
	if n, err := c.Exists(ctx, keys[:4]...).Result(); err != nil || n != 0 {
		t.Errorf("%d job keys left in an empty queue (%v)", n, err)
	}
	ttl, err := c.PTTL(ctx, keys[4]).Result()
	if err != nil || ttl <= 0 || ttl > stateMargin+10*time.Millisecond {
		t.Errorf("state key TTL %v, %v; want at most %v", ttl, err, stateMargin)
	}
	// A server that is gone is an error users can test for.
	s.Stop(t)
	down := s.NewClient(t, func(o *redis.Options) { o.MaxRetries, o.DialerRetries = -1, 1 })
	q2, _ := NewRedis(down, "server-time", leaky(1000, time.Second, 10))
	if _, err := q2.Push(ctx, nil); !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Errorf("push to a stopped server: %v", err)
	}
}

// TestRedisPrefixAndClose: the keys carry the prefix given, and a closed
// queue sends nothing.
func TestRedisPrefixAndClose(t *testing.T) {
	t.Parallel()
	c := redistest.Shared(t).Client()
	ctx := context.Background()
	name := queueName(t)
	q, err := NewRedis(c, name, leaky(10, time.Second, 9), WithPrefix("myapp:q:"), WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if k := q.Keys()[0]; k != "myapp:q:{"+name+"}:due" {
		t.Errorf("due key %q, want the prefix first", k)
	}
	if r, err := q.Push(ctx, []byte("x")); err != nil || !r.Accepted {
		t.Fatal(r, err)
	}
	if n, err := c.Exists(ctx, q.Keys()[0]).Result(); err != nil || n != 1 {
		t.Errorf("the prefixed due key: %d, %v", n, err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Push(ctx, []byte("y")); !errors.Is(err, ErrClosed) {
		t.Errorf("Push after Close: %v, want ErrClosed", err)
	}
}

// TestRedisForeignState: a state key holding what the queue did not write
// is an error of its own, not an outage, and is left as it is.
func TestRedisForeignState(t *testing.T) {
	t.Parallel()
	c := redistest.Shared(t).Client()
	ctx := context.Background()
	q, err := NewRedis(c, queueName(t), leaky(10, time.Second, 9), WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	state := q.Keys()[4]
	if err := c.Set(ctx, state, "not a schedule", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err = q.Push(ctx, []byte("x"))
	if err == nil || errors.Is(err, sluice.ErrStoreUnavailable) || !strings.Contains(err.Error(), "foreign data") {
		t.Errorf("Push over a foreign state: %v, want a foreign-data error", err)
	}
	if v, err := c.Get(ctx, state).Result(); err != nil || v != "not a schedule" {
		t.Errorf("the foreign state is now %q, %v", v, err)
	}
}
