package redisstore

import (
	"context"
	"fmt"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/store"
)

// runCharge decides a Charge, in Redis at op's At or the store's time
// (algo.Charge in the scripts): a charge of one key as a take is decided,
// batched with the decisions around it (merged into their multi-decision
// script); a composite's in one script (charge.lua), or part by part where
// no script may name every key. With WithSlices this process first gives
// back its slices of the keys charged, so that the charge finds every unit
// the process has not admitted and the process admits nothing after it
// from units spent before (SEMANTICS.md, "Slices"). No failure policy
// answers a charge: one that cannot reach Redis is an error, as a
// refund's is.
func (s *Store) runCharge(ctx context.Context, op *store.Op) {
	now, err := s.at(op)
	if err != nil {
		op.Err = err
		return
	}
	if s.slices != nil {
		if len(op.Parts) == 0 {
			s.slices.release(op.Key)
		}
		for i := range op.Parts {
			s.slices.release(op.Parts[i].Key)
		}
	}
	var d algo.Decision
	switch {
	case len(op.Parts) == 0:
		d, err = s.chargeOne(ctx, op.Key, &op.Limit, op.Cost, now)
	case s.together(op.Parts):
		d, err = s.chargeAll(ctx, op.Parts, now)
	default:
		d, err = s.chargeInTurn(ctx, op.Parts, now)
	}
	op.Decision, op.Err = storelink.DecisionOf(&d), err
}

// chargeOne charges units to key under lim at now (-1: the server's TIME).
func (s *Store) chargeOne(ctx context.Context, key string, lim *store.Limit, units, now int64) (algo.Decision, error) {
	return s.decide(ctx, key, chargeLimitOf(lim), chargeUnits(lim, units), now)
}

// chargeAll charges parts, whose keys one script may name, together in
// one call at now (-1: the server's TIME), writes each part's decision
// into it, and returns their fold.
func (s *Store) chargeAll(ctx context.Context, parts []store.Part, now int64) (algo.Decision, error) {
	keys := make([]string, len(parts))
	for i := range parts {
		keys[i] = s.rateKey(parts[i].Key)
	}
	c := scripts.chargeCall(parts, keys, now, s.margin)
	if err := s.call(ctx, c); err != nil {
		return algo.Decision{}, err
	}
	if len(c.Reply) != width*len(parts) {
		return algo.Decision{}, fmt.Errorf("%w: charge script replied %v", redisrun.ErrBadReply, c.Reply)
	}
	return foldParts(parts, c.Reply, keys)
}

// chargeInTurn charges parts whose keys no one script may name (two
// Cluster slots, two Ring shards) one at a time, as a composite take
// across slots is taken (docs/stores.md, "Composites across slots"), and
// writes each part's decision into it; a charge refuses nothing, so
// nothing is given back. An error stops it: the parts charged before stay
// charged.
func (s *Store) chargeInTurn(ctx context.Context, parts []store.Part, now int64) (algo.Decision, error) {
	var acc algo.Decision
	for i := range parts {
		pt := &parts[i]
		d, err := s.chargeOne(ctx, pt.Key, &pt.Limit, pt.Cost, now)
		if err != nil {
			return algo.Decision{}, err
		}
		pt.Decision = storelink.DecisionOf(&d)
		if i == 0 {
			acc = d
		} else {
			algo.Combine(&acc, d)
		}
	}
	return acc, nil
}
