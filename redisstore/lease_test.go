package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/internal/model"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/storetest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/redisstore"
)

// conformLease replays traces of changing limits where every leasable
// request is a lease take (a random cost and want) through the lease script,
// algo.Lease and the model's LeaseTake, and the others are plain takes, and
// requires every decision and every slice equal.
func conformLease(t *testing.T, c redis.UniversalClient, traces, n int) {
	ctx := context.Background()
	seed := testenv.Seed(t)
	r := rand.New(rand.NewPCG(seed, 24))
	rs := newGoRedis(t, c, redisstore.WithPrefix(fmt.Sprintf("lease:%d:%d:", seed, time.Now().UnixNano())), redisstore.WithTTLMargin(time.Hour))
	defer rs.Close()
	leases := 0
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
			if !algo.Leasable(q.Params.Kind) {
				req := storelink.Request{Key: prefix + q.Key, Params: q.Params, Cost: q.Cost, MaxDelay: algo.Never}
				if _, err := rs.Engine().TakeAt(ctx, req, q.Now); err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				algo.Step(&q.Params, st, q.Now, q.Cost, algo.Never)
				ks.Take(q.Key, lim, q.Now, q.Cost)
				continue
			}
			want := q.Cost + r.Int64N(q.Params.Capacity()+1)
			got, gotN, err := redisstore.LeaseAt(rs, ctx, prefix+q.Key, q.Params, q.Cost, want, q.Now)
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			mem, memN := algo.Lease(&q.Params, st, q.Now, q.Cost, want)
			mem.FreshAt = 0
			exact, exactN := ks.Model(lim).LeaseTake(q.Key, q.Now, q.Cost, want)
			if got != mem || got != exact || gotN != memN || gotN != exactN {
				t.Fatalf("seed %d trace %d request %d %v cost %d want %d:\n redis  %+v %d\n memory %+v %d\n model  %+v %d",
					seed, ti, i, q.Params, q.Cost, want, got, gotN, mem, memN, exact, exactN)
			}
			leases++
		}
	}
	t.Logf("%d lease takes identical in Redis, memory and the model", leases)
}

func TestLeaseScriptConforms(t *testing.T) {
	t.Run("standalone", func(t *testing.T) { conformLease(t, redistest.Shared(t).Client(), 8, 200) })
	t.Run("cluster", func(t *testing.T) { conformLease(t, redistest.Cluster(t).Client(), 3, 150) })
}

func TestWithLeasesRejectsABadLife(t *testing.T) {
	for _, life := range []time.Duration{0, -time.Second, 2 * time.Hour} {
		_, err := redisstore.New(redistest.Unreachable(t), redisstore.WithLeases(life))
		if !errors.Is(err, redisstore.ErrInvalidOption) {
			t.Errorf("WithLeases(%v): %v, want ErrInvalidOption", life, err)
		}
	}
}

// fleet is several processes' stores with leases on one Redis, deciding at
// one fake clock.
type fleet struct {
	clock  *testenv.Clock
	stores []*redisstore.Store
}

func newFleet(t *testing.T, c redis.UniversalClient, n int, life time.Duration, prefix string) *fleet {
	f := &fleet{clock: testenv.NewClock()}
	for range n {
		s := newGoRedis(t, c, redisstore.WithPrefix(prefix), redisstore.WithClock(f.clock), redisstore.WithLeases(life))
		t.Cleanup(func() { s.Close() })
		f.stores = append(f.stores, s)
	}
	return f
}

// TestLeaseBoundWithRedis runs several processes (stores over one Redis,
// each with its own leases) on random traces of takes and refunds at a
// shared fake clock, and checks every admission against SEMANTICS.md's
// bound.
func TestLeaseBoundWithRedis(t *testing.T) {
	for name, c := range map[string]redis.UniversalClient{"standalone": redistest.Shared(t).Client(), "cluster": redistest.Cluster(t).Client()} {
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(testenv.Seed(t), 25))
			var local int64
			for ti, kind := range []algo.Kind{algo.TokenBucket, algo.GCRA, algo.FixedWindow, algo.AlignedWindow, algo.TokenBucket, algo.FixedWindow} {
				local += leaseBoundTrace(t, r, c, ti, kind)
			}
			if local == 0 {
				t.Fatal("no decision was made from a lease")
			}
		})
	}
}

// leaseBoundTrace runs one trace and returns how many decisions were made
// from leases.
func leaseBoundTrace(t *testing.T, r *rand.Rand, c redis.UniversalClient, ti int, kind algo.Kind) int64 {
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
			req := sluice.Request{Key: "hot", Limit: lim, Cost: o.a.Units, Window: o.a.Window}
			if _, err := f.stores[o.store].Refund(ctx, req); err != nil {
				t.Fatalf("refund: %v", err)
			}
			adm = append(adm, model.Admission{T: now, Units: -o.a.Units, Window: o.a.Window})
			continue
		}
		cost := int64(1 + r.IntN(3))
		res, err := f.stores[i].Take(ctx, sluice.Request{Key: "hot", Limit: lim, Cost: cost})
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
		local += s.LeaseStats().Local
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
	t.Logf("trace %d (%v): %d admissions, %d decisions from leases", ti, kind, len(adm), local)
	return local
}
