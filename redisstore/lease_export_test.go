package redisstore

import (
	"context"

	"github.com/sluice-go/sluice/algo"
)

// LeaseAt runs the lease script on key at now (µs): the take's decision and
// the units it spent.
func LeaseAt(s *Store, ctx context.Context, key string, p algo.Params, cost, want, now int64) (algo.Decision, int64, error) {
	return s.leaseAt(ctx, key, &p, cost, want, now)
}
