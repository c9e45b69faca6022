package redisstore_test

// Error tests against real redis-server processes: a decision's error is its
// own (a poisoned key does not fail its batch), the failure policy applies to
// outages only (not to the caller's context, ACL refusals, OOM, foreign
// data), the eviction check, a closed store, unchecked requests.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/redisstore"
)

// A key holding foreign data (a hash: WRONGTYPE) fails only its own
// decisions: 31 healthy goroutines batched with it see no error and exact
// counts, the poisoned caller an error wrapping ErrForeignKey and, under
// FailOpen, no admission; the foreign key is left as it was. (Before: every
// caller of the merged script got the error, and FailOpen admitted them all.)
func TestPoisonedKeyInBatch(t *testing.T) {
	srv := redistest.Standalone(t)
	ctx := context.Background()
	cc := &countingClient{Client: redisrun.GoRedis(srv.Client())}
	st := newStore(t, cc, redisstore.WithPrefix("poison:"), redisstore.WithFailurePolicy(redisstore.FailOpen), patient)
	defer st.Close()
	if err := srv.Client().HSet(ctx, redisstore.RateKey(st, "k0"), "owner", "another program").Err(); err != nil {
		t.Fatal(err)
	}
	const goroutines, perG, burst = 32, 60, 10
	p := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: hour, Burst: burst}
	admitted := make([]atomic.Int64, goroutines)
	errs := make([]atomic.Int64, goroutines)
	var wrong atomic.Value
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range goroutines {
		wg.Go(func() {
			<-start
			for range perG {
				r, err := take(ctx, st, storelink.Request{Key: fmt.Sprintf("k%d", g), Params: p, Cost: 1, MaxDelay: algo.Never})
				if err != nil {
					errs[g].Add(1)
					if g != 0 || !errors.Is(err, redisstore.ErrForeignKey) || !strings.Contains(err.Error(), "poison:k0") {
						wrong.Store(fmt.Sprintf("goroutine %d: %v", g, err))
					}
				}
				if r.Allowed {
					admitted[g].Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if w := wrong.Load(); w != nil {
		t.Errorf("unexpected error: %v", w)
	}
	if n := errs[0].Load(); n != perG {
		t.Errorf("poisoned caller: %d errors of %d calls", n, perG)
	}
	if n := admitted[0].Load(); n != 0 {
		t.Errorf("poisoned caller: %d admitted under FailOpen, want 0", n)
	}
	for g := 1; g < goroutines; g++ {
		if n, e := admitted[g].Load(), errs[g].Load(); n != burst || e != 0 {
			t.Errorf("healthy goroutine %d: %d admitted, %d errors; want %d, 0", g, n, e, burst)
		}
	}
	if cc.merged.Load() == 0 {
		t.Errorf("no decisions were merged: the test did not exercise a batch")
	}
	if typ, err := srv.Client().Type(ctx, redisstore.RateKey(st, "k0")).Result(); err != nil || typ != "hash" {
		t.Errorf("the foreign key is now %q (%v), want the hash left alone", typ, err)
	}
	t.Logf("%d merged scripts", cc.merged.Load())
}

// A composite with a foreign part reports the error and writes nothing on
// its other parts, alone or merged with healthy composites.
func TestPoisonedComposite(t *testing.T) {
	srv := redistest.Standalone(t)
	ctx := context.Background()
	st := newGoRedis(t, srv.Client(), redisstore.WithPrefix("pc:"), redisstore.WithFailurePolicy(redisstore.FailOpen), patient)
	defer st.Close()
	if err := srv.Client().LPush(ctx, redisstore.RateKey(st, "bad"), "x").Err(); err != nil {
		t.Fatal(err)
	}
	p := algo.Params{Kind: algo.GCRA, Rate: 1, Period: hour, Burst: 5}
	var wg sync.WaitGroup
	var badErrs, goodErrs, badAdmitted, goodAdmitted atomic.Int64
	for g := range 16 {
		wg.Go(func() {
			for range 20 {
				second := "bad"
				if g > 0 {
					second = fmt.Sprintf("other%d", g)
				}
				r, err := takeAll(ctx, st, []storelink.Request{
					{Key: fmt.Sprintf("user%d", g), Params: p, Cost: 1, MaxDelay: algo.Never},
					{Key: second, Params: p, Cost: 1, MaxDelay: algo.Never},
				})
				switch {
				case g == 0 && errors.Is(err, redisstore.ErrForeignKey):
					badErrs.Add(1)
				case err != nil:
					goodErrs.Add(1)
					t.Errorf("goroutine %d: %v", g, err)
				}
				if r.Allowed {
					if g == 0 {
						badAdmitted.Add(1)
					} else {
						goodAdmitted.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	if badErrs.Load() != 20 || badAdmitted.Load() != 0 {
		t.Errorf("poisoned composite: %d ErrForeignKey of 20, %d admitted (want 20, 0)", badErrs.Load(), badAdmitted.Load())
	}
	if goodAdmitted.Load() != 15*5 {
		t.Errorf("healthy composites admitted %d, want %d", goodAdmitted.Load(), 15*5)
	}
	if n, err := srv.Client().Exists(ctx, redisstore.RateKey(st, "user0")).Result(); err != nil || n != 0 {
		t.Errorf("the poisoned composite's healthy part was written (exists %d, %v)", n, err)
	}
}

// A caller's context that has ended returns its error, spends nothing and
// is not turned into an admission by FailOpen, batched or not (before:
// FailOpen admitted 10 of 10 with Redis healthy).
func TestCancelledContextIsNotAnOutage(t *testing.T) {
	srv := redistest.Standalone(t)
	for _, batched := range []bool{true, false} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			opts := []redisstore.Option{redisstore.WithPrefix(fmt.Sprintf("cancel:%v:", batched)), redisstore.WithFailurePolicy(redisstore.FailOpen)}
			if !batched {
				opts = append(opts, redisstore.WithoutBatching())
			}
			st := newGoRedis(t, srv.Client(), opts...)
			defer st.Close()
			p := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: hour, Burst: 1}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			for i := range 10 {
				r, err := take(ctx, st, storelink.Request{Key: "k", Params: p, Cost: 1, MaxDelay: algo.Never})
				if !errors.Is(err, context.Canceled) || r.Allowed || r.Degraded {
					t.Fatalf("call %d: %+v, %v; want context.Canceled, not allowed", i, r, err)
				}
				if _, err := takeAll(ctx, st, []storelink.Request{{Key: "k", Params: p, Cost: 1, MaxDelay: algo.Never}}); !errors.Is(err, context.Canceled) {
					t.Fatalf("TakeAll %d: %v, want context.Canceled", i, err)
				}
			}
			r, err := take(context.Background(), st, storelink.Request{Key: "k", Params: p, Cost: 1, MaxDelay: algo.Never})
			if err != nil || !r.Allowed || r.Degraded {
				t.Fatalf("after the cancelled calls: %+v, %v; want the unit still there", r, err)
			}
		})
	}
}

// Options that cannot work are refused when the store is built.
func TestBadOptions(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for name, opts := range map[string][]redisstore.Option{
		"WithTimeout(0)":         {redisstore.WithTimeout(0)},
		"WithTimeout(-1s)":       {redisstore.WithTimeout(-time.Second)},
		"WithTTLMargin(-1s)":     {redisstore.WithTTLMargin(-time.Second)},
		"WithBatching(-1)":       {redisstore.WithBatching(-1)},
		"WithBatching(1<<20)":    {redisstore.WithBatching(1 << 20)},
		"WithClock(nil)":         {redisstore.WithClock(nil)},
		"WithFailurePolicy(9)":   {redisstore.WithFailurePolicy(9)},
		"nil option":             {nil},
		"two bad, both reported": {redisstore.WithTimeout(0), redisstore.WithTTLMargin(-time.Second)},
	} {
		st, err := redisstore.New(c, opts...)
		if st != nil || !errors.Is(err, redisstore.ErrInvalidOption) {
			t.Errorf("%s: %v, %v; want ErrInvalidOption", name, st, err)
			continue
		}
		t.Logf("%s: %v", name, err)
	}
	if _, err := redisstore.NewOver(nil); !errors.Is(err, redisstore.ErrInvalidOption) {
		t.Errorf("New(nil): %v", err)
	}
	if _, err := redisstore.New(nil); !errors.Is(err, redisstore.ErrInvalidOption) {
		t.Errorf("NewGoRedis(nil): %v", err)
	}
	st, err := redisstore.New(c, redisstore.WithTimeout(time.Millisecond), redisstore.WithTTLMargin(0), redisstore.WithBatching(0))
	if err != nil {
		t.Fatalf("good options refused: %v", err)
	}
	st.Close()
}

// aclClient sets up ACL user name with rules on srv and returns a client
// logged in as that user.
func aclClient(t *testing.T, srv *redistest.Server, name string, rules ...string) *redis.Client {
	t.Helper()
	args := []any{"ACL", "SETUSER", name, "reset", "on", ">pw", "~*"}
	for _, r := range rules {
		args = append(args, r)
	}
	if err := srv.Client().Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	return srv.NewClient(t, func(o *redis.Options) {
		o.Username, o.Password = name, "pw"
		o.MaxRetries = -1
	})
}

// A user who may not run EVALSHA still gets decisions: the store sends
// EVAL from then on.
func TestACLWithoutEvalsha(t *testing.T) {
	srv := redistest.Standalone(t)
	c := aclClient(t, srv, "noevalsha", "+@all", "-evalsha")
	for _, batched := range []bool{true, false} {
		opts := []redisstore.Option{redisstore.WithPrefix(fmt.Sprintf("acl:%v:", batched)), redisstore.WithFailurePolicy(redisstore.FailOpen), patient}
		if !batched {
			opts = append(opts, redisstore.WithoutBatching())
		}
		st := newGoRedis(t, c, opts...)
		got := routeHammer(t, st, 16, 10, 4, 5)
		for k, n := range got {
			if n != 5 {
				t.Errorf("batched=%v: key %d admitted %d, want 5", batched, k, n)
			}
		}
		st.Close()
	}
}

// A user who may not run TIME gets an error that says to use
// WithClock, never a FailOpen admission; with WithClock the store
// decides.
func TestACLWithoutTime(t *testing.T) {
	srv := redistest.Standalone(t)
	c := aclClient(t, srv, "notime", "+@all", "-time")
	p := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: hour, Burst: 3}
	for _, batched := range []bool{true, false} {
		opts := []redisstore.Option{redisstore.WithPrefix("notime:"), redisstore.WithFailurePolicy(redisstore.FailOpen)}
		if !batched {
			opts = append(opts, redisstore.WithoutBatching())
		}
		st := newGoRedis(t, c, opts...)
		for i := range 5 {
			r, err := take(context.Background(), st, storelink.Request{Key: "k", Params: p, Cost: 1, MaxDelay: algo.Never})
			if !errors.Is(err, redisstore.ErrNoPermission) || !strings.Contains(err.Error(), "WithClock") || r.Allowed {
				t.Fatalf("batched=%v call %d: %+v, %v; want ErrNoPermission naming WithClock, not allowed", batched, i, r, err)
			}
			if i == 0 {
				t.Logf("batched=%v: %v", batched, err)
			}
			_, err = takeAll(context.Background(), st, []storelink.Request{
				{Key: "a", Params: p, Cost: 1, MaxDelay: algo.Never},
				{Key: "b", Params: p, Cost: 1, MaxDelay: algo.Never},
			})
			if !errors.Is(err, redisstore.ErrNoPermission) {
				t.Fatalf("TakeAll: %v, want ErrNoPermission", err)
			}
		}
		st.Close()
	}
	st := newGoRedis(t, c, redisstore.WithPrefix("callertime:"), redisstore.WithClock(storelink.SystemClock{}))
	defer st.Close()
	for i := range 4 {
		r, err := take(context.Background(), st, storelink.Request{Key: "k", Params: p, Cost: 1, MaxDelay: algo.Never})
		if err != nil || r.Allowed != (i < 3) {
			t.Fatalf("WithClock call %d: %+v, %v", i, r, err)
		}
	}
}

// A Redis out of memory under noeviction refuses the write: the decision is
// an error wrapping ErrOutOfMemory, not a FailOpen admission, and spends
// nothing.
func TestOutOfMemory(t *testing.T) {
	srv := redistest.Standalone(t)
	ctx := context.Background()
	admin := srv.Client()
	p := algo.Params{Kind: algo.FixedWindow, Rate: 5, Period: hour}
	for _, batched := range []bool{true, false} {
		opts := []redisstore.Option{redisstore.WithPrefix(fmt.Sprintf("oom:%v:", batched)), redisstore.WithFailurePolicy(redisstore.FailOpen), patient}
		if !batched {
			opts = append(opts, redisstore.WithoutBatching())
		}
		st := newGoRedis(t, srv.Client(), opts...)
		if err := admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
			t.Fatal(err)
		}
		if err := admin.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var admitted, oom atomic.Int64
		var other atomic.Value
		for g := range 16 {
			wg.Go(func() {
				for range 5 {
					r, err := take(ctx, st, storelink.Request{Key: fmt.Sprintf("k%d", g%4), Params: p, Cost: 1, MaxDelay: algo.Never})
					switch {
					case errors.Is(err, redisstore.ErrOutOfMemory):
						oom.Add(1)
					case err != nil:
						other.Store(err.Error())
					}
					if r.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if err := admin.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
			t.Fatal(err)
		}
		if admitted.Load() != 0 || oom.Load() != 80 || other.Load() != nil {
			t.Errorf("batched=%v: %d admitted, %d ErrOutOfMemory of 80, other error %v", batched, admitted.Load(), oom.Load(), other.Load())
		}
		for k := range 4 {
			if n, _ := admin.Exists(ctx, redisstore.RateKey(st, fmt.Sprintf("k%d", k))).Result(); n != 0 {
				t.Errorf("batched=%v: k%d was written", batched, k)
			}
		}
		st.Close()
	}
}

// CheckConfig refuses a policy that evicts limiter keys, and says so
// distinctly when CONFIG is refused. Under allkeys-lru with memory pressure
// a limiter key is evicted and its limit forgotten: the reason for the check.
func TestCheckConfig(t *testing.T) {
	srv := redistest.Standalone(t)
	ctx := context.Background()
	admin := srv.Client()
	st := newGoRedis(t, admin, redisstore.WithPrefix("cfg:"))
	defer st.Close()
	if err := st.CheckConfig(ctx); err != nil {
		t.Fatalf("default policy (noeviction): %v", err)
	}
	for _, policy := range []string{"allkeys-lru", "volatile-lru", "allkeys-random", "volatile-ttl"} {
		if err := admin.ConfigSet(ctx, "maxmemory-policy", policy).Err(); err != nil {
			t.Fatal(err)
		}
		err := st.CheckConfig(ctx)
		if !errors.Is(err, redisstore.ErrEvictingPolicy) || !strings.Contains(err.Error(), policy) {
			t.Errorf("%s: %v, want ErrEvictingPolicy naming it", policy, err)
		}
	}
	noConfig := aclClient(t, srv, "noconfig", "+@all", "-config")
	nc := newGoRedis(t, noConfig, redisstore.WithPrefix("cfg2:"))
	defer nc.Close()
	if err := nc.CheckConfig(ctx); !errors.Is(err, redisstore.ErrConfigUnreadable) || errors.Is(err, redisstore.ErrEvictingPolicy) {
		t.Errorf("CONFIG refused: %v, want ErrConfigUnreadable", err)
	} else {
		t.Log(err)
	}
	un := newStore(t, unrouted{redisrun.GoRedis(admin)})
	defer un.Close()
	if err := un.CheckConfig(ctx); !errors.Is(err, redisstore.ErrConfigUnreadable) {
		t.Errorf("a client that cannot send CONFIG: %v, want ErrConfigUnreadable", err)
	}
	if err := admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	ring, _ := newRing(t)
	rs := newGoRedis(t, ring)
	defer rs.Close()
	if err := rs.CheckConfig(ctx); err != nil {
		t.Errorf("Ring of noeviction shards: %v", err)
	}
	if err := ring.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
		return c.ConfigSet(ctx, "maxmemory-policy", "allkeys-lfu").Err()
	}); err != nil {
		t.Fatal(err)
	}
	if err := rs.CheckConfig(ctx); !errors.Is(err, redisstore.ErrEvictingPolicy) {
		t.Errorf("Ring of allkeys-lfu shards: %v, want ErrEvictingPolicy", err)
	}
}

// A closed store answers ErrClosed at once, batched or not, even with a
// server that never answers.
func TestClosedStore(t *testing.T) {
	h := newHungServer(t)
	defer h.close()
	c := redis.NewClient(&redis.Options{Addr: h.addr(), DisableIdentity: true, MaxRetries: -1})
	defer c.Close()
	p := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: hour, Burst: 3}
	for _, batched := range []bool{true, false} {
		opts := []redisstore.Option{redisstore.WithTimeout(2 * time.Second), redisstore.WithFailurePolicy(redisstore.FailOpen)}
		if !batched {
			opts = append(opts, redisstore.WithoutBatching())
		}
		st := newGoRedis(t, c, opts...)
		st.Close()
		start := time.Now()
		r, err := take(context.Background(), st, storelink.Request{Key: "k", Params: p, Cost: 1, MaxDelay: algo.Never})
		if !errors.Is(err, redisstore.ErrClosed) || r.Allowed {
			t.Errorf("batched=%v: %+v, %v; want ErrClosed", batched, r, err)
		}
		if _, err := takeAll(context.Background(), st, []storelink.Request{{Key: "k", Params: p, Cost: 1, MaxDelay: algo.Never}}); !errors.Is(err, redisstore.ErrClosed) {
			t.Errorf("TakeAll: %v", err)
		}
		if err := reset(context.Background(), st, "k"); !errors.Is(err, redisstore.ErrClosed) {
			t.Errorf("Reset: %v", err)
		}
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Errorf("batched=%v: the closed store took %v to answer", batched, d)
		}
	}
	// Calls waiting in the batcher when it closes are answered ErrClosed at
	// once, not left to their timeout; the call on its way to the hung
	// server ends by its timeout.
	st := newGoRedis(t, c, redisstore.WithTimeout(3*time.Second), redisstore.WithBatching(1))
	take := func() error {
		_, err := take(context.Background(), st, storelink.Request{Key: "k", Params: p, Cost: 1, MaxDelay: algo.Never})
		return err
	}
	first := make(chan error, 1)
	go func() { first <- take() }()
	time.Sleep(100 * time.Millisecond) // the first call is on its way
	var wg sync.WaitGroup
	errs := make(chan error, 63)
	for range 63 {
		wg.Go(func() { errs <- take() })
	}
	time.Sleep(100 * time.Millisecond) // the others wait in the queue
	start := time.Now()
	go st.Close()
	wg.Wait()
	close(errs)
	if d := time.Since(start); d > time.Second {
		t.Errorf("waiting callers were answered %v after Close", d)
	}
	for err := range errs {
		if !errors.Is(err, redisstore.ErrClosed) {
			t.Errorf("a waiting caller: %v, want ErrClosed", err)
			break
		}
	}
	if err := <-first; !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Errorf("the call on its way: %v, want its timeout (ErrStoreUnavailable)", err)
	}
}

// Invalid ops from outside a Limiter (a zero limit, a negative cost, a cost
// over capacity, an empty key, duplicate parts) are errors, never panics.
func TestUncheckedRequests(t *testing.T) {
	st := newGoRedis(t, redistest.Shared(t).Client(), redisstore.WithPrefix(fmt.Sprintf("unchecked:%d:", time.Now().UnixNano())))
	defer st.Close()
	ctx := context.Background()
	good := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: hour, Burst: 3}
	for name, req := range map[string]storelink.Request{
		"zero params":       {Key: "k", Cost: 1},
		"negative cost":     {Key: "k", Params: good, Cost: -1},
		"cost > capacity":   {Key: "k", Params: good, Cost: 4},
		"empty key":         {Params: good, Cost: 1},
		"bad kind":          {Key: "k", Params: algo.Params{Kind: 99, Rate: 1, Period: 1, Burst: 1}, Cost: 1},
		"negative burst":    {Key: "k", Params: algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: 1, Burst: -1}, Cost: 0},
		"negative maxdelay": {Key: "k", Params: good, Cost: 1, MaxDelay: -5},
	} {
		if _, err := take(ctx, st, req); err == nil {
			t.Errorf("Take %s: no error", name)
		}
		if _, err := takeAll(ctx, st, []storelink.Request{req}); err == nil {
			t.Errorf("TakeAll %s: no error", name)
		}
	}
	if _, err := takeAll(ctx, st, nil); err == nil {
		t.Error("TakeAll of no parts: no error")
	}
	dup := storelink.Request{Key: "k", Params: good, Cost: 1, MaxDelay: algo.Never}
	if _, err := takeAll(ctx, st, []storelink.Request{dup, dup}); !errors.Is(err, sluice.ErrDuplicateKey) {
		t.Errorf("duplicate parts: %v", err)
	}
	if _, err := refund(ctx, st, storelink.Request{Key: "k", Cost: 1}); err == nil {
		t.Error("Refund with zero params: no error")
	}
	if err := reset(ctx, st, ""); err == nil {
		t.Error("Reset of an empty key: no error")
	}
}

// A refund on a key of another program's is an error wrapping
// ErrForeignKey, and leaves the key alone.
func TestRefundForeignKey(t *testing.T) {
	srv := redistest.Standalone(t)
	ctx := context.Background()
	st := newGoRedis(t, srv.Client(), redisstore.WithPrefix("rf:"))
	defer st.Close()
	if err := srv.Client().SAdd(ctx, redisstore.RateKey(st, "k"), "x").Err(); err != nil {
		t.Fatal(err)
	}
	p := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: hour, Burst: 3}
	if _, err := refund(ctx, st, storelink.Request{Key: "k", Params: p, Cost: 1, MaxDelay: algo.Never}); !errors.Is(err, redisstore.ErrForeignKey) {
		t.Errorf("Refund: %v, want ErrForeignKey", err)
	}
	if typ, _ := srv.Client().Type(ctx, redisstore.RateKey(st, "k")).Result(); typ != "set" {
		t.Errorf("the foreign key is now a %q", typ)
	}
}

// A store pointed at a replica (a primary demoted by a failover) gets
// READONLY: an outage, so the failure policy applies.
func TestReadOnlyReplicaIsAnOutage(t *testing.T) {
	primary, replica := redistest.Standalone(t), redistest.Standalone(t)
	ctx := context.Background()
	host, port, _ := strings.Cut(primary.Addr(), ":")
	if err := replica.Client().Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		t.Fatalf("REPLICAOF: %v", err)
	}
	p := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: hour, Burst: 3}
	for _, batched := range []bool{true, false} {
		for _, policy := range []redisstore.FailurePolicy{redisstore.FailClosed, redisstore.FailOpen} {
			opts := []redisstore.Option{redisstore.WithFailurePolicy(policy)}
			if !batched {
				opts = append(opts, redisstore.WithoutBatching())
			}
			st := newGoRedis(t, replica.Client(), opts...)
			r, err := take(ctx, st, storelink.Request{Key: "k", Params: p, Cost: 1, MaxDelay: algo.Never})
			switch policy {
			case redisstore.FailClosed:
				if !errors.Is(err, sluice.ErrStoreUnavailable) {
					t.Errorf("batched=%v FailClosed: %+v, %v; want ErrStoreUnavailable", batched, r, err)
				} else {
					t.Log(err)
				}
			case redisstore.FailOpen:
				if err != nil || !r.Allowed || !r.Degraded {
					t.Errorf("batched=%v FailOpen: %+v, %v; want a degraded admission", batched, r, err)
				}
			}
			st.Close()
		}
	}
}
