package serve

import (
	"context"
	"fmt"

	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/redis/go-redis/v9"
	"github.com/sluice-go/sluice/cmd/sluice/internal/rlqs"

	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/redisstore"
	"github.com/sluice-go/sluice/store"
)

// redisStores returns a maker of stores over c, keys of their own for t.
func redisStores(t *testing.T, c redis.UniversalClient) func() store.Store {
	prefix := fmt.Sprintf("%s-%d/", t.Name(), time.Now().UnixNano())
	return func() store.Store {
		st, err := redisstore.New(c, redisstore.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
}

// The proof over Redis: 100 clients × budgets shared by one
// replica and by three (clients spread over them, a tenth moving to
// another each phase, one replica killed and restarted), and three over
// a Redis Cluster): no window over
// the bound, and the budgets used up while demand exceeds them. The
// default run is 10 budgets over 2 phases (5 under the race detector);
// SLUICE_LONG=1 runs 50 budgets over 6.
func TestRLQSReplicasRedis(t *testing.T) {
	budgets, phases := 10, 2
	switch {
	case testenv.Long():
		budgets, phases = 50, 6
	case raceEnabled:
		budgets = 5
	}
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("replicas=%d", n), func(t *testing.T) {
			st := redisStores(t, redistest.Standalone(t).Client())
			hundredClients(t, hundred{budgets: budgets, phases: phases, replicas: n, store: st, moves: n > 1, kill: n > 1})
		})
	}
	t.Run("cluster/replicas=3", func(t *testing.T) {
		st := redisStores(t, redistest.Cluster(t).Client())
		hundredClients(t, hundred{budgets: min(budgets, 5), phases: 2, replicas: 3, store: st, moves: true, kill: true})
	})
}

// checkSlices checks every second that the slices the replicas grant
// from add up to at most rate for every budget, and fails the test when
// no replica ever held less than the whole rate (they did not share) or
// a renewal failed.
func (s *sim) checkSlices(rate int64) {
	shared := false
	var check func()
	check = func() {
		sums := map[string]int64{}
		for _, r := range s.reps {
			if r.down {
				continue
			}
			r.q.mu.Lock()
			if r.q.failing {
				s.t.Errorf("at %dµs: the slices' renewal failed", s.now)
			}
			r.q.alloc.Each(s.now, func(b rlqs.BudgetStats) {
				sums[b.Key] += b.Slice
				shared = shared || b.Slice > 0 && b.Slice < b.Rate
			})
			r.q.mu.Unlock()
		}
		for k, sum := range sums {
			if sum > rate {
				s.t.Errorf("at %dµs: budget %s: the replicas' slices add up to %d, over %d", s.now, k, sum, rate)
			}
		}
		s.at(s.now+simSec, check)
	}
	s.at(simSec/2, check)
	s.t.Cleanup(func() {
		if !shared && len(s.reps) > 1 {
			s.t.Error("no replica held a slice smaller than the rate")
		}
	})
}

// A store that fails: the replicas grant from the slices they hold until
// those end, then DENY_ALL (nothing admitted from a lease after the
// slices' end), within the bound throughout; once Redis is back they
// grant again.
func TestRLQSReplicasStoreDown(t *testing.T) {
	rs := redistest.Standalone(t)
	c := rs.NewClient(t, func(o *redis.Options) { o.MaxRetries, o.DialerRetries = -1, 1 })
	prefix := fmt.Sprintf("%s-%d/", t.Name(), time.Now().UnixNano())
	stores := func() store.Store {
		st, err := redisstore.New(c, redisstore.WithPrefix(prefix), redisstore.WithTimeout(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	s := newSimReplicas(t, simRules, RLQSOptions{}, testenv.SeedOr(t, 1), 2, stores)
	for i := range 6 {
		cl := s.addClient(fmt.Sprintf("c%d", i), "sim", simOptions{noAssignment: simDenyAll})
		cl.rep = i % 2
		cl.demand(map[string]string{"name": "b0"}, func(int64) float64 { return 40 })
	}
	const down, up, end = 20 * simSec, 50 * simSec, 80 * simSec
	s.at(down, func() { rs.Stop(t) })
	s.at(up, func() {
		rs.Start(t)
		// go-redis's pool answers its last dial error until a dial in
		// the background (once a second of real time) succeeds: wait for
		// it, the simulation being faster than real time.
		for deadline := time.Now().Add(10 * time.Second); c.Ping(context.Background()).Err() != nil; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the client does not reach the restarted Redis")
			}
		}
	})
	s.run(end)
	cfg := s.q.alloc.Config()
	// The last renewal was at down at the latest: its slice ends
	// SliceLife later, and what was granted from it a lease and a round
	// after its last grant.
	quiet := down + cfg.SliceLife.Microseconds()
	counts := [3]int{}
	for _, at := range s.trace["b0"].admitted {
		switch {
		case at >= quiet && at < up:
			counts[0]++
		case at >= up+20*simSec:
			counts[1]++
		case at < down:
			counts[2]++
		}
	}
	t.Logf("admitted: %d before Redis stopped, %d from the slices' end until it was back, %d from 20s after it was back", counts[2], counts[0], counts[1])
	if counts[0] != 0 {
		t.Errorf("%d admitted after every slice had ended, with the store down", counts[0])
	}
	if counts[1] < 100*8 {
		t.Errorf("%d admitted in the last 10s, want most of the rate (100 a second) once Redis is back", counts[1])
	}
	if n := metricValue(t, s.svc, "sluice_rlqs_slice_renewals_failed_total", "", ""); n < 1 {
		t.Errorf("failed renewals counted: %v", n)
	}
	s.checkBound(map[string]int64{"b0": 6000}, 60*simSec)
}

// Two servers over one Redis, on real time and Redis's clock, over gRPC:
// a client of each gets a grant once the rounds have leased the slices,
// and the two grants together stay within the rate.
func TestRLQSReplicasOverGRPC(t *testing.T) {
	stores := redisStores(t, redistest.Standalone(t).Client())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tokens := [2]int64{}
	for i := range 2 {
		ts := start(t, Options{Config: writeConfig(t, map[string]string{"r.yaml": simRules}), Store: stores(), RLQS: &RLQSOptions{}}, nil)
		stream, err := rlqspb.NewRateLimitQuotaServiceClient(ts.conn).StreamRateLimitQuotas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "sim", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usageOf(map[string]string{"name": "x"}, 1, 0)}}); err != nil {
			t.Fatal(err)
		}
		// The first answer comes before any slice (DENY_ALL, or a grant
		// when a round came first); a round's push brings the grant.
		for tokens[i] == 0 {
			resp, err := stream.Recv()
			if err != nil {
				t.Fatalf("replica %d: %v", i, err)
			}
			for _, a := range resp.GetBucketAction() {
				if tb := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket(); tb != nil {
					tokens[i] = int64(tb.GetTokensPerFill().GetValue())
				}
			}
		}
	}
	t.Logf("grants: %v of 6000 a minute", tokens)
	if tokens[0]+tokens[1] > 6000 {
		t.Errorf("grants %v add up to more than the rate", tokens)
	}
}
