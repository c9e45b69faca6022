package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/redisstore"
)

// farClient delays every round trip to a real Redis, as a distant server
// would, and records what each round trip carried: how many decisions, and
// whether another round trip was on its way when it started.
type farClient struct {
	redisrun.Client
	delay     time.Duration
	inflight  atomic.Int32
	runs      atomic.Int64
	decisions atomic.Int64
	// overlapped counts round trips that started while another was on its
	// way; small those of them that carried fewer than ShareBatch decisions.
	overlapped, small atomic.Int64
}

// Group passes on the real client's routing (see redisrun.Router).
func (c *farClient) Group(key string) (uint64, bool) {
	return c.Client.(redisrun.Router).Group(key)
}

func (c *farClient) Run(ctx context.Context, calls []*redisrun.Call) {
	n := 0
	for _, call := range calls {
		n += len(call.Keys)
	}
	if c.inflight.Add(1) > 1 {
		c.overlapped.Add(1)
		if n < redisrun.ShareBatch {
			c.small.Add(1)
		}
	}
	c.runs.Add(1)
	c.decisions.Add(int64(n))
	time.Sleep(c.delay)
	c.Client.Run(ctx, calls)
	c.inflight.Add(-1)
}

// TestGatherWhileInFlight: under load a batched store sends the next
// pipeline when the one on its way comes back, with every call that came
// meanwhile, and not a few calls at a time on the other pipelines; so a
// round trip is shared by many calls. No decision is lost or doubled.
func TestGatherWhileInFlight(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	fc := &farClient{Client: redisrun.GoRedis(srv.Client()), delay: 2 * time.Millisecond}
	st := newStore(t, fc, redisstore.WithPrefix("gather:"), redisstore.WithBatching(4))
	defer st.Close()
	const callers, each = 64, 20
	lim := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: hour, Burst: each}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for g := range callers {
		wg.Go(func() {
			for range each {
				res, err := take(ctx, st, storelink.Request{Key: fmt.Sprint(g), Params: lim, Cost: 1, MaxDelay: algo.Never})
				if err == nil && !res.Allowed {
					err = fmt.Errorf("caller %d refused with %d left", g, res.Remaining)
				}
				if err != nil {
					errs <- err
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
	for g := range callers {
		res, err := take(ctx, st, storelink.Request{Key: fmt.Sprint(g), Params: lim, Cost: 0, MaxDelay: algo.Never})
		if err != nil || res.Remaining != 0 {
			t.Fatalf("caller %d's key: %+v, %v; want its %d units spent", g, res, err, each)
		}
	}
	runs, decisions := fc.runs.Load(), fc.decisions.Load()
	t.Logf("%d decisions in %d round trips (%.1f each); %d round trips overlapped another", decisions, runs, float64(decisions)/float64(runs), fc.overlapped.Load())
	if n := fc.small.Load(); n > 0 {
		t.Errorf("%d round trips of fewer than %d decisions went while another was on its way", n, redisrun.ShareBatch)
	}
	if decisions < 8*runs && testenv.Timing(t, "at least 8 decisions a round trip") {
		t.Errorf("%d decisions in %d round trips: want at least 8 a round trip from %d callers", decisions, runs, callers)
	}
}
