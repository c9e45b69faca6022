package redisstore_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/redisstore"
)

// Over Sentinel (a failover client set up by SendOnceFailover), concurrent
// decisions admit exactly the burst, and after a failover the promoted
// replica carries on with what was spent before it (the writes replicated,
// WAIT): a key keeps its remaining units, a spent one stays spent.
func TestSentinel(t *testing.T) {
	t.Parallel() // beside the other parallel tests: no wall-clock assertion, servers and keys of its own
	s := redistest.Sentinel(t)
	c := s.NewClient(t, func(o *redis.FailoverOptions) {
		o.ContextTimeoutEnabled = true
		redisstore.SendOnce(o)
	})
	st := newGoRedis(t, c, redisstore.WithTimeout(2*time.Second))
	defer st.Close()
	ctx := context.Background()
	take := func(key string, burst, cost int64) (sluice.Result, error) {
		p := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: hour, Burst: burst}
		return take(ctx, st, storelink.Request{Key: key, Params: p, Cost: cost, MaxDelay: algo.Never})
	}
	const burst = 20
	var allowed atomic.Int32
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			r, err := take("hammered", burst, 1)
			if err != nil {
				t.Errorf("take: %v", err)
			}
			if r.Allowed {
				allowed.Add(1)
			}
		})
	}
	wg.Wait()
	if allowed.Load() != burst {
		t.Fatalf("64 concurrent takes of a burst of %d: %d allowed", burst, allowed.Load())
	}
	for range 6 {
		if r, err := take("kept", 10, 1); err != nil || !r.Allowed {
			t.Fatalf("take: %+v, %v", r, err)
		}
	}
	s.WaitReplicated(t)
	old := s.MasterAddr()
	s.Failover(t)
	// The client finds the new master after a failed call or two: look
	// (cost 0, nothing spent) until it answers.
	err := redistest.AfterFailover(func() error {
		_, err := take("kept", 10, 0)
		if err != nil && !errors.Is(err, sluice.ErrStoreUnavailable) {
			t.Fatalf("a look after the failover from %s to %s: %v", old, s.MasterAddr(), err)
		}
		return err
	})
	if err != nil {
		t.Fatalf("a look after the failover from %s to %s: %v", old, s.MasterAddr(), err)
	}
	left := 0
	for ; ; left++ {
		r, err := take("kept", 10, 1)
		if err != nil {
			t.Fatalf("take after the failover: %v", err)
		}
		if !r.Allowed {
			break
		}
	}
	if left != 4 {
		t.Errorf("after 6 of 10 taken and a failover: %d left, want 4", left)
	}
	if r, err := take("hammered", burst, 1); err != nil || r.Allowed {
		t.Errorf("the spent key after the failover: %+v, %v; want refused", r, err)
	}
}
