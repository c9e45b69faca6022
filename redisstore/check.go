package redisstore

import (
	"fmt"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/store"
)

// check returns why op is not one a sluice.Limiter would make (an error
// wrapping sluice's ErrInvalidLimit, ErrInvalidCost,
// ErrCostExceedsCapacity, ErrEmptyKey or ErrDuplicateKey), or nil. Run is
// the store's one door, and a caller other than a Limiter may hand it
// anything: an op it cannot check would reach a script with values the
// steps are not made for.
func check(op *store.Op) error {
	if op.MaxDelay < 0 {
		return fmt.Errorf("%w: max delay %dµs is negative", storelink.ErrInvalidLimit, op.MaxDelay)
	}
	switch op.Kind {
	case store.Take:
		if len(op.Parts) > 0 {
			return checkParts(op.Parts)
		}
		return checkTake(op.Key, &op.Limit, op.Cost, op.Headroom)
	case store.Refund:
		p := storelink.AlgoParams(&op.Limit)
		if err := p.Validate(); err != nil {
			return err
		}
		return storelink.CheckRefund(op.Key, &p, op.Cost)
	case store.Reset:
		if op.Key == "" {
			return storelink.ErrEmptyKey
		}
	case store.Acquire, store.Release, store.Extend:
		return checkHold(op)
	}
	return nil
}

// checkTake checks a take of cost units of key under lim, leaving
// headroom units.
func checkTake(key string, lim *store.Limit, cost, headroom int64) error {
	p := storelink.AlgoParams(lim)
	if err := p.Validate(); err != nil {
		return err
	}
	if err := storelink.Check(key, p, cost); err != nil {
		return err
	}
	if headroom != 0 {
		return storelink.CheckReserve(&p, cost, headroom)
	}
	return nil
}

// checkParts checks a composite's parts: each a take, their keys distinct.
func checkParts(parts []store.Part) error {
	for i := range parts {
		pt := &parts[i]
		if err := checkTake(pt.Key, &pt.Limit, pt.Cost, pt.Headroom); err != nil {
			return storelink.PartError(i, pt.Key, err)
		}
	}
	return storelink.CheckComposite(parts, func(p *store.Part) string { return p.Key })
}

// checkHold checks an Acquire (and its parts), a Release or an Extend.
func checkHold(op *store.Op) error {
	c := algo.Concurrency(op.Concurrency)
	if err := c.Validate(); err != nil {
		return err
	}
	if op.ID < 1 || op.ID > algo.MaxHoldID {
		return fmt.Errorf("%w: lease id %d outside [1, 2^53)", storelink.ErrInvalidCost, op.ID)
	}
	if err := storelink.CheckUnits(op.Key, c.Limit, op.Cost); err != nil {
		return err
	}
	if len(op.Parts) > 0 {
		return checkParts(op.Parts)
	}
	return nil
}
