package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/internal/storelink"
)

// holdScript runs one hold operation (scripts/concurrency_main.lua) over
// the holds' twin of internal/algo/concurrency.go (scripts/concurrency.lua), with
// the helpers, prelude and guard every decision script has.
var holdScript = redisrun.NewScript(redisrun.LuaHelpers + mustRead("prelude.lua") + mustRead("guard.lua") +
	mustRead("concurrency.lua") + mustRead("concurrency_main.lua"))

// holdIDInUse is the first value of the hold script's reply when an
// acquire names a hold id still held (algo.ErrHoldID).
const holdIDInUse = -2

var _ storelink.Holder = (*engine)(nil)

// HoldKey returns the Redis key that keeps the holds of key's concurrency
// limit, a sorted set (scripts/concurrency.lua): the store's prefix,
// "hold:", then key, so that a rate limit and a concurrency limit of one
// key are two states (and, with a {hash tag} in key, in one cluster slot).
func (s *Store) HoldKey(key string) string { return s.prefix + "hold:" + key }

// Hold runs op at the server's time (or the caller's, WithClock), under
// the store's failure policy: an acquire Redis cannot answer is FailOpen's
// grant (held nowhere) or FailLocal's hold in the local store; a release
// or extension of such a hold goes where it is. A release or extension of
// a hold kept in Redis that cannot reach it is an error: the hold comes
// back by itself at the end of its lifetime.
func (e *engine) Hold(ctx context.Context, op storelink.HoldOp) (storelink.HoldResult, error) {
	s := (*Store)(e)
	if op.Degraded {
		return s.degradedHold(ctx, op)
	}
	now, err := s.clock()
	if err != nil {
		return storelink.HoldResult{}, err
	}
	r, err := s.hold(ctx, &op, now)
	if err == nil || op.Op != algo.OpAcquire || !errors.Is(err, sluice.ErrStoreUnavailable) {
		return r, err
	}
	switch s.policy {
	case FailOpen:
		r = storelink.HoldResult{Degraded: true}
		r.Decision.Allowed = true
		return r, nil
	case FailLocal:
		return s.degradedHold(ctx, op)
	}
	return r, err
}

// HoldAt runs op at now (µs since the epoch), with no failure policy.
func (e *engine) HoldAt(ctx context.Context, op storelink.HoldOp, now int64) (storelink.HoldResult, error) {
	if err := algo.CheckTime(now); err != nil {
		return storelink.HoldResult{}, err // wraps sluice.ErrInvalidTime; a negative now would read as TIME
	}
	return (*Store)(e).hold(ctx, &op, now)
}

// degradedHold runs op where the failure policy holds its holds: in the
// local store under FailLocal; under FailOpen nowhere (allowed, nothing
// held).
func (s *Store) degradedHold(ctx context.Context, op storelink.HoldOp) (storelink.HoldResult, error) {
	local, ok := s.local.(storelink.Holder)
	if s.policy != FailLocal || !ok {
		r := storelink.HoldResult{Degraded: true}
		r.Decision.Allowed = op.Op == algo.OpAcquire
		return r, nil
	}
	op.Degraded = false
	r, err := local.Hold(ctx, op)
	r.Degraded = true
	return r, err
}

// hold runs op at now (-1: the server's TIME) in one script call, sent
// through the store's runner (batched with the calls around it), and sorts
// its error as a decision's.
func (s *Store) hold(ctx context.Context, op *storelink.HoldOp, now int64) (storelink.HoldResult, error) {
	key := s.HoldKey(op.Key)
	c := &redisrun.Call{
		Script: holdScript,
		Keys:   []string{key},
		Args:   []any{op.Op, op.Limit.Limit, op.Limit.Lifetime, op.Units, op.ID, now, s.margin},
	}
	if err := s.call(ctx, c); err != nil {
		if op.Op == algo.OpAcquire && op.Units > 0 && mayHold(err) {
			s.giveBackHold(op)
		}
		return storelink.HoldResult{}, err
	}
	r := c.Reply
	switch {
	case len(r) != width:
		return storelink.HoldResult{}, fmt.Errorf("%w: hold script replied %v", redisrun.ErrBadReply, r)
	case r[0] == holdIDInUse:
		return storelink.HoldResult{}, algo.ErrHoldID
	case r[0] < 0:
		return storelink.HoldResult{}, holdFailure(r[1], key)
	}
	return storelink.HoldResult{
		Decision: algo.Decision{Allowed: r[0] == 1, Remaining: r[1], RetryAfter: r[2], ResetAfter: r[3]},
		Expiry:   r[4],
	}, nil
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
var holdAllScript = redisrun.NewScript(prelude() + mustRead("guard.lua") + mustRead("timestamp.lua") + allSteps() +
	mustRead("class.lua") + mustRead("concurrency.lua") + mustRead("concurrency_composite.lua"))

// allSteps is every algorithm's step script.
func allSteps() string {
	var src string
	for _, k := range algo.Kinds() {
		src += mustRead(stepFiles[k])
	}
	return src
}

// HoldAll runs the acquire op with the rate parts reqs at the server's
// time (or the caller's), under the failure policy: FailOpen grants all
// (the hold kept nowhere), FailLocal decides in the local store.
func (e *engine) HoldAll(ctx context.Context, op storelink.HoldOp, reqs []storelink.Request, each []algo.Decision) (storelink.HoldResult, error) {
	s := (*Store)(e)
	now, err := s.clock()
	if err != nil {
		return storelink.HoldResult{}, err
	}
	r, err := s.holdAll(ctx, &op, reqs, now, each)
	if err == nil || !errors.Is(err, sluice.ErrStoreUnavailable) {
		return r, err
	}
	switch s.policy {
	case FailOpen:
		r = storelink.HoldResult{Degraded: true}
		r.Decision.Allowed = true
		for i := range each {
			each[i] = algo.Decision{Allowed: true}
		}
		return r, nil
	case FailLocal:
		r, err := s.local.(storelink.Holder).HoldAll(ctx, op, reqs, each)
		r.Degraded = true
		return r, err
	}
	return r, err
}

// HoldAllAt runs the acquire op with the rate parts reqs at now, with no
// failure policy.
func (e *engine) HoldAllAt(ctx context.Context, op storelink.HoldOp, reqs []storelink.Request, now int64, each []algo.Decision) (storelink.HoldResult, error) {
	if err := algo.CheckTime(now); err != nil {
		return storelink.HoldResult{}, err
	}
	return (*Store)(e).holdAll(ctx, &op, reqs, now, each)
}

// holdAll decides the acquire op with the rate parts reqs at now (-1:
// the server's TIME): in one call of the hold composite script when every
// key is in one group (a cluster slot), else in turn (holdInTurn).
func (s *Store) holdAll(ctx context.Context, op *storelink.HoldOp, reqs []storelink.Request, now int64, each []algo.Decision) (storelink.HoldResult, error) {
	key := s.HoldKey(op.Key)
	g, ok := s.group(key)
	for i := range reqs {
		if h, ok2 := s.group(s.prefix + reqs[i].Key); !ok || !ok2 || h != g {
			return s.holdInTurn(ctx, op, reqs, now, each)
		}
	}
	keys := make([]string, 1, 1+len(reqs))
	keys[0] = key
	args := make([]any, 0, 7+7*len(reqs))
	args = append(args, s.margin, now, op.Limit.Limit, op.Limit.Lifetime, op.Units, op.ID, len(reqs))
	for i := range reqs {
		r := &reqs[i]
		k := s.prefix + r.Key
		keys = append(keys, k)
		l := limitOf(&r.Params, r.MaxDelay)
		args = append(args, l.kind, l.rate, l.period, l.burst, r.Cost, l.maxDelay, r.Reserve)
	}
	if err := s.ready(ctx); err != nil {
		return storelink.HoldResult{}, err
	}
	c := &redisrun.Call{Script: holdAllScript, Keys: keys, Args: args}
	if err := s.call(ctx, c); err != nil {
		if op.Units > 0 && mayHold(err) {
			s.giveBackHold(op) // the rate parts it may have spent stay spent, as a take's
		}
		return storelink.HoldResult{}, err
	}
	rep := c.Reply
	switch {
	case len(rep) == width && rep[0] == holdIDInUse:
		return storelink.HoldResult{}, algo.ErrHoldID
	case len(rep) != width*(1+len(reqs)):
		return storelink.HoldResult{}, fmt.Errorf("%w: hold composite script replied %v", redisrun.ErrBadReply, rep)
	case rep[0] < 0:
		return storelink.HoldResult{}, holdAllFailure(rep[1], keys)
	}
	for i := range reqs {
		d, err := decisionOf(rep[width*(i+1):width*(i+2)], keys[i+1])
		if err != nil {
			return storelink.HoldResult{}, err
		}
		each[i] = d
	}
	allowed := rep[0] == 1
	for i := range each {
		allowed = allowed && each[i].Allowed
	}
	if !allowed {
		for i := range each {
			algo.RefusedPart(&each[i], &each[i])
		}
	}
	return storelink.HoldResult{
		Decision: algo.Decision{Allowed: rep[0] == 1, Remaining: rep[1], RetryAfter: rep[2], ResetAfter: rep[3]},
		Expiry:   rep[4],
	}, nil
}

// holdInTurn decides the acquire op with the rate parts reqs when no
// script sees all their keys (a Redis Cluster, keys in two slots), as
// takeInTurn decides a rate composite: the hold first (a refusal there
// takes nothing, and a hold can always be given back whole), then the
// parts in turn. When a part refuses or fails, the parts taken are given
// back (takeInTurn) and the hold released, so a refusal holds and spends
// nothing once the give-back is done (SEMANTICS.md, "A lease in a
// composite"). The hold of a refusal reports a look: the release's
// figures (none when the release failed), allowed, as a query that would
// have granted. A release that cannot reach Redis leaves the hold to come
// back at the end of its lifetime.
func (s *Store) holdInTurn(ctx context.Context, op *storelink.HoldOp, reqs []storelink.Request, now int64, each []algo.Decision) (storelink.HoldResult, error) {
	if err := s.ready(ctx); err != nil {
		return storelink.HoldResult{}, err
	}
	h, err := s.hold(ctx, op, now)
	if err != nil {
		return storelink.HoldResult{}, err // algo.ErrHoldID among them: nothing was taken
	}
	if !h.Decision.Allowed {
		// The parts are not reached: each reports a look, allowed, as
		// takeInTurn's parts after a refusal do.
		s.eachInTurn(ctx, reqs, now, turnOrder(reqs), nil, each)
		return h, nil
	}
	d, err := s.takeInTurn(ctx, reqs, now, each)
	if err == nil && d.Allowed {
		return h, nil
	}
	if h.Expiry == 0 && err == nil { // a query (0 units): nothing to release, and h is the look
		return storelink.HoldResult{Decision: algo.Decision{Allowed: true, Remaining: h.Decision.Remaining, ResetAfter: h.Decision.ResetAfter}}, nil
	}
	rel := storelink.HoldOp{Op: algo.OpRelease, Key: op.Key, Limit: op.Limit, ID: op.ID}
	r, rerr := s.hold(context.WithoutCancel(ctx), &rel, now)
	if err != nil {
		return storelink.HoldResult{}, err
	}
	look := storelink.HoldResult{Decision: algo.Decision{Allowed: true}}
	if rerr == nil {
		look.Decision.Remaining, look.Decision.ResetAfter = r.Decision.Remaining, r.Decision.ResetAfter
	} else if mayHold(rerr) {
		s.giveBackHold(op)
	}
	return look, nil
}
