package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/model"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/storetest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/redisstore"
)

const base = int64(1_764_000_000_000_000)

// limits covers every algorithm with integer and non-integer emission
// intervals.
func limits() []algo.Params {
	var ps []algo.Params
	for _, k := range algo.Kinds() {
		for _, rp := range [][3]int64{{3, 1_000_000, 4}, {7, 100_000, 1}, {1, 60_000_000, 2}, {1000, 1_000_000, 50}, {5, 1_000_000, 5}} {
			burst := rp[2]
			if k == algo.LeakyBucket {
				burst--
			}
			ps = append(ps, algo.Params{Kind: k, Rate: rp[0], Period: rp[1], Burst: burst})
		}
	}
	// The windows that only count take limits whose rate·period is past
	// 2^50: a hundred thousand a day, and 2^40 per 2^20 µs.
	for _, k := range []algo.Kind{algo.FixedWindow, algo.AlignedWindow} {
		ps = append(ps, algo.Params{Kind: k, Rate: 100_000, Period: 86_400_000_000}, algo.Params{Kind: k, Rate: 1 << 40, Period: 1 << 20})
	}
	return ps
}

type traceReq struct {
	key       string
	now, cost int64
}

// randomTrace draws n requests over a few keys: gaps from zero to several
// periods, costs from 0 to capacity.
func randomTrace(r *rand.Rand, p algo.Params, n int) []traceReq {
	tr := make([]traceReq, n)
	now := base + r.Int64N(p.Period)
	for i := range tr {
		switch r.IntN(4) {
		case 0: // same instant
		case 1:
			now += r.Int64N(p.Period/max(p.Rate, 1) + 2)
		case 2:
			now += r.Int64N(p.Period + 1)
		default:
			now += r.Int64N(3*p.Period + 1)
		}
		tr[i] = traceReq{key: "k" + strconv.Itoa(r.IntN(3)), now: now, cost: r.Int64N(p.Capacity() + 1)}
	}
	return tr
}

// conform replays random traces through memstore, the model and the Redis
// store, and requires every decision equal.
func conform(t *testing.T, c redis.UniversalClient, traces, n int) {
	ctx := context.Background()
	seed := testenv.Seed(t)
	r := rand.New(rand.NewPCG(seed, 7))
	rs := newGoRedis(t, c, redisstore.WithPrefix(fmt.Sprintf("conform:%d:%d:", seed, time.Now().UnixNano())), redisstore.WithTTLMargin(time.Hour))
	defer rs.Close()
	decisions := 0
	for li, p := range limits() {
		for ti := 0; ti < traces; ti++ {
			ms := memstore.New()
			m := model.New(p.Kind, p.Rate, p.Period, p.Burst)
			prefix := fmt.Sprintf("l%d:t%d:", li, ti)
			for i, q := range randomTrace(r, p, n) {
				req := storelink.Request{Key: prefix + q.key, Params: p, Cost: q.cost, MaxDelay: algo.Never}
				want, _ := storetest.TakeAt(ctx, ms, req, q.now)
				want.FreshAt = 0
				got, err := storetest.TakeAt(ctx, rs, req, q.now)
				if err != nil {
					t.Fatalf("%+v request %d: %v", p, i, err)
				}
				exact := m.Take(q.key, q.now, q.cost)
				if got != want || got != exact {
					t.Fatalf("%+v request %d %+v:\n redis  %+v\n memory %+v\n model  %+v", p, i, q, got, want, exact)
				}
				decisions++
			}
		}
	}
	t.Logf("%d decisions identical in Redis, memory and the model", decisions)
}

func TestConformanceStandalone(t *testing.T) {
	srv := redistest.Shared(t)
	traces, n := 4, 150
	if !testenv.Long() {
		traces, n = 1, 60
	}
	conform(t, srv.Client(), traces, n)
}

func TestConformanceCluster(t *testing.T) {
	cl := redistest.SharedCluster(t)
	traces, n := 2, 100
	if !testenv.Long() {
		traces, n = 1, 40
	}
	conform(t, cl.Client(), traces, n)
}

// conformChanged replays traces whose limits change (rate, period, burst,
// algorithm) through memstore, the model and the Redis store, and requires
// every decision equal: each store reads another limit's state as
// SEMANTICS.md's "Changed limits" says.
func conformChanged(t *testing.T, c redis.UniversalClient, traces, n int) {
	ctx := context.Background()
	seed := testenv.Seed(t)
	r := rand.New(rand.NewPCG(seed, 8))
	rs := newGoRedis(t, c, redisstore.WithPrefix(fmt.Sprintf("changed:%d:%d:", seed, time.Now().UnixNano())), redisstore.WithTTLMargin(time.Hour))
	defer rs.Close()
	decisions := 0
	for ti := 0; ti < traces; ti++ {
		ms := memstore.New()
		ks := model.NewKeys()
		prefix := fmt.Sprintf("t%d:", ti)
		trace := storetest.ChangedTrace(r, n)
		for i, q := range trace {
			req := storelink.Request{Key: prefix + q.Key, Params: q.Params, Cost: q.Cost, MaxDelay: algo.Never}
			want, _ := storetest.TakeAt(ctx, ms, req, q.Now)
			want.FreshAt = 0
			got, err := storetest.TakeAt(ctx, rs, req, q.Now)
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			exact := ks.Take(q.Key, storetest.ModelLimit(q.Params), q.Now, q.Cost)
			if got != want || got != exact {
				var hist strings.Builder
				for _, h := range trace[max(0, i-20) : i+1] {
					fmt.Fprintf(&hist, "  %s %v %d/%dµs burst %d t=+%d cost %d\n", h.Key, h.Params.Kind, h.Params.Rate, h.Params.Period, h.Params.Burst, h.Now-base, h.Cost)
				}
				t.Fatalf("seed %d trace %d request %d:\n redis  %+v\n memory %+v\n model  %+v\n%s", seed, ti, i, got, want, exact, hist.String())
			}
			decisions++
		}
	}
	t.Logf("%d decisions under changing limits identical in Redis, memory and the model", decisions)
}

func TestConformanceChangedLimits(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		traces, n := 12, 200
		if !testenv.Long() {
			traces, n = 2, 100
		}
		conformChanged(t, redistest.Shared(t).Client(), traces, n)
	})
	t.Run("cluster", func(t *testing.T) {
		traces, n := 4, 150
		if !testenv.Long() {
			traces, n = 1, 60
		}
		conformChanged(t, redistest.SharedCluster(t).Client(), traces, n)
	})
}

func TestMain(m *testing.M) { redistest.Main(m) }
