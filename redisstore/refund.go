package redisstore

import (
	"context"
	"fmt"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/internal/storeapi"
)

// Refund gives req.Cost units back to req.Key (see algo.Refund). It applies
// no failure policy: a refund that cannot reach Redis is an error.
func (s *Store) Refund(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	r, err := storeapi.RefundRequest(&req)
	if err != nil {
		return sluice.Result{}, err
	}
	return s.refundNow(ctx, r, req.Window)
}

// refundNow is Refund on a request in core's form, checked (by Refund, or
// by the Limiter before it calls the engine), giving a window's units back
// only to the window that ends at window (0: any).
func (s *Store) refundNow(ctx context.Context, req core.Request, window int64) (sluice.Result, error) {
	now, err := s.clock()
	if err != nil {
		return sluice.Result{}, err
	}
	d, err := s.refund(ctx, req, now, window)
	return storeapi.Result(&d), err
}

func (s *Store) refund(ctx context.Context, req core.Request, now, window int64) (algo.Decision, error) {
	c := scripts.RefundCall(s.prefix+req.Key, redisrun.LimitOf(&req.Params, algo.Never), req.Cost, now, s.margin, window)
	if err := s.call(ctx, c); err != nil {
		return algo.Decision{}, err
	}
	if len(c.Reply) != redisrun.Width {
		return algo.Decision{}, fmt.Errorf("%w: refund script replied %v", redisrun.ErrBadReply, c.Reply)
	}
	return decisionOf(c.Reply, c.Keys[0])
}

// Reset forgets key.
func (s *Store) Reset(ctx context.Context, key string) error {
	if key == "" {
		return sluice.ErrEmptyKey
	}
	return s.call(ctx, scripts.ResetCall(s.prefix+key))
}
