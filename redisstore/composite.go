package redisstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/store"
)

// takeAll makes one composite decision at now (-1: the server's TIME) and
// writes each part's decision into it (see model.TakeEach). When every key
// is in one group (always on a single node; on a cluster, keys that share a
// {hash tag}; on a Ring, keys its hash puts on one shard) it is one atomic
// script; else the parts are taken in turn and given back (takeInTurn;
// docs/stores.md, "Composites across slots").
func (s *Store) takeAll(ctx context.Context, parts []store.Part, maxDelay, now int64, summaryOnly bool) (algo.Decision, error) {
	if !s.together(parts) {
		return s.takeInTurn(ctx, parts, maxDelay, now, summaryOnly)
	}
	c := scripts.compositeCall(len(parts), now, s.margin)
	for i := range parts {
		pt := &parts[i]
		addPart(c, s.rateKey(pt.Key), limitOf(&pt.Limit, maxDelay), pt.Cost, pt.Headroom)
	}
	if err := s.composite(ctx, c); err != nil {
		return algo.Decision{}, err
	}
	if len(c.Reply) != width*len(parts) {
		return algo.Decision{}, fmt.Errorf("%w: composite script replied %v", redisrun.ErrBadReply, c.Reply)
	}
	acc, err := readParts(parts, c.Reply, c.Keys, true)
	if err != nil {
		return algo.Decision{}, err
	}
	if !acc.Allowed {
		// Refused, the script replied a look for every part that granted
		// (a refusing part's decision is one already), so Combine has folded
		// looks: what is left of algo.Refused is that nothing waits, and
		// that no window was spent in.
		acc.Delay, acc.Window = 0, 0
	}
	return acc, nil
}

// takeInTurn takes the parts one at a time and gives back the ones taken
// when a later one refuses, writing each part's decision into it: on a
// refusal, a part given back reports the look its refund replied, a part
// that could not be given back what it spent, and a part after the refusing
// one, not reached, a look made afterwards (all allowed: none of them
// refused). summaryOnly spares those looks: the parts' decisions are then
// left as they are (store.Op.SummaryOnly).
func (s *Store) takeInTurn(ctx context.Context, parts []store.Part, maxDelay, now int64, summaryOnly bool) (algo.Decision, error) {
	order := turnOrder(parts)
	var acc algo.Decision
	taken := make([]algo.Decision, 0, len(parts))
	for i, oi := range order {
		pt := &parts[oi]
		d, err := s.decidePart(ctx, pt.Key, &pt.Limit, pt.Cost, pt.Headroom, maxDelay, now)
		if err != nil || !d.Allowed {
			looks := s.giveBackTaken(ctx, parts, order[:i], taken, now)
			if err != nil {
				return algo.Decision{}, err
			}
			looks = append(looks, d)
			acc = d
			algo.Refused(&acc, looks)
			if !summaryOnly {
				s.eachInTurn(ctx, parts, maxDelay, now, order, looks)
			}
			return acc, nil
		}
		taken = append(taken, d)
		parts[oi].Decision = storelink.DecisionOf(&d)
		if i == 0 {
			acc = d
		} else {
			algo.Combine(&acc, d)
		}
	}
	return acc, nil
}

// giveBackTaken gives back what can be of the parts taken (order[k]'s
// decision taken[k]) before a refusal, and returns what each reports:
// a part given back the look its refund replied, one that could not be
// given back what it spent.
func (s *Store) giveBackTaken(ctx context.Context, parts []store.Part, order []int, taken []algo.Decision, now int64) []algo.Decision {
	looks := taken
	for j, oj := range order {
		t := &parts[oj]
		if t.Cost == 0 || !storelink.Refundable(algo.Kind(t.Limit.Algorithm)) {
			continue
		}
		if l, err := s.refund(context.WithoutCancel(ctx), t.Key, &t.Limit, t.Cost, now, taken[j].Window); err == nil {
			l.Remaining = algo.ClassRemaining(l.Remaining, t.Headroom) // the class's, as a look's
			looks[j] = l
		}
	}
	return looks
}

// eachInTurn writes the parts' decisions of a refusal on takeInTurn's path:
// reached[k] is the decision of the part taken k-th (order[k]), as the
// refusal reports it, the last one the refusing part's; the parts after it
// are looked at (cost 0), a failed look leaving a part allowed with no
// figures.
func (s *Store) eachInTurn(ctx context.Context, parts []store.Part, maxDelay, now int64, order []int, reached []algo.Decision) {
	for k, oi := range order {
		var d algo.Decision
		if k < len(reached) {
			d = reached[k]
			if k < len(reached)-1 {
				d.Allowed = true // given back (a refund replies a look), or spent
			}
		} else {
			pt := &parts[oi]
			var err error
			if d, err = s.decidePart(context.WithoutCancel(ctx), pt.Key, &pt.Limit, 0, pt.Headroom, maxDelay, now); err != nil {
				d = algo.Decision{}
			}
			d.Allowed = true
		}
		algo.RefusedPart(&d, &d)
		parts[oi].Decision = storelink.DecisionOf(&d)
	}
}

// decidePart decides cost units of key under lim on their own, leaving
// headroom units to higher classes (headroom.lua) when it is not 0.
func (s *Store) decidePart(ctx context.Context, key string, lim *store.Limit, cost, headroom, maxDelay, now int64) (algo.Decision, error) {
	if headroom > 0 {
		return s.withHeadroom(ctx, key, lim, cost, headroom, maxDelay, now)
	}
	return s.decide(ctx, key, limitOf(lim, maxDelay), cost, now)
}

// turnOrder returns the order in which takeInTurn takes the parts:
// order[i] is the part taken i-th, those that can be given back first.
func turnOrder(parts []store.Part) []int {
	order := make([]int, len(parts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(refundRank(&parts[a].Limit), refundRank(&parts[b].Limit))
	})
	return order
}

// refundRank orders the parts of a cross-slot composite: those that can be
// given back first.
func refundRank(l *store.Limit) int {
	if storelink.Refundable(algo.Kind(l.Algorithm)) {
		return 0
	}
	return 1
}

// together reports whether one script may name every part's key: one key,
// or keys the client puts in one group (see redisrun.Router).
func (s *Store) together(parts []store.Part) bool {
	if len(parts) == 1 {
		return true
	}
	g, ok := s.group(s.rateKey(parts[0].Key))
	if !ok {
		return false
	}
	for i := range parts[1:] {
		if h, ok := s.group(s.rateKey(parts[1+i].Key)); !ok || h != g {
			return false
		}
	}
	return true
}
