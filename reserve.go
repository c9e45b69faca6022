package sluice

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
)

// ErrNoReserve is returned by TakeReserving over a store that cannot
// decide with a reserve (a Store from outside this module). It wraps
// errors.ErrUnsupported.
var ErrNoReserve = fmt.Errorf("sluice: the store cannot keep reserved capacity: %w", errors.ErrUnsupported)

// TakeReserving is Take for a request of a class that must leave reserve
// units of lim for higher classes (reserved capacity: keep 20% of a rate
// for critical traffic). It passes only if cost + reserve units could pass
// now, and then spends only cost; refused, it spends nothing and its
// RetryAfter is the wait until this class could pass. Remaining is the
// class's (what a request of it could still take). Requests of every class
// spend from one budget: give them the same key and limit, the higher
// classes a smaller reserve (critical traffic 0, which is Take). A cost
// plus reserve over lim's capacity is an error (ErrCostExceedsCapacity).
func (l *Limiter) TakeReserving(ctx context.Context, key string, lim Limit, cost, reserve int64) (Result, error) {
	p, err := l.params(lim)
	if err == nil {
		err = storelink.Check(key, p, cost)
	}
	if err == nil {
		err = storelink.CheckReserve(&p, cost, reserve)
	}
	if err != nil {
		return Result{}, err
	}
	rs, ok := l.eng.(storelink.Reserver)
	if !ok {
		if l.eng == nil {
			return Result{}, errNoStore
		}
		return Result{}, ErrNoReserve
	}
	r, err := rs.TakeReserving(ctx, storelink.Request{Key: key, Params: p, Cost: cost, MaxDelay: algo.Never}, reserve)
	return Result(r), err
}
