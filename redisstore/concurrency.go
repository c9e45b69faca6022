package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/internal/storelink"
)

// leaseScript runs one lease operation (scripts/concurrency_main.lua) over
// the leases' twin of algo/concurrency.go (scripts/concurrency.lua), with
// the helpers, prelude and guard every decision script has.
var leaseScript = redisrun.NewScript(redisrun.LuaHelpers + mustRead("prelude.lua") + mustRead("guard.lua") +
	mustRead("concurrency.lua") + mustRead("concurrency_main.lua"))

// leaseIDInUse is the first value of the lease script's reply when an
// acquire names a lease id still held (algo.ErrLeaseID).
const leaseIDInUse = -2

var _ storelink.Leaser = (*engine)(nil)

// LeaseKey returns the Redis key that holds the leases of key's concurrency
// limit: the store's prefix, "lease:", then key, so that a rate limit and a
// concurrency limit of one key are two states (and, with a {hash tag} in
// key, in one cluster slot).
func (s *Store) LeaseKey(key string) string { return s.prefix + "lease:" + key }

// Lease runs op at the server's time (or the caller's, WithClock), under
// the store's failure policy: an acquire Redis cannot answer is FailOpen's
// grant (held nowhere) or FailLocal's lease in the local store; a release
// or extension of such a lease goes where it is. A release or extension of
// a lease held in Redis that cannot reach it is an error: the lease comes
// back by itself at the end of its lifetime.
func (e *engine) Lease(ctx context.Context, op storelink.LeaseOp) (storelink.LeaseResult, error) {
	s := (*Store)(e)
	if op.Degraded {
		return s.degradedLease(ctx, op)
	}
	now, err := s.clock()
	if err != nil {
		return storelink.LeaseResult{}, err
	}
	r, err := s.lease(ctx, &op, now)
	if err == nil || op.Op != algo.OpAcquire || !errors.Is(err, sluice.ErrStoreUnavailable) {
		return r, err
	}
	switch s.policy {
	case FailOpen:
		r = storelink.LeaseResult{Degraded: true}
		r.Decision.Allowed = true
		return r, nil
	case FailLocal:
		return s.degradedLease(ctx, op)
	}
	return r, err
}

// LeaseAt runs op at now (µs since the epoch), with no failure policy.
func (e *engine) LeaseAt(ctx context.Context, op storelink.LeaseOp, now int64) (storelink.LeaseResult, error) {
	if err := algo.CheckTime(now); err != nil {
		return storelink.LeaseResult{}, err // wraps sluice.ErrInvalidTime; a negative now would read as TIME
	}
	return (*Store)(e).lease(ctx, &op, now)
}

// degradedLease runs op where the failure policy holds its leases: in the
// local store under FailLocal; under FailOpen nowhere (allowed, nothing
// held).
func (s *Store) degradedLease(ctx context.Context, op storelink.LeaseOp) (storelink.LeaseResult, error) {
	local, ok := s.local.(storelink.Leaser)
	if s.policy != FailLocal || !ok {
		r := storelink.LeaseResult{Degraded: true}
		r.Decision.Allowed = op.Op == algo.OpAcquire
		return r, nil
	}
	op.Degraded = false
	r, err := local.Lease(ctx, op)
	r.Degraded = true
	return r, err
}

// lease runs op at now (-1: the server's TIME) in one script call, sent
// through the store's runner (batched with the calls around it), and sorts
// its error as a decision's.
func (s *Store) lease(ctx context.Context, op *storelink.LeaseOp, now int64) (storelink.LeaseResult, error) {
	key := s.LeaseKey(op.Key)
	c := &redisrun.Call{
		Script: leaseScript,
		Keys:   []string{key},
		Args:   []any{op.Op, op.Limit.Limit, op.Limit.Lifetime, op.Units, op.ID, now, s.margin},
	}
	if err := s.call(ctx, c); err != nil {
		return storelink.LeaseResult{}, err
	}
	r := c.Reply
	switch {
	case len(r) != width:
		return storelink.LeaseResult{}, fmt.Errorf("%w: lease script replied %v", redisrun.ErrBadReply, r)
	case r[0] == leaseIDInUse:
		return storelink.LeaseResult{}, algo.ErrLeaseID
	case r[0] < 0:
		return storelink.LeaseResult{}, failure(r[1], key)
	}
	return storelink.LeaseResult{
		Decision: algo.Decision{Allowed: r[0] == 1, Remaining: r[1], RetryAfter: r[2], ResetAfter: r[3]},
		Expiry:   r[4],
	}, nil
}
