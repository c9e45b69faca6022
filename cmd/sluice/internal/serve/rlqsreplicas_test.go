package serve

import (
	"fmt"

	"testing"
	"time"

	"github.com/sluice-go/sluice/cmd/sluice/internal/rlqs"

	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/redisstore"
	"github.com/sluice-go/sluice/store"
)

// redisStores returns a maker of stores over one Redis, keys of their own
// for t.
func redisStores(t *testing.T) func() store.Store {
	c := redistest.Standalone(t).Client()
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
// another each phase, one replica killed and restarted): no window over
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
			hundredClients(t, hundred{budgets: budgets, phases: phases, replicas: n, store: redisStores(t), moves: n > 1, kill: n > 1})
		})
	}
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
