package redisstore

import (
	"context"
	"fmt"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/store"
)

// refund gives units back to key under lim at now (-1: the server's TIME),
// a window's only to the window that ends at window (0: the one the key is
// in); see algo.Refund.
func (s *Store) refund(ctx context.Context, key string, lim *store.Limit, units, now, window int64) (algo.Decision, error) {
	c := scripts.refundCall(s.rateKey(key), limitOf(lim, algo.Never), units, now, s.margin, window)
	if err := s.call(ctx, c); err != nil {
		return algo.Decision{}, err
	}
	if len(c.Reply) != width {
		return algo.Decision{}, fmt.Errorf("%w: refund script replied %v", redisrun.ErrBadReply, c.Reply)
	}
	return decisionOf(c.Reply, c.Keys[0])
}
