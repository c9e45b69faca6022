package redisstore

import (
	"context"
	"fmt"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/internal/storelink"
)

// Refund gives req.Cost units back to req.Key (see algo.Refund). It applies
// no failure policy: a refund that cannot reach Redis is an error.
func (s *Store) Refund(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	r, window, err := storelink.CheckedRefund(&req)
	if err != nil {
		return sluice.Result{}, err
	}
	res, err := s.refundNow(ctx, r, window)
	return sluice.Result(res), err
}

// refundNow is Refund on a checked request (by Refund, or by the Limiter
// before it calls the engine), giving a window's units back only to the
// window that ends at window (0: any).
func (s *Store) refundNow(ctx context.Context, req storelink.Request, window int64) (storelink.Result, error) {
	now, err := s.clock()
	if err != nil {
		return storelink.Result{}, err
	}
	d, err := s.refund(ctx, req, now, window)
	return storelink.ResultOf(&d), err
}

func (s *Store) refund(ctx context.Context, req storelink.Request, now, window int64) (algo.Decision, error) {
	c := scripts.refundCall(s.prefix+req.Key, limitOf(&req.Params, algo.Never), req.Cost, now, s.margin, window)
	if err := s.call(ctx, c); err != nil {
		return algo.Decision{}, err
	}
	if len(c.Reply) != width {
		return algo.Decision{}, fmt.Errorf("%w: refund script replied %v", redisrun.ErrBadReply, c.Reply)
	}
	return decisionOf(c.Reply, c.Keys[0])
}

// Reset forgets key. With WithLeases it drops this process's slices of
// key, giving nothing back; other processes' slices end within their life.
func (s *Store) Reset(ctx context.Context, key string) error {
	if key == "" {
		return sluice.ErrEmptyKey
	}
	if s.leases != nil {
		s.leases.forget(key)
	}
	return s.call(ctx, scripts.resetCall(s.prefix+key))
}
