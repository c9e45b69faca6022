package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/redisstore"
)

// TestHoldLuaEqualsGoAtScale is TestHoldLuaEqualsGo with limits large
// enough for a key's holds to pass memstore's index threshold and Redis's
// small encoding of a sorted set (listpack) and come back below: phases of
// acquires and of releases, lifetimes that put a hold anywhere among the
// others, refusals that walk many holds, waits after which many holds
// have come back (more than a script drops at once), and clocks that go
// back; on a key of holds of one to three units and on one of holds of
// one unit (found by rank, dropped a few at a time). Every answer agrees.
func TestHoldLuaEqualsGoAtScale(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]redis.UniversalClient{"standalone": redistest.Shared(t).Client(), "cluster": redistest.SharedCluster(t).Client()} {
		t.Run(name, func(t *testing.T) {
			seed := testenv.Seed(t)
			r := rand.New(rand.NewPCG(seed, 34))
			st := newGoRedis(t, c, redisstore.WithPrefix(fmt.Sprintf("holdscale:%d:", time.Now().UnixNano())))
			defer st.Close()
			rs, ms := holder{st}, holder{memstore.New()}
			ctx := context.Background()
			now := int64(1_764_000_000_000_000)
			var ids []int64
			next := int64(1)
			for i := range 2000 {
				grow := (i/250)%2 == 0
				now += r.Int64N(30) - 6 // sometimes back
				if r.IntN(150) == 0 {
					now += 1000 + r.Int64N(3000)
				}
				ones := r.IntN(2) == 0
				op := holdOp{Op: algo.OpAcquire, Key: "mixed", Limit: algo.Concurrency{Limit: 60 + r.Int64N(100), Lifetime: 1 + r.Int64N(4000)}}
				if ones {
					op.Key = "ones"
				}
				switch k := r.IntN(10); {
				case len(ids) > 0 && (grow && k < 2 || !grow && k < 6):
					op.Op, op.ID = algo.OpRelease, ids[r.IntN(len(ids))]
				case len(ids) > 0 && k < 7:
					op.Op, op.ID = algo.OpExtend, ids[r.IntN(len(ids))]
				case k == 9 && !ones:
					op.Units, op.ID = r.Int64N(op.Limit.Limit+1), next // a query, or a long walk
					next++
				default:
					op.Units, op.ID = 1+r.Int64N(3), next
					if ones {
						op.Units = int64(min(k, 1)) // a query now and then
					}
					next++
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

// fillHolds acquires n holds of one unit on key of st at now + i (ids 1 to
// n, each living lifetime µs), from a few goroutines so that the batcher
// pipelines them.
func fillHolds(t *testing.T, st *redisstore.Store, key string, n int, now, lifetime int64) {
	t.Helper()
	h := holder{st}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < n; i += 8 {
				op := holdOp{Op: algo.OpAcquire, Key: key, Limit: algo.Concurrency{Limit: 1 << 40, Lifetime: lifetime}, Units: 1, ID: int64(i + 1)}
				if r, err := h.HoldAt(context.Background(), op, now+int64(i)); err != nil || !r.Decision.Allowed {
					errs <- fmt.Errorf("hold %d: %+v %v", i+1, r, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// commandCalls is the calls of each command since the last CONFIG
// RESETSTAT (INFO commandstats), EVALSHA's and CONFIG's left out.
func commandCalls(t *testing.T, c *redis.Client) map[string]int {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok || name == "evalsha" || name == "eval" || strings.HasPrefix(name, "config") {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		calls[name], _ = strconv.Atoi(n)
	}
	return calls
}

// scaleStep is one operation of TestHoldsScale: the limit is the key's
// holds plus over.
type scaleStep struct {
	what           string
	op, units, id  int64
	lifetime, over int64
}

// holdCommands runs op at now on h, which must be allowed or not as
// allowed says, and returns the commands its script ran on c's server.
func holdCommands(t *testing.T, c *redis.Client, h holder, op holdOp, now int64, allowed bool) map[string]int {
	ctx := context.Background()
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	r, err := h.HoldAt(ctx, op, now)
	if err != nil || r.Decision.Allowed != allowed {
		t.Fatalf("%+v: %+v %v", op, r, err)
	}
	calls := commandCalls(t, c)
	t.Logf("op %d of %d units on %s: %+v; commands %v", op.Op, op.Units, op.Key, r.Decision, calls)
	return calls
}

// TestHoldsScale counts the Redis commands each hold operation's script
// runs on a key of 1 hold and on one of 10,000 (INFO commandstats): the
// same few, each of them O(log n) in the holds (a lookup by member, by
// score or by rank, never a read of them all), and the key's sorted set
// is the indexed encoding (skiplist), not the small one read whole
// (listpack).
func TestHoldsScale(t *testing.T) {
	srv := redistest.Standalone(t)
	c := srv.Client()
	ctx := context.Background()
	st := newGoRedis(t, c, redisstore.WithPrefix("scale:"))
	defer st.Close()
	h := holder{st}
	const big, life = 10_000, int64(1_000_000)
	now := int64(1_764_000_000_000_000)
	fillHolds(t, st, "one", 1, now, life)
	fillHolds(t, st, "many", big, now, life)
	if enc := c.ObjectEncoding(ctx, redisstore.HoldKey(st, "many")).Val(); enc != "skiplist" {
		t.Fatalf("the 10,000 holds' sorted set is a %s, want a skiplist", enc)
	}
	now += big
	steps := []scaleStep{
		{"acquire, last to expire", algo.OpAcquire, 1, big + 1, life, 10},
		{"acquire, among the others", algo.OpAcquire, 1, big + 2, life - big/2, 10},
		{"release of the oldest", algo.OpRelease, 0, 1, life, 10},
		{"extend", algo.OpExtend, 0, big / 3, life, 10},
		{"refused acquire, 1 unit short", algo.OpAcquire, 1, big + 3, life, -1},
		{"refused acquire, 1,000 units short", algo.OpAcquire, 1000, big + 4, life, -999},
		{"query", algo.OpAcquire, 0, big + 5, life, 0},
	}
	var per [2][]map[string]int
	for k, key := range []string{"one", "many"} {
		for _, s := range steps {
			id, limit := s.id, max(big+s.over, s.units, 1)
			if key == "one" { // a key of 1 hold, id 1, before each step
				c.Del(ctx, redisstore.HoldKey(st, key))
				fillHolds(t, st, key, 1, now-big, life)
				id, limit = max(big+1, s.id), max(1+s.over, s.units, 1)
				if s.op != algo.OpAcquire {
					id = 1
				}
			}
			op := holdOp{Op: s.op, Key: key, Limit: algo.Concurrency{Limit: limit, Lifetime: s.lifetime}, Units: s.units, ID: id}
			per[k] = append(per[k], holdCommands(t, c, h, op, now, s.over >= 0))
			now++
		}
	}
	for i, s := range steps {
		n := 0
		for _, v := range per[1][i] {
			n += v
		}
		if n > 12 {
			t.Errorf("%s at 10,000 holds: %d commands %v, want at most 12", s.what, n, per[1][i])
		}
		// (At 1 hold, the release empties the key: a DEL, fewer commands.)
		if s.op != algo.OpRelease && fmt.Sprint(per[0][i]) != fmt.Sprint(per[1][i]) {
			t.Errorf("%s: commands %v at 1 hold, %v at 10,000", s.what, per[0][i], per[1][i])
		}
		for name, v := range per[1][i] {
			if name == "zrangebyscore" || name == "zremrangebyscore" {
				t.Errorf("%s at 10,000 holds: %s, a read or a drop of holds by score, ran %d times with no hold come back", s.what, name, v)
			}
		}
	}
}

// TestHoldOutOfMemory: under noeviction with no memory left, an acquire,
// a release and an extension that would also drop holds come back fail
// with ErrOutOfMemory and leave the key as it was (the first write is the
// one Redis refuses), as does an acquire on a key whose holds all came
// back (which would unlink it); memory back, the keys answer as memstore
// does.
func TestHoldOutOfMemory(t *testing.T) {
	srv := redistest.Standalone(t)
	c := srv.Client()
	ctx := context.Background()
	st := newGoRedis(t, c, redisstore.WithPrefix("holdoom:"), patient)
	defer st.Close()
	rs, ms := holder{st}, holder{memstore.New()}
	now := int64(1_764_000_000_000_000)
	both := func(op holdOp) (holdResult, error) {
		got, gerr := rs.HoldAt(ctx, op, now)
		want, werr := ms.HoldAt(ctx, op, now)
		want.Decision.FreshAt = 0
		if gerr != nil || werr != nil || got != want {
			t.Fatalf("%+v at %d: Lua %+v %v, Go %+v %v", op, now, got, gerr, want, werr)
		}
		return got, nil
	}
	for id := range int64(6) { // holds 1 and 2 come back first; 3 holds 2 units
		both(holdOp{Op: algo.OpAcquire, Key: "k", Limit: algo.Concurrency{Limit: 20, Lifetime: 100 + 100*min(id, 2)}, Units: 1 + id%3/2*1, ID: id + 1})
	}
	both(holdOp{Op: algo.OpAcquire, Key: "all", Limit: algo.Concurrency{Limit: 20, Lifetime: 100}, Units: 2, ID: 1})
	now += 150 // hold 1 has come back, and every hold of "all"
	before := c.ZRangeWithScores(ctx, redisstore.HoldKey(st, "k"), 0, -1).Val()
	beforeAll := c.ZRangeWithScores(ctx, redisstore.HoldKey(st, "all"), 0, -1).Val()
	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	for _, op := range []holdOp{
		{Op: algo.OpAcquire, Key: "all", Limit: algo.Concurrency{Limit: 20, Lifetime: 100}, Units: 1, ID: 2},
		{Op: algo.OpAcquire, Key: "k", Limit: algo.Concurrency{Limit: 20, Lifetime: 100}, Units: 1, ID: 50},
		{Op: algo.OpRelease, Key: "k", Limit: algo.Concurrency{Limit: 20, Lifetime: 100}, ID: 3},
		{Op: algo.OpExtend, Key: "k", Limit: algo.Concurrency{Limit: 20, Lifetime: 100}, ID: 4},
	} {
		if r, err := rs.HoldAt(ctx, op, now); !errors.Is(err, redisstore.ErrOutOfMemory) {
			t.Errorf("op %d out of memory: %+v %v, want ErrOutOfMemory", op.Op, r, err)
		}
	}
	if err := c.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if after := c.ZRangeWithScores(ctx, redisstore.HoldKey(st, "k"), 0, -1).Val(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("the refused writes changed the key: %v, was %v", after, before)
	}
	if after := c.ZRangeWithScores(ctx, redisstore.HoldKey(st, "all"), 0, -1).Val(); fmt.Sprint(after) != fmt.Sprint(beforeAll) {
		t.Fatalf("the refused acquire on a key whose holds all came back changed it: %v, was %v", after, beforeAll)
	}
	both(holdOp{Op: algo.OpAcquire, Key: "all", Limit: algo.Concurrency{Limit: 20, Lifetime: 100}, Units: 1, ID: 2})
	both(holdOp{Op: algo.OpRelease, Key: "k", Limit: algo.Concurrency{Limit: 20, Lifetime: 100}, ID: 3})
	both(holdOp{Op: algo.OpAcquire, Key: "k", Limit: algo.Concurrency{Limit: 20, Lifetime: 100}, Units: 1, ID: 50})
	now += 200 // every hold but 50 has come back
	both(holdOp{Op: algo.OpAcquire, Key: "k", Limit: algo.Concurrency{Limit: 20, Lifetime: 100}, Units: 0, ID: 51})
}

// TestHoldOldLayout: a hold key of the layout before the sorted set (one
// string: the kind 8, then each hold's id, units and expiry) and a sorted
// set sluice did not write are ErrForeignKey, never read as no holds, and
// left as they were.
func TestHoldOldLayout(t *testing.T) {
	c := redistest.Shared(t).Client()
	ctx := context.Background()
	prefix := fmt.Sprintf("holdold:%d:", time.Now().UnixNano())
	st := newGoRedis(t, c, redisstore.WithPrefix(prefix))
	defer st.Close()
	h := holder{st}
	old := "\x08" + strings.Repeat("\x01\x00\x00\x00\x00\x00\x00\x00", 2) + "\x00\x10\xa5\xd4\xe8\x00\x00\x00"
	c.Set(ctx, redisstore.HoldKey(st, "old"), old, time.Minute)
	c.ZAdd(ctx, redisstore.HoldKey(st, "zset"), redis.Z{Score: 5, Member: "a"})
	c.Expire(ctx, redisstore.HoldKey(st, "zset"), time.Minute)
	for _, key := range []string{"old", "zset"} {
		for op := algo.OpAcquire; op <= algo.OpExtend; op++ {
			o := holdOp{Op: op, Key: key, Limit: algo.Concurrency{Limit: 5, Lifetime: 1000}, Units: 1, ID: 1}
			if op != algo.OpAcquire {
				o.Units = 0
			}
			if r, err := h.HoldAt(ctx, o, 1_764_000_000_000_000); !errors.Is(err, redisstore.ErrForeignKey) || r.Decision.Allowed {
				t.Errorf("op %d on %s: %+v %v, want ErrForeignKey", op, key, r, err)
			} else {
				t.Logf("op %d on %s: %v", op, key, err)
			}
		}
	}
	if c.Get(ctx, redisstore.HoldKey(st, "old")).Val() != old || c.ZCard(ctx, redisstore.HoldKey(st, "zset")).Val() != 1 {
		t.Error("a foreign key was written")
	}
}

// TestHoldKeyBraces: on a cluster, a hold key whose prefix or key carries
// braces (a {hash tag} in either, a brace left open, an empty tag) is one
// sorted set in its own slot, whatever the braces make of it; with a tag
// shared by a rate part's key, an Acquire with parts is one script on one slot.
func TestHoldKeyBraces(t *testing.T) {
	t.Parallel()
	c := redistest.SharedCluster(t).Client()
	ctx := context.Background()
	stamp := time.Now().UnixNano()
	for _, tc := range []struct{ prefix, key, part string }{
		{fmt.Sprintf("{app%d}:", stamp), "job", "rate"},
		{fmt.Sprintf("braces%d:", stamp), "{u}job", "{u}rate"},
		{fmt.Sprintf("open{%d:", stamp), "job}x", "rate}x"},
		{fmt.Sprintf("empty%d:", stamp), "{}job}", "{}rate}"},
	} {
		st := newGoRedis(t, c, redisstore.WithPrefix(tc.prefix))
		lim := sluice.New(st)
		one := sluice.MaxConcurrent(1)
		ls, err := lim.Acquire(ctx, tc.key, one, 1, sluice.Part{Key: tc.part, Limit: sluice.PerHour(5), Cost: 1})
		if err != nil || !ls.Allowed {
			t.Fatalf("%+v: %+v %v", tc, ls, err)
		}
		if typ := c.Type(ctx, redisstore.HoldKey(st, tc.key)).Val(); typ != "zset" {
			t.Errorf("%+v: the hold key is a %q, want a zset", tc, typ)
		}
		if again, err := lim.Acquire(ctx, tc.key, one, 1); err != nil || again.Allowed {
			t.Errorf("%+v: a second lease under a limit of 1: %+v %v", tc, again, err)
		}
		if r, err := lim.Release(ctx, ls); err != nil || !r.Allowed {
			t.Errorf("%+v: release: %+v %v", tc, r, err)
		}
		if n := c.Exists(ctx, redisstore.HoldKey(st, tc.key)).Val(); n != 0 {
			t.Errorf("%+v: the hold key outlived its last hold", tc)
		}
		st.Close()
	}
}

// TestHoldBulkDrop: 1,000 holds that come back together, one still held,
// are dropped by the next operation (holds of one unit by one range, of
// two units each read for them); when every hold has come back, the next
// acquire unlinks the set and writes a new one. Every answer is
// memstore's, and an acquire may reuse the id of a hold come back.
func TestHoldBulkDrop(t *testing.T) {
	t.Parallel()
	c := redistest.Shared(t).Client()
	ctx := context.Background()
	st := newGoRedis(t, c, redisstore.WithPrefix(fmt.Sprintf("holdbulk:%d:", time.Now().UnixNano())))
	defer st.Close()
	rs, ms := holder{st}, holder{memstore.New()}
	now := int64(1_764_000_000_000_000)
	lim := algo.Concurrency{Limit: 5000, Lifetime: 1000}
	both := func(op holdOp) {
		t.Helper()
		got, gerr := rs.HoldAt(ctx, op, now)
		want, werr := ms.HoldAt(ctx, op, now)
		want.Decision.FreshAt = 0
		if gerr != nil || werr != nil || got != want {
			t.Fatalf("%+v at %d: Lua %+v %v, Go %+v %v", op, now, got, gerr, want, werr)
		}
	}
	for _, tc := range []struct {
		units int64
		held  bool // one hold still held when the others come back
	}{{1, true}, {2, true}, {1, false}, {2, false}} {
		key := fmt.Sprintf("k%d%v", tc.units, tc.held)
		for id := range int64(1000) {
			both(holdOp{Op: algo.OpAcquire, Key: key, Limit: lim, Units: tc.units, ID: id + 1})
		}
		if tc.held {
			both(holdOp{Op: algo.OpAcquire, Key: key, Limit: algo.Concurrency{Limit: 5000, Lifetime: 5000}, Units: 1, ID: 5000})
		}
		now += 1000 // all but hold 5000 have come back
		both(holdOp{Op: algo.OpAcquire, Key: key, Limit: lim, Units: 1, ID: 900})
		if n := c.ZCard(ctx, redisstore.HoldKey(st, key)).Val(); n > 4 {
			t.Errorf("%+v: %d members after the holds came back, want HELD and the holds held", tc, n)
		}
		both(holdOp{Op: algo.OpRelease, Key: key, Limit: lim, ID: 5000})
		both(holdOp{Op: algo.OpAcquire, Key: key, Limit: lim, Units: 0, ID: 1})
		now++
	}
}
