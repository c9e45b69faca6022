package redisstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/internal/storelink"
)

// TakeAll makes one decision for a composite request (see sluice.Store).
//
// When every key is in one group (always on a single node; on a cluster,
// keys that share a {hash tag}; on a Ring, keys its hash puts on one shard) it is one atomic script: every part is stepped
// and all are written only if all grant. Where the keys are apart no script
// can see them all, so the parts are taken one at a time and when one
// refuses the parts already taken are given back (Refund). That never
// admits over any limit. Its weakness: between a part's take and its
// give-back a concurrent request on that key may be refused that would have
// passed; a process dying in between (or a give-back that fails) leaves
// those units spent; and sliding-window, sliding-log and leaky-bucket parts
// cannot be given back. So the parts that can be given back (token-bucket,
// gcra, fixed-window, aligned-window) go first, in the order given (put the
// narrowest first: it refuses most, and a refusal there costs nothing), and
// the others after them; with two or more parts that cannot be given back,
// all but the last can lose units to a later refusal. A refusal on this path
// reports the parts it reached (the ones after the refusing part are not
// looked at). A fixed-window part given back keeps one difference: its take
// may have opened a new window (its end set by that take), which the refund
// leaves open with its count lowered. It never holds more than rate per
// window and windows never overlap, but the window's phase differs from one
// no decision touched (an aligned window has no such difference).
func (s *Store) TakeAll(ctx context.Context, reqs []sluice.Request) (sluice.Result, error) {
	rs, err := storelink.CheckedParts(reqs)
	if err != nil {
		return sluice.Result{}, err
	}
	r, err := s.takeAllNow(ctx, rs)
	return sluice.Result(r), err
}

// takeAllNow is TakeAll on checked requests (by TakeAll, or by the Limiter
// before it calls the engine).
func (s *Store) takeAllNow(ctx context.Context, reqs []storelink.Request) (storelink.Result, error) {
	if s.leases != nil {
		if r, ok := s.leases.takeAll(reqs, nil); ok {
			return r, nil
		}
	}
	now, err := s.clock()
	if err != nil {
		return storelink.Result{}, err
	}
	d, err := s.takeAll(ctx, reqs, now, nil)
	return s.settle(&d, err, func() (storelink.Result, error) { return s.local.TakeAll(ctx, reqs) })
}

// takeEachNow is takeAllNow that also writes each part's result into
// each[i] (see sluice.Limiter.TakeEach), from the same call. Under the
// failure policy, FailOpen admits every part and FailLocal reports the
// fallback's parts, all Degraded.
func (s *Store) takeEachNow(ctx context.Context, reqs []storelink.Request, each []storelink.Result) (storelink.Result, error) {
	if s.leases != nil {
		if r, ok := s.leases.takeAll(reqs, each); ok {
			return r, nil
		}
	}
	now, err := s.clock()
	if err != nil {
		return storelink.Result{}, err
	}
	ds := make([]algo.Decision, len(reqs))
	d, err := s.takeAll(ctx, reqs, now, ds)
	r, serr := s.settle(&d, err, func() (storelink.Result, error) {
		return s.local.TakeEach(ctx, reqs, each)
	})
	switch {
	case serr != nil:
		clear(each)
	case err == nil:
		for i := range ds {
			each[i] = storelink.ResultOf(&ds[i])
		}
	default: // decided by the failure policy
		for i := range each {
			if s.policy == FailOpen {
				each[i] = storelink.Result{Allowed: true}
			}
			each[i].Degraded = true
		}
	}
	return r, serr
}

// takeAll makes one composite decision at now (-1: the server's TIME) and,
// unless each is nil, writes each part's decision into each[i] (each as
// long as reqs; see model.TakeEach).
func (s *Store) takeAll(ctx context.Context, reqs []storelink.Request, now int64, each []algo.Decision) (algo.Decision, error) {
	if !s.together(reqs) {
		return s.takeInTurn(ctx, reqs, now, each)
	}
	c := scripts.compositeCall(len(reqs), now, s.margin)
	for i := range reqs {
		r := &reqs[i]
		addPart(c, s.prefix+r.Key, limitOf(&r.Params, r.MaxDelay), r.Cost, r.Reserve)
	}
	if err := s.composite(ctx, c); err != nil {
		return algo.Decision{}, err
	}
	if len(c.Reply) != width*len(reqs) {
		return algo.Decision{}, fmt.Errorf("%w: composite script replied %v", redisrun.ErrBadReply, c.Reply)
	}
	var acc algo.Decision
	for i := range reqs {
		d, err := decisionOf(c.Reply[width*i:width*(i+1)], c.Keys[i])
		if err != nil {
			return algo.Decision{}, err
		}
		if each != nil {
			each[i] = d
		}
		if i == 0 {
			acc = d
		} else {
			algo.Combine(&acc, d)
		}
	}
	if !acc.Allowed {
		// Refused, the script replied a look for every part that granted
		// (a refusing part's decision is one already), so Combine has folded
		// looks: what is left of algo.Refused is that nothing waits, and
		// that no window was spent in.
		acc.Delay, acc.Window = 0, 0
		for i := range each {
			algo.RefusedPart(&each[i], &each[i])
		}
	}
	return acc, nil
}

// takeInTurn takes the parts one at a time and gives back the ones taken when
// a later one refuses. Unless each is nil, it writes each part's decision
// into each[i]: on a refusal, a part given back reports the look its refund
// replied, a part that could not be given back what it spent, and a part
// after the refusing one, not reached, a look made afterwards (all
// allowed: none of them refused).
func (s *Store) takeInTurn(ctx context.Context, reqs []storelink.Request, now int64, each []algo.Decision) (algo.Decision, error) {
	order := turnOrder(reqs)
	var acc algo.Decision
	taken := make([]algo.Decision, 0, len(reqs))
	for i, oi := range order {
		r := reqs[oi]
		d, err := s.decidePart(ctx, r, now)
		if err != nil || !d.Allowed {
			// Give back what can be; the refusal then reports the parts
			// taken as they are afterwards (a refund replies a look), the
			// ones not given back as spent, and the refusing part's own
			// look. The parts after it were not reached.
			looks := taken
			for j, oj := range order[:i] {
				if t := reqs[oj]; t.Cost > 0 && storelink.Refundable(t.Params.Kind) {
					if l, rerr := s.refund(context.WithoutCancel(ctx), t, now, taken[j].Window); rerr == nil {
						l.Remaining = max(0, l.Remaining-t.Reserve) // the class's, as a look's
						looks[j] = l
					}
				}
			}
			if err != nil {
				return algo.Decision{}, err
			}
			looks = append(looks, d)
			acc = d
			algo.Refused(&acc, looks)
			if each != nil {
				s.eachInTurn(ctx, reqs, now, order, looks, each)
			}
			return acc, nil
		}
		taken = append(taken, d)
		if each != nil {
			each[oi] = d
		}
		if i == 0 {
			acc = d
		} else {
			algo.Combine(&acc, d)
		}
	}
	return acc, nil
}

// eachInTurn writes the parts' decisions of a refusal on takeInTurn's path:
// reached[k] is the decision of the part taken k-th (order[k]), as the
// refusal reports it, the last one the refusing part's; the parts after it
// are looked at (cost 0), a failed look leaving a part allowed with no
// figures.
func (s *Store) eachInTurn(ctx context.Context, reqs []storelink.Request, now int64, order []int, reached []algo.Decision, each []algo.Decision) {
	for k, oi := range order {
		var d algo.Decision
		if k < len(reached) {
			d = reached[k]
			if k < len(reached)-1 {
				d.Allowed = true // given back (a refund replies a look), or spent
			}
		} else {
			look := reqs[oi]
			look.Cost = 0
			var err error
			if d, err = s.decidePart(context.WithoutCancel(ctx), look, now); err != nil {
				d = algo.Decision{}
			}
			d.Allowed = true
		}
		algo.RefusedPart(&d, &d)
		each[oi] = d
	}
}

// decidePart decides one part of a composite on its own: through the
// reserve script (reserve.lua) when it leaves units for higher classes.
func (s *Store) decidePart(ctx context.Context, r storelink.Request, now int64) (algo.Decision, error) {
	if r.Reserve > 0 {
		return s.reserving(ctx, &r, r.Reserve, now)
	}
	return s.decide(ctx, r, now)
}

// turnOrder returns the order in which takeInTurn takes the parts reqs:
// order[i] is the part taken i-th, those that can be given back first.
func turnOrder(reqs []storelink.Request) []int {
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(refundRank(reqs[a].Params.Kind), refundRank(reqs[b].Params.Kind))
	})
	return order
}

// refundRank orders the parts of a cross-slot composite: those that can be
// given back first.
func refundRank(k algo.Kind) int {
	if storelink.Refundable(k) {
		return 0
	}
	return 1
}

// together reports whether one script may name every request's key: one
// key, or keys the client puts in one group (see redisrun.Router).
func (s *Store) together(reqs []storelink.Request) bool {
	if len(reqs) == 1 {
		return true
	}
	g, ok := s.group(s.prefix + reqs[0].Key)
	if !ok {
		return false
	}
	for _, r := range reqs[1:] {
		if h, ok := s.group(s.prefix + r.Key); !ok || h != g {
			return false
		}
	}
	return true
}
