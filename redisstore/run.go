package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/store"
)

// Run decides every op of ops (see store.Store), each at its At or, when
// that is 0, at the server's TIME (the caller's clock with WithClock). The
// failure policy answers a Take or an Acquire that Redis cannot (flagged
// Degraded); a Refund, a Charge, a Reset, and a Release or an Extend of a
// hold kept in Redis that cannot reach it have the error. An op with an At is decided
// in Redis, never from WithSlices's slices, which live on the store's clock.
//
// The ops of one call are sent together, sharing pipelines as concurrent
// calls do, but for ops that name a key an earlier op of the call names:
// those wait for it, so that every key sees its ops in order.
func (s *Store) Run(ctx context.Context, ops []store.Op) {
	if len(ops) == 1 {
		s.run(ctx, &ops[0])
		return
	}
	for len(ops) > 0 {
		n := independent(ops)
		s.runTogether(ctx, ops[:n])
		ops = ops[n:]
	}
}

// maxTogether bounds the goroutines one Run decides on at once: about a
// pipeline's worth of calls.
const maxTogether = 64

// runTogether decides ops, whose keys are all distinct, at once: each on a
// goroutine, so that their calls share the batcher's pipelines. The
// goroutines decide copies of ops, on the heap, and their answers are
// written back: ops, which may be on the caller's stack, never leave it.
func (s *Store) runTogether(ctx context.Context, ops []store.Op) {
	if len(ops) == 1 {
		s.run(ctx, &ops[0])
		return
	}
	cp := make([]store.Op, len(ops))
	copy(cp, ops)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(len(cp), maxTogether) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(cp)); i = next.Add(1) - 1 {
				s.run(ctx, &cp[i])
			}
		})
	}
	wg.Wait()
	for i := range ops {
		o, c := &ops[i], &cp[i]
		o.Decision, o.Expiry, o.Err = c.Decision, c.Expiry, c.Err
	}
}

// independent returns how many of ops, from the first, name no key twice
// (an op's key and its parts' keys): those may be decided in any order.
func independent(ops []store.Op) int {
	seen := make(map[string]struct{}, 2*len(ops))
	for i := range ops {
		op := &ops[i]
		if _, ok := seen[op.Key]; ok && op.Key != "" {
			return max(i, 1)
		}
		for j := range op.Parts {
			if _, ok := seen[op.Parts[j].Key]; ok {
				return max(i, 1)
			}
		}
		if op.Key != "" {
			seen[op.Key] = struct{}{}
		}
		for j := range op.Parts {
			seen[op.Parts[j].Key] = struct{}{}
		}
	}
	return len(ops)
}

// run decides one op, writing its answer into it.
func (s *Store) run(ctx context.Context, op *store.Op) {
	if op.Kind == store.Take && len(op.Parts) == 0 {
		s.runTake(ctx, op) // the hot path: it checks op itself
		return
	}
	if err := check(op); err != nil {
		op.Err = err
		return
	}
	switch op.Kind {
	case store.Take:
		s.runTakeAll(ctx, op)
	case store.Refund:
		s.runRefund(ctx, op)
	case store.Reset:
		s.runReset(ctx, op)
	case store.Acquire, store.Release, store.Extend:
		s.runHold(ctx, op)
	case store.Charge:
		s.runCharge(ctx, op)
	default:
		op.Err = fmt.Errorf("redisstore: operation %d: %w", op.Kind, errors.ErrUnsupported)
	}
}

// runTake decides a Take of one key: from the slices (WithSlices) when
// the key is hot, else in Redis, with or without headroom.
func (s *Store) runTake(ctx context.Context, op *store.Op) {
	p := storelink.AlgoParams(&op.Limit)
	var d algo.Decision
	var err error
	if s.slices != nil && op.At == 0 && op.Headroom == 0 && op.Cost > 0 && p.Debt == 0 && algo.Sliceable(p.Kind) {
		d, err = s.slices.take(ctx, op.Key, &p, op.Cost, op.MaxDelay) // checks op where it must
	} else if err = checkTake(op.Key, &p, op.Cost, op.Headroom, op.MaxDelay); err == nil {
		var now int64
		if now, err = s.at(op); err == nil {
			d, err = s.decidePart(ctx, op.Key, &op.Limit, op.Cost, op.Headroom, op.MaxDelay, now)
		}
	}
	s.answer(ctx, op, &d, err)
}

// runTakeAll decides a composite Take: from its parts' slices when they
// hold every part's cost, else in Redis.
func (s *Store) runTakeAll(ctx context.Context, op *store.Op) {
	var d algo.Decision
	ok := false
	if s.slices != nil && op.At == 0 {
		d, ok = s.slices.takeAll(op.Parts)
	}
	var err error
	if !ok {
		var now int64
		if now, err = s.at(op); err == nil {
			d, err = s.takeAll(ctx, op.Parts, op.MaxDelay, now, op.SummaryOnly)
		}
	}
	s.answer(ctx, op, &d, err)
}

// answer writes into op its decision d, or what err leaves: the failure
// policy's answer to an outage, else the error.
func (s *Store) answer(ctx context.Context, op *store.Op, d *algo.Decision, err error) {
	if err != nil {
		s.fallBack(ctx, op, err)
		return
	}
	op.Decision = storelink.DecisionOf(d)
}

// fallBack answers op, a Take or an Acquire that failed with err, by the
// failure policy when err is an outage (store.ErrStoreUnavailable):
// FailOpen allows it, holding nothing; FailLocal decides it in the local
// store. Otherwise err is op's error.
func (s *Store) fallBack(ctx context.Context, op *store.Op, err error) {
	if s.policy == FailClosed || !errors.Is(err, store.ErrStoreUnavailable) {
		op.Err = err
		return
	}
	if s.policy == FailLocal {
		s.runLocal(ctx, op)
		return
	}
	op.Decision, op.Expiry = store.Decision{Allowed: true, Degraded: true}, 0
	for i := range op.Parts {
		op.Parts[i].Decision = store.Decision{Allowed: true, Degraded: true}
	}
}

// runLocal decides op in FailLocal's memstore, at op's At (or the store's
// clock), flagged Degraded.
func (s *Store) runLocal(ctx context.Context, op *store.Op) {
	one := [1]store.Op{*op}
	one[0].Degraded = false
	s.local.Run(ctx, one[:]) // the parts' answers land in op's parts
	op.Decision, op.Expiry, op.Err = one[0].Decision, one[0].Expiry, one[0].Err
	op.Decision.Degraded = true
	for i := range op.Parts {
		op.Parts[i].Decision.Degraded = true
	}
}

// runRefund gives units back in Redis (never to the slices), with no
// failure policy: a refund that cannot reach Redis is an error.
func (s *Store) runRefund(ctx context.Context, op *store.Op) {
	now, err := s.at(op)
	if err == nil {
		var d algo.Decision
		d, err = s.refund(ctx, op.Key, &op.Limit, op.Cost, now, op.Window)
		op.Decision = storelink.DecisionOf(&d)
	}
	op.Err = err
}

// runReset forgets op's key: its rate state and its holds in Redis (in one
// call where one script may name both keys, else one after the other) and,
// with WithSlices, this process's slices of it (given nothing back; other
// processes' slices end within their life).
func (s *Store) runReset(ctx context.Context, op *store.Op) {
	if s.slices != nil {
		s.slices.forget(op.Key)
	}
	rate, holds := s.rateKey(op.Key), s.holdKey(op.Key)
	g, ok := s.group(rate)
	if h, ok2 := s.group(holds); ok && ok2 && g == h {
		op.Err = s.call(ctx, scripts.resetCall(rate, holds))
		return
	}
	if op.Err = s.call(ctx, scripts.resetCall(rate)); op.Err == nil {
		op.Err = s.call(ctx, scripts.resetCall(holds))
	}
}
