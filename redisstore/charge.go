package redisstore

import (
	"context"
	"fmt"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/store"
)

// runCharge decides a Charge of one key or of a composite's parts, in
// Redis at op's At or the store's time (algo.Charge, in charge.lua: one
// script). With WithSlices this process first gives back its slices of the
// keys charged, so that the charge finds every unit the process has not
// admitted and the process admits nothing after it from units spent before
// (SEMANTICS.md, "Slices"). No failure policy answers a charge: one that
// cannot reach Redis is an error, as a refund's is.
func (s *Store) runCharge(ctx context.Context, op *store.Op) {
	now, err := s.at(op)
	if err != nil {
		op.Err = err
		return
	}
	parts := op.Parts
	if len(parts) == 0 {
		parts = []store.Part{{Key: op.Key, Limit: op.Limit, Cost: op.Cost}}
	}
	if s.slices != nil {
		for i := range parts {
			s.slices.release(parts[i].Key)
		}
	}
	var d algo.Decision
	if s.together(parts) {
		d, err = s.charge(ctx, parts, now)
	} else {
		d, err = s.chargeInTurn(ctx, parts, now)
	}
	op.Decision, op.Err = storelink.DecisionOf(&d), err
}

// charge charges parts, whose keys one script may name, in one call at now
// (-1: the server's TIME), writes each part's decision into it, and
// returns their fold.
func (s *Store) charge(ctx context.Context, parts []store.Part, now int64) (algo.Decision, error) {
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
// across slots is taken (docs/stores.md, "Composites across slots"); a
// charge refuses nothing, so nothing is given back. An error stops it:
// the parts charged before stay charged.
func (s *Store) chargeInTurn(ctx context.Context, parts []store.Part, now int64) (algo.Decision, error) {
	var acc algo.Decision
	for i := range parts {
		d, err := s.charge(ctx, parts[i:i+1], now)
		if err != nil {
			return algo.Decision{}, err
		}
		if i == 0 {
			acc = d
		} else {
			algo.Combine(&acc, d)
		}
	}
	return acc, nil
}
