package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/model"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/storetest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/redisstore"
	"github.com/sluice-go/sluice/store"
)

// conformSlice replays traces of changing limits where every request that
// may take slices is a slice take (a random cost and want) through the slice script,
// algo.TakeSlice and the model's LeaseTake, and the others are plain takes, and
// requires every decision and every slice equal.
func conformSlice(t *testing.T, c redis.UniversalClient, traces, n int) {
	ctx := context.Background()
	seed := testenv.Seed(t)
	r := rand.New(rand.NewPCG(seed, 24))
	rs := newGoRedis(t, c, redisstore.WithPrefix(fmt.Sprintf("slice:%d:%d:", seed, time.Now().UnixNano())), redisstore.WithTTLMargin(time.Hour))
	defer rs.Close()
	slices := 0
	for ti := range traces {
		states := map[string]*algo.State{}
		ks := model.NewKeys()
		prefix := fmt.Sprintf("t%d:", ti)
		for i, q := range storetest.ChangedTrace(r, n) {
			st := states[q.Key]
			if st == nil {
				st = new(algo.State)
				states[q.Key] = st
			}
			lim := storetest.ModelLimit(q.Params)
			if !algo.Sliceable(q.Params.Kind) {
				req := storelink.Request{Key: prefix + q.Key, Params: q.Params, Cost: q.Cost, MaxDelay: algo.Never}
				if _, err := storetest.TakeAt(ctx, rs, req, q.Now); err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				algo.Step(&q.Params, st, q.Now, q.Cost, algo.Never)
				ks.Take(q.Key, lim, q.Now, q.Cost)
				continue
			}
			want := q.Cost + r.Int64N(q.Params.Capacity()+1)
			got, gotN, err := redisstore.SliceAt(rs, ctx, prefix+q.Key, q.Params, q.Cost, want, q.Now)
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			mem, memN := algo.TakeSlice(&q.Params, st, q.Now, q.Cost, want)
			mem.FreshAt = 0
			exact, exactN := ks.Model(lim).LeaseTake(q.Key, q.Now, q.Cost, want)
			if got != mem || got != exact || gotN != memN || gotN != exactN {
				t.Fatalf("seed %d trace %d request %d %v cost %d want %d:\n redis  %+v %d\n memory %+v %d\n model  %+v %d",
					seed, ti, i, q.Params, q.Cost, want, got, gotN, mem, memN, exact, exactN)
			}
			slices++
		}
	}
	t.Logf("%d slice takes identical in Redis, memory and the model", slices)
}

func TestSliceScriptConforms(t *testing.T) {
	t.Run("standalone", func(t *testing.T) { conformSlice(t, redistest.Shared(t).Client(), 8, 200) })
	t.Run("cluster", func(t *testing.T) { conformSlice(t, redistest.SharedCluster(t).Client(), 3, 150) })
}

func TestWithSlicesRejectsABadLife(t *testing.T) {
	for _, life := range []time.Duration{0, -time.Second, 2 * time.Hour} {
		_, err := redisstore.New(redistest.Unreachable(t), redisstore.WithSlices(life))
		if !errors.Is(err, redisstore.ErrInvalidOption) {
			t.Errorf("WithSlices(%v): %v, want ErrInvalidOption", life, err)
		}
	}
}

// fleet is several processes' stores with slices on one Redis, deciding at
// one fake clock.
type fleet struct {
	clock  *testenv.Clock
	stores []*redisstore.Store
}

func newFleet(t *testing.T, c redis.UniversalClient, n int, life time.Duration, prefix string) *fleet {
	f := &fleet{clock: testenv.NewClock()}
	for range n {
		s := newGoRedis(t, c, redisstore.WithPrefix(prefix), redisstore.WithClock(f.clock), redisstore.WithSlices(life))
		t.Cleanup(func() { s.Close() })
		f.stores = append(f.stores, s)
	}
	return f
}

// TestSliceBoundWithRedis runs several processes (stores over one Redis,
// each with its own slices) on random traces of takes and refunds at a
// shared fake clock, and checks every admission against SEMANTICS.md's
// bound.
func TestSliceBoundWithRedis(t *testing.T) {
	t.Parallel() // beside the other parallel tests: no wall-clock assertion, servers and keys of its own
	for name, c := range map[string]redis.UniversalClient{"standalone": redistest.Shared(t).Client(), "cluster": redistest.SharedCluster(t).Client()} {
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(testenv.Seed(t), 25))
			var local int64
			kinds := []algo.Kind{algo.TokenBucket, algo.GCRA, algo.FixedWindow, algo.AlignedWindow}
			if testenv.Long() { // a second trace of a bucket and a window
				kinds = append(kinds, algo.TokenBucket, algo.FixedWindow)
			}
			for ti, kind := range kinds {
				local += sliceBoundTrace(t, r, c, ti, kind)
			}
			if local == 0 {
				t.Fatal("no decision was made from a slice")
			}
		})
	}
}

// sliceBoundTrace runs one trace and returns how many decisions were made
// from slices.
func sliceBoundTrace(t *testing.T, r *rand.Rand, c redis.UniversalClient, ti int, kind algo.Kind) int64 {
	ctx := context.Background()
	life := time.Duration(1+r.IntN(50)) * time.Millisecond
	rate := int64(20 + r.IntN(200))
	lim := sluice.Limit{Algorithm: sluice.Algorithm(kind), Rate: rate, Period: 100 * time.Millisecond, Burst: rate / 2}
	if kind == algo.FixedWindow || kind == algo.AlignedWindow {
		lim.Burst = 0
	}
	f := newFleet(t, c, 2+r.IntN(4), life, fmt.Sprintf("bound:%d:%d:", ti, time.Now().UnixNano()))
	var adm []model.Admission
	type owed struct {
		store int
		a     model.Admission
	}
	var refundable []owed
	for range 1500 {
		f.clock.Add(time.Duration(r.IntN(400)) * time.Microsecond)
		now := f.clock.Now().UnixMicro()
		i := r.IntN(len(f.stores))
		if r.IntN(20) == 0 && len(refundable) > 0 {
			j := r.IntN(len(refundable))
			o := refundable[j]
			refundable = append(refundable[:j], refundable[j+1:]...)
			p, _ := storelink.Params(lim)
			op := store.Op{Kind: store.Refund, Key: "hot", Limit: storelink.LimitOf(&p), Cost: o.a.Units, Window: o.a.Window}
			if _, err := answer(storetest.RunAt(ctx, f.stores[o.store], 0, op)); err != nil {
				t.Fatalf("refund: %v", err)
			}
			adm = append(adm, model.Admission{T: now, Units: -o.a.Units, Window: o.a.Window})
			continue
		}
		cost := int64(1 + r.IntN(3))
		res, err := take(ctx, f.stores[i], request("hot", lim, cost))
		if err != nil {
			t.Fatalf("take: %v", err)
		}
		if res.Allowed {
			a := model.Admission{T: now, Units: cost, Window: res.Window}
			adm = append(adm, a)
			refundable = append(refundable, owed{i, a})
		}
	}
	var local int64
	for _, s := range f.stores {
		local += s.SliceStats().Local
	}
	var err error
	if kind == algo.FixedWindow || kind == algo.AlignedWindow {
		err = model.CheckWindowBound(adm, lim.Rate, lim.Period.Microseconds())
	} else {
		err = model.CheckBucketBound(adm, lim.Burst, lim.Rate, lim.Period.Microseconds(), life.Microseconds())
	}
	if err != nil {
		t.Fatalf("trace %d (%v, %d processes, %d/100ms, life %v): %v", ti, kind, len(f.stores), rate, life, err)
	}
	t.Logf("trace %d (%v): %d admissions, %d decisions from slices", ti, kind, len(adm), local)
	return local
}

// heat takes n units one by one on key from s, all admitted, so that s
// takes slices of the key.
func heat(t *testing.T, s *redisstore.Store, key string, lim sluice.Limit, n int) {
	t.Helper()
	for i := range n {
		res, err := take(context.Background(), s, request(key, lim, 1))
		if err != nil || !res.Allowed {
			t.Fatalf("take %d: %+v %v", i, res, err)
		}
	}
}

// settled waits until s has no slice on its way: its stats stop changing.
func settled(t *testing.T, s *redisstore.Store) redisstore.SliceStats {
	t.Helper()
	prev := s.SliceStats()
	for range 200 {
		time.Sleep(20 * time.Millisecond)
		st := s.SliceStats()
		if st == prev {
			return st
		}
		prev = st
	}
	t.Fatal("slice stats never settled")
	return prev
}

func TestSliceCloseGivesBack(t *testing.T) {
	ctx := context.Background()
	c := redistest.Shared(t).Client()
	prefix := fmt.Sprintf("sliceclose:%d:", time.Now().UnixNano())
	clock := testenv.NewClock()
	s := newGoRedis(t, c, redisstore.WithPrefix(prefix), redisstore.WithClock(clock), redisstore.WithSlices(time.Minute))
	plain := newGoRedis(t, c, redisstore.WithPrefix(prefix), redisstore.WithClock(clock))
	defer plain.Close()
	lim := sluice.Limit{Rate: 1, Period: time.Hour, Burst: 1000} // no refill during the test
	heat(t, s, "k", lim, 100)
	st := settled(t, s)
	if st.Held == 0 || st.Local == 0 {
		t.Fatalf("no slice held after 100 takes: %+v", st)
	}
	look, err := take(ctx, plain, request("k", lim, 0))
	if err != nil {
		t.Fatal(err)
	}
	// Redis counts the 100 admitted and the units held as spent.
	if look.Remaining != 1000-100-st.Held {
		t.Fatalf("Redis has %d left, want 1000 − 100 − %d held", look.Remaining, st.Held)
	}
	if top := s.Slices(5); len(top) != 1 || top[0].Key != "k" || top[0].Held != st.Held {
		t.Fatalf("Slices: %+v, want k holding %d", top, st.Held)
	}
	s.Close()
	if look, err = take(ctx, plain, request("k", lim, 0)); err != nil || look.Remaining != 900 {
		t.Fatalf("after Close: %+v %v, want 900 left", look, err)
	}
	if st = s.SliceStats(); st.Held != 0 || st.GivenBack == 0 {
		t.Fatalf("after Close: %+v", st)
	}
}

func TestSliceResetDropsSlices(t *testing.T) {
	ctx := context.Background()
	s := newGoRedis(t, redistest.Shared(t).Client(), redisstore.WithPrefix(fmt.Sprintf("slicereset:%d:", time.Now().UnixNano())),
		redisstore.WithClock(testenv.NewClock()), redisstore.WithSlices(time.Minute))
	defer s.Close()
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1000, Period: time.Hour}
	heat(t, s, "k", lim, 100)
	if st := settled(t, s); st.Held == 0 {
		t.Fatalf("no slice held: %+v", st)
	}
	if err := reset(ctx, s, "k"); err != nil {
		t.Fatal(err)
	}
	if st := s.SliceStats(); st.Held != 0 {
		t.Fatalf("after Reset: %+v", st)
	}
	// The key is fresh: the next take sees the whole window.
	res, err := take(ctx, s, request("k", lim, 1))
	if err != nil || !res.Allowed || res.Remaining != 999 {
		t.Fatalf("after Reset: %+v %v, want 999 left", res, err)
	}
}

func TestSliceNeverOfOtherAlgorithms(t *testing.T) {
	ctx := context.Background()
	clock := testenv.NewClock()
	s := newGoRedis(t, redistest.Shared(t).Client(), redisstore.WithPrefix(fmt.Sprintf("sliceno:%d:", time.Now().UnixNano())),
		redisstore.WithClock(clock), redisstore.WithSlices(time.Minute))
	defer s.Close()
	for _, alg := range []sluice.Algorithm{sluice.SlidingWindow, sluice.SlidingLog, sluice.LeakyBucket} {
		lim := sluice.Limit{Algorithm: alg, Rate: 50, Period: time.Hour, Burst: 49}
		m := model.New(algo.Kind(alg), 50, time.Hour.Microseconds(), 49)
		key := alg.String()
		for i := range 60 {
			clock.Add(time.Millisecond)
			req := request(key, lim, 1)
			req.MaxDelay = (24 * time.Hour).Microseconds()
			res, err := take(ctx, s, req)
			if err != nil {
				t.Fatal(err)
			}
			want := m.Take(key, clock.Now().UnixMicro(), 1)
			if res.Allowed != want.Allowed || res.Remaining != want.Remaining {
				t.Fatalf("%v take %d: %+v, model %+v", alg, i, res, want)
			}
		}
	}
	if st := s.SliceStats(); st.Keys != 0 || st.Local != 0 || st.Slices != 0 {
		t.Fatalf("keys of other algorithms took slices: %+v", st)
	}
}

// TestSliceOutageSpendsWhatIsHeld stops Redis under a process holding
// slices: it admits exactly the units it holds, then the failure policy
// applies.
func TestSliceOutageSpendsWhatIsHeld(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Standalone(t)
	s := newGoRedis(t, srv.Client(), redisstore.WithClock(testenv.NewClock()), redisstore.WithSlices(time.Minute),
		redisstore.WithTimeout(200*time.Millisecond))
	defer s.Close()
	lim := sluice.Limit{Rate: 1, Period: time.Hour, Burst: 1000}
	heat(t, s, "k", lim, 100)
	settled(t, s)
	srv.Stop(t)
	held := settled(t, s).Held
	if held == 0 {
		t.Fatal("no slice held when Redis stopped")
	}
	var admitted int64
	for {
		res, err := take(ctx, s, request("k", lim, 1))
		if err != nil {
			if !errors.Is(err, sluice.ErrStoreUnavailable) {
				t.Fatalf("after %d: %v, want ErrStoreUnavailable", admitted, err)
			}
			break
		}
		if !res.Allowed || res.Degraded {
			t.Fatalf("after %d: %+v", admitted, res)
		}
		admitted++
	}
	if admitted != held {
		t.Fatalf("admitted %d during the outage, held %d", admitted, held)
	}
}

// BenchmarkSlicedTake is a hot key decided from slices: memory speed, no
// allocation, few Redis calls.
func BenchmarkSlicedTake(b *testing.B) {
	s := newGoRedis(b, redistest.Shared(b).Client(), redisstore.WithPrefix(fmt.Sprintf("slicebench:%d:", time.Now().UnixNano())), redisstore.WithSlices(time.Second))
	defer s.Close()
	op := store.Op{Kind: store.Take, Key: "hot", Limit: store.Limit{Algorithm: uint8(algo.TokenBucket), Rate: 1 << 30, Period: 1_000_000, Burst: 1 << 30}, Cost: 1, MaxDelay: store.Never}
	ctx := context.Background()
	ops := [1]store.Op{op}
	for range 10_000 { // warm the key up: its demand sizes the slices
		if s.Run(ctx, ops[:]); ops[0].Err != nil {
			b.Fatal(ops[0].Err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ops := [1]store.Op{op} // Run writes the answer over the last one
		for pb.Next() {
			if s.Run(ctx, ops[:]); ops[0].Err != nil {
				b.Error(ops[0].Err)
				return
			}
		}
	})
	b.StopTimer()
	st := s.SliceStats()
	b.ReportMetric(float64(st.Store+st.Slices)/float64(st.Local+st.Store), "redis-calls/decision")
}

// TestSliceConcurrentFleetIsExact hammers one fixed-window key from several
// stores' goroutines at the server's time: the window admits at most its
// rate, and once every store has closed (giving its slices back) Redis has
// counted exactly the units admitted.
func TestSliceConcurrentFleetIsExact(t *testing.T) {
	ctx := context.Background()
	c := redistest.Shared(t).Client()
	prefix := fmt.Sprintf("slicefleet:%d:", time.Now().UnixNano())
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 3000, Period: time.Hour}
	var stores []*redisstore.Store
	for range 3 {
		stores = append(stores, newGoRedis(t, c, redisstore.WithPrefix(prefix), redisstore.WithSlices(time.Minute)))
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for _, s := range stores {
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 600 {
					res, err := take(ctx, s, request("hot", lim, 1))
					if err != nil {
						t.Error(err)
						return
					}
					if res.Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	var st redisstore.SliceStats
	for _, s := range stores {
		x := s.SliceStats()
		st.Local += x.Local
		s.Close()
	}
	if n := admitted.Load(); n > lim.Rate || n < lim.Rate/2 {
		t.Fatalf("admitted %d of a window of %d, demand 14400", n, lim.Rate)
	}
	plain := newGoRedis(t, c, redisstore.WithPrefix(prefix))
	defer plain.Close()
	look, err := take(ctx, plain, request("hot", lim, 0))
	if err != nil {
		t.Fatal(err)
	}
	if look.Remaining != lim.Rate-admitted.Load() {
		t.Fatalf("Redis has %d left after %d admitted of %d: slices not given back", look.Remaining, admitted.Load(), lim.Rate)
	}
	if st.Local == 0 {
		t.Fatal("no decision from a slice")
	}
	t.Logf("admitted %d, %d from slices", admitted.Load(), st.Local)
}

// TestSliceCompositesKeepTheBound runs composites (a token-bucket part and
// a fixed-window part) from several stores with slices at a fake clock:
// each part's admissions keep its own bound, and composites come to be
// decided from slices.
func TestSliceCompositesKeepTheBound(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(testenv.Seed(t), 26))
	life := 20 * time.Millisecond
	f := newFleet(t, redistest.Shared(t).Client(), 3, life, fmt.Sprintf("slicecomp:%d:", time.Now().UnixNano()))
	tb := sluice.Limit{Rate: 300, Period: 100 * time.Millisecond, Burst: 150}
	fw := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 200, Period: 100 * time.Millisecond}
	lims := make([]*sluice.Limiter, len(f.stores))
	for i, s := range f.stores {
		lims[i] = sluice.New(s)
	}
	var global, user []model.Admission
	for range 3000 {
		f.clock.Add(time.Duration(r.IntN(200)) * time.Microsecond)
		now := f.clock.Now().UnixMicro()
		l := lims[r.IntN(len(lims))]
		ct, cu := int64(1+r.IntN(2)), int64(1+r.IntN(2))
		each := make([]sluice.Result, 2)
		res, err := l.TakeAll(ctx, []sluice.Part{{Key: "global", Limit: tb, Cost: ct}, {Key: "user", Limit: fw, Cost: cu}}, each)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed != (each[0].Allowed && each[1].Allowed) {
			t.Fatalf("summary %+v, parts %+v", res, each)
		}
		if res.Allowed {
			global = append(global, model.Admission{T: now, Units: ct})
			user = append(user, model.Admission{T: now, Units: cu, Window: each[1].Window})
		}
	}
	if err := model.CheckBucketBound(global, tb.Burst, tb.Rate, tb.Period.Microseconds(), life.Microseconds()); err != nil {
		t.Fatalf("token-bucket part: %v", err)
	}
	if err := model.CheckWindowBound(user, fw.Rate, fw.Period.Microseconds()); err != nil {
		t.Fatalf("fixed-window part: %v", err)
	}
	var local int64
	for _, s := range f.stores {
		local += s.SliceStats().Local
	}
	if local == 0 {
		t.Fatal("no composite part was decided from a slice")
	}
	t.Logf("%d and %d admitted, %d part decisions from slices", len(global), len(user), local)
}

// A composite whose part has no slice goes to Redis whole, and spends
// nothing from the other part's slices.
func TestSliceCompositeRefusalSpendsNoSlice(t *testing.T) {
	ctx := context.Background()
	s := newGoRedis(t, redistest.Shared(t).Client(), redisstore.WithPrefix(fmt.Sprintf("sliceall:%d:", time.Now().UnixNano())),
		redisstore.WithClock(testenv.NewClock()), redisstore.WithSlices(time.Minute))
	defer s.Close()
	lim := sluice.Limit{Rate: 1, Period: time.Hour, Burst: 1000}
	heat(t, s, "a", lim, 100)
	held := settled(t, s).Held
	tiny := sluice.Limit{Rate: 1, Period: time.Hour, Burst: 1}
	if _, err := take(ctx, s, request("b", tiny, 1)); err != nil {
		t.Fatal(err)
	}
	res, err := takeAll(ctx, s, []storelink.Request{request("a", lim, 1), request("b", tiny, 1)})
	if err != nil || res.Allowed {
		t.Fatalf("composite over an empty part: %+v %v, want refused", res, err)
	}
	if st := s.SliceStats(); st.Held != held {
		t.Fatalf("held %d after the refusal, %d before", st.Held, held)
	}
}

// When a key's demand stops for a slice's horizon, its slices go back to
// Redis before they end.
func TestSliceDemandDropGivesBack(t *testing.T) {
	ctx := context.Background()
	c := redistest.Shared(t).Client()
	prefix := fmt.Sprintf("slicedrop:%d:", time.Now().UnixNano())
	clock := testenv.NewClock()
	s := newGoRedis(t, c, redisstore.WithPrefix(prefix), redisstore.WithClock(clock), redisstore.WithSlices(200*time.Millisecond))
	defer s.Close()
	plain := newGoRedis(t, c, redisstore.WithPrefix(prefix), redisstore.WithClock(clock))
	defer plain.Close()
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1000, Period: time.Hour}
	heat(t, s, "k", lim, 100)
	if st := settled(t, s); st.Held == 0 {
		t.Fatalf("no slice held: %+v", st)
	}
	clock.Add(60 * time.Millisecond) // past the horizon (a quarter of the life), within the life
	var st redisstore.SliceStats
	// The janitor runs every horizon of real time; a dropped slice stops
	// counting as held at once and as given back when Redis has answered.
	for range 500 {
		if st = s.SliceStats(); st.Held == 0 && st.GivenBack+st.Expired > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st.Held != 0 || st.GivenBack == 0 {
		t.Fatalf("slices still held after demand stopped: %+v", st)
	}
	look, err := take(ctx, plain, request("k", lim, 0))
	if err != nil || look.Remaining != 900 {
		t.Fatalf("Redis after the give-back: %+v %v, want 900 left", look, err)
	}
}

// A bucket's slice given back after its life in the store gives nothing
// back; within it, its units come back.
func TestSliceGiveBackOnlyWithinLife(t *testing.T) {
	ctx := context.Background()
	for name, c := range map[string]redis.UniversalClient{"standalone": redistest.Shared(t).Client(), "cluster": redistest.SharedCluster(t).Client()} {
		s := newGoRedis(t, c, redisstore.WithPrefix(fmt.Sprintf("slicegb:%d:", time.Now().UnixNano())), redisstore.WithTTLMargin(time.Hour))
		p := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: 3_600_000_000, Burst: 100}
		t0 := base
		if _, got, err := redisstore.SliceAt(s, ctx, "k", p, 0, 50, t0); err != nil || got != 50 {
			t.Fatalf("%s: slice: %d %v", name, got, err)
		}
		// Its life is 1000µs: at t0 + 1000 the give-back does nothing.
		if ok, err := redisstore.GiveBackAt(s, ctx, "k", p, 50, 0, t0, 1000, t0+1000); err != nil || ok {
			t.Fatalf("%s: late give-back: %v %v, want refused", name, ok, err)
		}
		look, _, _ := redisstore.SliceAt(s, ctx, "k", p, 0, 0, t0+1000)
		if look.Remaining != 50 {
			t.Fatalf("%s: after a late give-back %d left, want 50", name, look.Remaining)
		}
		if ok, err := redisstore.GiveBackAt(s, ctx, "k", p, 50, 0, t0+1000, 1000, t0+1999); err != nil || !ok {
			t.Fatalf("%s: give-back within the life: %v %v", name, ok, err)
		}
		if look, _, _ = redisstore.SliceAt(s, ctx, "k", p, 0, 0, t0+1999); look.Remaining != 100 {
			t.Fatalf("%s: after a give-back %d left, want 100", name, look.Remaining)
		}
		s.Close()
	}
}

// TestSliceTableUnderChurn takes on a few keys from many goroutines while
// others read the stats, reset keys and change limits, with a life short
// enough for slices to end and the janitor to sweep (run it with -race).
func TestSliceTableUnderChurn(t *testing.T) {
	ctx := context.Background()
	s := newGoRedis(t, redistest.Shared(t).Client(), redisstore.WithPrefix(fmt.Sprintf("slicechurn:%d:", time.Now().UnixNano())),
		redisstore.WithSlices(40*time.Millisecond))
	lims := []sluice.Limit{{Rate: 100_000, Period: time.Second, Burst: 1000}, {Algorithm: sluice.GCRA, Rate: 100_000, Period: time.Second, Burst: 1000},
		{Algorithm: sluice.AlignedWindow, Rate: 10_000, Period: 100 * time.Millisecond}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("k%d", i%3)
				lim := lims[(i/200)%len(lims)] // goroutines change limits at about the same time
				if _, err := take(ctx, s, request(key, lim, 1)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			s.SliceStats()
			s.Slices(3)
			if i%4 == 0 {
				if err := reset(ctx, s, "k1"); err != nil {
					t.Error(err)
				}
			}
		}
	}()
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	s.Close()
	st := s.SliceStats()
	if st.Held != 0 {
		t.Fatalf("after Close: %+v", st)
	}
	// Every unit sliced was admitted (each decision here is of one unit),
	// given back, or dropped.
	if st.Sliced != st.Local+st.GivenBack+st.Expired {
		t.Fatalf("units sliced ≠ admitted from slices + given back + dropped: %+v", st)
	}
	t.Logf("%+v", st)
}

// TestSliceChargeGivesBackFirst charges keys this process holds slices of
// (SEMANTICS.md, "Slices"): the slices are given back first, so the charge
// and the takes after it are decided in Redis exactly as in memory, where
// the units never left; and a limit with a debt allowance takes no slice.
func TestSliceChargeGivesBackFirst(t *testing.T) {
	ctx := context.Background()
	clock := testenv.NewClock() // no refill during the test
	s := newGoRedis(t, redistest.Shared(t).Client(), redisstore.WithPrefix(fmt.Sprintf("slicecharge:%d:", time.Now().UnixNano())),
		redisstore.WithClock(clock), redisstore.WithSlices(time.Minute))
	defer s.Close()
	mem := memstore.New(memstore.WithClock(clock))
	same := func(what string, got sluice.Result, gerr error, want sluice.Result, werr error) {
		t.Helper()
		if gerr != nil || werr != nil || got != want {
			t.Fatalf("%s: redis %+v %v, memory %+v %v", what, got, gerr, want, werr)
		}
	}
	for _, lim := range []sluice.Limit{
		{Rate: 1, Period: time.Hour, Burst: 1000},
		{Algorithm: sluice.GCRA, Rate: 1, Period: time.Hour, Burst: 1000},
		{Algorithm: sluice.FixedWindow, Rate: 1000, Period: time.Hour},
		{Algorithm: sluice.AlignedWindow, Rate: 1000, Period: time.Hour},
	} {
		key := lim.Algorithm.String()
		heat(t, s, key, lim, 100)
		for range 100 {
			if _, err := take(ctx, mem, request(key, lim, 1)); err != nil {
				t.Fatal(err)
			}
		}
		before := settled(t, s)
		if before.Held == 0 {
			t.Fatalf("%s: no slice held after 100 takes: %+v", key, before)
		}
		owing := lim
		owing.Debt = 300
		// Had the slices not come back, the charge would find less and owe
		// more.
		got, gerr := charge(ctx, s, request(key, owing, 950))
		want, werr := charge(ctx, mem, request(key, owing, 950))
		same(key+": the charge", got, gerr, want, werr)
		if !got.Allowed || got.Remaining != -50 {
			t.Fatalf("%s: the charge %+v, want all 950 charged and 50 owed", key, got)
		}
		if st := s.SliceStats(); st.Held != 0 || st.GivenBack != before.GivenBack+before.Held {
			t.Fatalf("%s: after the charge %+v, want the %d units held given back (stats before %+v)", key, st, before.Held, before)
		}
		for i, l := range []sluice.Limit{owing, lim, lim, owing} {
			got, gerr := take(ctx, s, request(key, l, 1))
			want, werr := take(ctx, mem, request(key, l, 1))
			same(fmt.Sprintf("%s: take %d after the charge", key, i), got, gerr, want, werr)
			if got.Allowed {
				t.Fatalf("%s: take %d after the charge allowed: %+v", key, i, got)
			}
		}
		// A limit with a debt allowance is decided in Redis, never sliced.
		debtKey := key + ":debt"
		from := s.SliceStats()
		for i := range 60 {
			got, gerr := take(ctx, s, request(debtKey, owing, 1))
			want, werr := take(ctx, mem, request(debtKey, owing, 1))
			same(fmt.Sprintf("%s: take %d", debtKey, i), got, gerr, want, werr)
		}
		if st := settled(t, s); st.Slices != from.Slices || st.Local != from.Local {
			t.Fatalf("%s: a limit with a debt allowance took slices: %+v, before %+v", debtKey, st, from)
		}
	}
}
