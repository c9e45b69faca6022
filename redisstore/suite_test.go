package redisstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/storetest"
	"github.com/sluice-go/sluice/redisstore"
	"github.com/sluice-go/sluice/store"
)

// TestSuite runs the checks every store must pass, on a standalone server
// and on a cluster.
func TestSuite(t *testing.T) {
	t.Parallel() // beside the other parallel tests: no wall-clock assertion, servers and keys of its own
	for name, c := range map[string]redis.UniversalClient{"standalone": redistest.Shared(t).Client(), "cluster": redistest.SharedCluster(t).Client()} {
		t.Run(name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T, clock store.Clock) store.Store {
				opts := []redisstore.Option{redisstore.WithPrefix(fmt.Sprintf("suite:%d:", time.Now().UnixNano()))}
				if clock != nil {
					opts = append(opts, redisstore.WithClock(clock))
				}
				s := newGoRedis(t, c, opts...)
				t.Cleanup(func() { s.Close() })
				return s
			})
		})
	}
}
