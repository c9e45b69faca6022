package redisstore

import (
	"fmt"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/store"
)

// check returns why op is not one a sluice.Limiter would make (an error
// wrapping sluice's ErrInvalidLimit, ErrInvalidCost,
// ErrCostExceedsCapacity, ErrEmptyKey, ErrDuplicateKey or ErrNoRefund), or
// nil. Run is
// the store's one door, and a caller other than a Limiter may hand it
// anything: an op it cannot check would reach a script with values the
// steps are not made for.
func check(op *store.Op) error {
	switch op.Kind {
	case store.Take:
		if len(op.Parts) == 0 {
			p := storelink.AlgoParams(&op.Limit)
			return checkTake(op.Key, &p, op.Cost, op.Headroom, op.MaxDelay)
		}
		return checkParts(op.Parts, op.MaxDelay)
	case store.Refund:
		p := storelink.AlgoParams(&op.Limit)
		if err := p.Validate(); err != nil {
			return err
		}
		return storelink.CheckRefund(op.Key, &p, op.Cost)
	case store.Charge:
		if len(op.Parts) == 0 {
			return checkCharge(op.Key, &op.Limit, op.Cost)
		}
		for i := range op.Parts {
			pt := &op.Parts[i]
			if err := checkCharge(pt.Key, &pt.Limit, pt.Cost); err != nil {
				return storelink.PartError(i, pt.Key, err)
			}
		}
		return storelink.CheckComposite(op.Parts, func(p *store.Part) string { return p.Key })
	case store.Reset:
		if op.Key == "" {
			return storelink.ErrEmptyKey
		}
	case store.Acquire, store.Release, store.Extend:
		return checkHold(op)
	}
	return nil
}

// checkTake checks a take of cost units of key under p, leaving headroom
// units, a leaky bucket's delay bounded by maxDelay.
func checkTake(key string, p *algo.Params, cost, headroom, maxDelay int64) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if err := storelink.Check(key, p, cost); err != nil {
		return err
	}
	if maxDelay < 0 {
		return fmt.Errorf("%w: max delay %dµs is negative", storelink.ErrInvalidLimit, maxDelay)
	}
	if headroom != 0 {
		return storelink.CheckHeadroom(p, cost, headroom)
	}
	return nil
}

// checkCharge checks a charge of units to key under l: a valid limit of an
// algorithm that can carry a debt, units not negative.
func checkCharge(key string, l *store.Limit, units int64) error {
	p := storelink.AlgoParams(l)
	if err := p.Validate(); err != nil {
		return err
	}
	return storelink.CheckCharge(key, &p, units)
}

// checkParts checks a composite's parts: each a take, their keys distinct.
func checkParts(parts []store.Part, maxDelay int64) error {
	for i := range parts {
		pt := &parts[i]
		p := storelink.AlgoParams(&pt.Limit)
		if err := checkTake(pt.Key, &p, pt.Cost, pt.Headroom, maxDelay); err != nil {
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
	if op.Kind == store.Acquire && len(op.Parts) > 0 {
		return checkParts(op.Parts, op.MaxDelay)
	}
	return nil
}
