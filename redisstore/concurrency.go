package redisstore

import (
	"context"
	"fmt"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/store"
)

// holdScript runs one hold operation (scripts/concurrency_main.lua) over
// the holds' twin of internal/algo/concurrency.go (scripts/concurrency.lua), with
// the helpers, prelude and guard every decision script has.
var holdScript = redisrun.NewScript(redisrun.LuaHelpers + mustRead("prelude.lua") + mustRead("guard.lua") +
	mustRead("concurrency.lua") + mustRead("concurrency_main.lua"))

// holdIDInUse is the first value of the hold script's reply when an
// acquire names a hold id still held (algo.ErrHoldID).
const holdIDInUse = -2

// A hold is one hold operation as the scripts take it: op is
// algo.OpAcquire, OpRelease or OpExtend.
type hold struct {
	op    int64
	key   string
	c     algo.Concurrency
	units int64
	id    int64
}

// holdOf is op's hold operation.
func holdOf(op *store.Op) hold {
	return hold{op: storelink.HoldOpOf(op.Kind), key: op.Key, c: algo.Concurrency(op.Concurrency), units: op.Cost, id: op.ID}
}

// holdKey is the Redis key that keeps the holds of key's concurrency
// limit, a sorted set (scripts/concurrency.lua): the store's prefix,
// "hold:", then key, so that a rate limit and a concurrency limit of one
// key are two states (and, with a {hash tag} in key, in one cluster slot).
func (s *Store) holdKey(key string) string { return s.prefix + "hold:" + key }

// runHold decides an Acquire (with its parts, if any: its answer is then
// the hold's folded with the parts'), a Release or an Extend. The failure
// policy answers an acquire Redis cannot: FailOpen's
// grant holds nothing anywhere, FailLocal's holds in the local store, and
// a release or extension of such a hold (op.Degraded) goes where it is. A
// release or extension of a hold kept in Redis that cannot reach it is an
// error: the hold comes back by itself at the end of its lifetime.
func (s *Store) runHold(ctx context.Context, op *store.Op) {
	if op.Degraded {
		s.degradedHold(ctx, op)
		return
	}
	now, err := s.at(op)
	if err != nil {
		op.Err = err
		return
	}
	h := holdOf(op)
	var d algo.Decision
	var exp int64
	if op.Kind == store.Acquire && len(op.Parts) > 0 {
		if d, exp, err = s.holdAll(ctx, &h, op.Parts, op.MaxDelay, now); err == nil {
			for i := range op.Parts {
				algo.Combine(&d, storelink.AlgoDecision(&op.Parts[i].Decision))
			}
		}
	} else {
		d, exp, err = s.hold(ctx, &h, now)
	}
	if err != nil && op.Kind != store.Acquire {
		op.Err = err
		return
	}
	s.answer(ctx, op, &d, err)
	if err == nil {
		op.Expiry = exp
	}
}

// degradedHold runs op, the release or extension of a hold the failure
// policy granted, where the policy keeps it: in the local store under
// FailLocal; under FailOpen nowhere (not held).
func (s *Store) degradedHold(ctx context.Context, op *store.Op) {
	if s.local == nil {
		op.Decision = store.Decision{Degraded: true}
		return
	}
	s.runLocal(ctx, op)
}

// hold runs h at now (-1: the server's TIME) in one script call, sent
// through the store's runner (batched with the calls around it), and sorts
// its error as a decision's: its decision and the hold's expiry.
func (s *Store) hold(ctx context.Context, h *hold, now int64) (algo.Decision, int64, error) {
	key := s.holdKey(h.key)
	c := &redisrun.Call{
		Script: holdScript,
		Keys:   []string{key},
		Args:   []any{h.op, h.c.Limit, h.c.Lifetime, h.units, h.id, now, s.margin},
	}
	if err := s.call(ctx, c); err != nil {
		if h.op == algo.OpAcquire && h.units > 0 && mayHold(err) {
			s.giveBackHold(h)
		}
		return algo.Decision{}, 0, err
	}
	r := c.Reply
	switch {
	case len(r) != width:
		return algo.Decision{}, 0, fmt.Errorf("%w: hold script replied %v", redisrun.ErrBadReply, r)
	case r[0] == holdIDInUse:
		return algo.Decision{}, 0, algo.ErrHoldID
	case r[0] < 0:
		return algo.Decision{}, 0, holdFailure(r[1], key)
	}
	return holdDecision(r), r[4], nil
}

// holdDecision reads the decision of a hold script's reply r.
func holdDecision(r []int64) algo.Decision {
	return algo.Decision{Allowed: r[0] == 1, Remaining: r[1], RetryAfter: r[2], ResetAfter: r[3]}
}

// holdFailure is the error of a hold operation on key that the script
// reports with code: failure's, but for a key that is not a set of holds
// sluice wrote, which is said as a hold key's.
func holdFailure(code int64, key string) error {
	switch code {
	case codeForeignType:
		return fmt.Errorf("%w: %q is not a sorted set (WRONGTYPE), as sluice keeps a key's holds; a string there may be another program's value, a rate limit's state, or the holds of an earlier build of sluice, which kept them in one string that this one does not read: delete it, or give the store a prefix of its own (WithPrefix)", ErrForeignKey, key)
	case codeForeignData:
		return fmt.Errorf("%w: %q holds a sorted set that sluice did not write: delete it, or give the store a prefix of its own (WithPrefix)", ErrForeignKey, key)
	}
	return failure(code, key)
}

// holdAllFailure is the error of a hold composite on keys (the hold's,
// then the parts') that the script reports with code: any of them may be
// the key that failed.
func holdAllFailure(code int64, keys []string) error {
	if code == codeForeignType || code == codeForeignData {
		return fmt.Errorf("%w: one of %q is not what sluice keeps there (the hold key a sorted set of holds, each part's key a string of its state): delete it, or give the store a prefix of its own (WithPrefix)", ErrForeignKey, keys)
	}
	return failure(code, keys[0])
}

// holdAllScript decides a hold and rate parts as one
// (scripts/concurrency_composite.lua): every algorithm's step, as the
// composite script has them, and the holds'.
var holdAllScript = redisrun.NewScript(prelude() + mustRead("guard.lua") + stepsOf(algo.Kinds()...) +
	mustRead("class.lua") + mustRead("concurrency.lua") + mustRead("concurrency_composite.lua"))

// holdAll decides the acquire h with the rate parts at now (-1: the
// server's TIME), writing each part's decision into it: in one call of the
// hold composite script when every key is in one group (a cluster slot),
// else in turn (holdInTurn).
func (s *Store) holdAll(ctx context.Context, h *hold, parts []store.Part, maxDelay, now int64) (algo.Decision, int64, error) {
	key := s.holdKey(h.key)
	g, ok := s.group(key)
	for i := range parts {
		if h2, ok2 := s.group(s.rateKey(parts[i].Key)); !ok || !ok2 || h2 != g {
			return s.holdInTurn(ctx, h, parts, maxDelay, now)
		}
	}
	keys := make([]string, 1, 1+len(parts))
	keys[0] = key
	args := make([]any, 0, 7+8*len(parts))
	args = append(args, s.margin, now, h.c.Limit, h.c.Lifetime, h.units, h.id, len(parts))
	for i := range parts {
		pt := &parts[i]
		keys = append(keys, s.rateKey(pt.Key))
		l := limitOf(&pt.Limit, maxDelay)
		args = append(args, l.kind, l.rate, l.period, l.burst, l.debt, pt.Cost, l.maxDelay, pt.Headroom)
	}
	c := &redisrun.Call{Script: holdAllScript, Keys: keys, Args: args}
	if err := s.call(ctx, c); err != nil {
		if h.units > 0 && mayHold(err) {
			s.giveBackHold(h) // the rate parts it may have spent stay spent, as a take's
		}
		return algo.Decision{}, 0, err
	}
	rep := c.Reply
	switch {
	case len(rep) == width && rep[0] == holdIDInUse:
		return algo.Decision{}, 0, algo.ErrHoldID
	case len(rep) != width*(1+len(parts)):
		return algo.Decision{}, 0, fmt.Errorf("%w: hold composite script replied %v", redisrun.ErrBadReply, rep)
	case rep[0] < 0:
		return algo.Decision{}, 0, holdAllFailure(rep[1], keys)
	}
	if _, err := readParts(parts, rep[width:], keys[1:], rep[0] == 1); err != nil {
		return algo.Decision{}, 0, err
	}
	return holdDecision(rep), rep[4], nil
}

// readParts writes into parts their decisions from rep, the script's reply
// for them (width values each; keys their Redis keys), and returns their
// fold (algo.Combine). Unless granted (the rest of the composite allowed)
// and every part allowed, they report as a refusal's parts do
// (algo.RefusedPart).
func readParts(parts []store.Part, rep []int64, keys []string, granted bool) (algo.Decision, error) {
	acc, err := foldParts(parts, rep, keys)
	if err != nil {
		return algo.Decision{}, err
	}
	if !granted || !acc.Allowed {
		for i := range parts {
			d := storelink.AlgoDecision(&parts[i].Decision)
			algo.RefusedPart(&d, &d)
			parts[i].Decision = storelink.DecisionOf(&d)
		}
	}
	return acc, nil
}

// foldParts writes into parts their decisions from rep, the script's reply
// for them (width values each; keys their Redis keys), and returns their
// fold (algo.Combine), or the error a part's reply reports.
func foldParts(parts []store.Part, rep []int64, keys []string) (algo.Decision, error) {
	var acc algo.Decision
	for i := range parts {
		d, err := decisionOf(rep[width*i:width*(i+1)], keys[i])
		if err != nil {
			return algo.Decision{}, err
		}
		parts[i].Decision = storelink.DecisionOf(&d)
		if i == 0 {
			acc = d
		} else {
			algo.Combine(&acc, d)
		}
	}
	return acc, nil
}

// holdInTurn decides the acquire h with the rate parts when no script sees
// all their keys (a Redis Cluster, keys in two slots), as takeInTurn
// decides a rate composite: the hold first (a refusal there takes nothing,
// and a hold can always be given back whole), then the parts in turn. When
// a part refuses or fails, the parts taken are given back (takeInTurn) and
// the hold released, so a refusal holds and spends nothing once the
// give-back is done (SEMANTICS.md, "A lease in a composite"). The hold of a
// refusal reports a look: the release's figures (none when the release
// failed), allowed, as a query that would have granted. A release that
// cannot reach Redis leaves the hold to come back at the end of its
// lifetime.
func (s *Store) holdInTurn(ctx context.Context, h *hold, parts []store.Part, maxDelay, now int64) (algo.Decision, int64, error) {
	if err := s.ready(ctx); err != nil {
		return algo.Decision{}, 0, err
	}
	hd, exp, err := s.hold(ctx, h, now)
	if err != nil {
		return algo.Decision{}, 0, err // algo.ErrHoldID among them: nothing was taken
	}
	if !hd.Allowed {
		// The parts are not reached: each reports a look, allowed, as
		// takeInTurn's parts after a refusal do.
		s.eachInTurn(ctx, parts, maxDelay, now, turnOrder(parts), nil)
		return hd, exp, nil
	}
	d, err := s.takeInTurn(ctx, parts, maxDelay, now, false)
	if err == nil && d.Allowed {
		return hd, exp, nil
	}
	if exp == 0 && err == nil { // a query (0 units): nothing to release, and hd is the look
		return algo.Decision{Allowed: true, Remaining: hd.Remaining, ResetAfter: hd.ResetAfter}, 0, nil
	}
	rel := hold{op: algo.OpRelease, key: h.key, c: h.c, id: h.id}
	r, _, rerr := s.hold(context.WithoutCancel(ctx), &rel, now)
	if err != nil {
		return algo.Decision{}, 0, err
	}
	look := algo.Decision{Allowed: true}
	if rerr == nil {
		look.Remaining, look.ResetAfter = r.Remaining, r.ResetAfter
	} else if mayHold(rerr) {
		s.giveBackHold(h)
	}
	return look, 0, nil
}
