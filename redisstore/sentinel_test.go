package redisstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/redistest"
	"github.com/sluice-go/sluice/internal/storetest"
	"github.com/sluice-go/sluice/redisstore"
)

// TestErrorsWrapSentinels: the Redis store's errors wrap the same sentinels
// as memstore's.
func TestErrorsWrapSentinels(t *testing.T) {
	c := redistest.Shared(t).Client()
	storetest.Errors(t, func(clock sluice.Clock) sluice.Store {
		opts := []redisstore.Option{redisstore.WithPrefix(fmt.Sprintf("sentinel:%d:", time.Now().UnixNano()))}
		if clock != nil {
			opts = append(opts, redisstore.WithCallerTime(clock.Now))
		}
		s := newGoRedis(t, c, opts...)
		t.Cleanup(func() { s.Close() })
		return s
	}, "")
}
