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
	conformance "github.com/sluice-go/sluice/store/storetest"
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

// TestConformance runs the public conformance suite, the one an outside
// store runs, on a standalone server and on a cluster.
func TestConformance(t *testing.T) {
	t.Parallel() // as TestSuite: servers and keys of its own
	for name, c := range map[string]redis.UniversalClient{"standalone": redistest.Shared(t).Client(), "cluster": redistest.SharedCluster(t).Client()} {
		t.Run(name, func(t *testing.T) {
			conformance.Run(t, func(t *testing.T) store.Store {
				s := newGoRedis(t, c, redisstore.WithPrefix(fmt.Sprintf("conform:%d:", time.Now().UnixNano())))
				t.Cleanup(func() { s.Close() })
				return s
			})
		})
	}
}
