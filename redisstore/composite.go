package redisstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/internal/storeapi"
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
// those units spent; and only token-bucket and gcra parts can be given back.
// So the parts that can be given back go first, in the order given (put the
// narrowest first: it refuses most, and a refusal there costs nothing), and
// the others after them; with two or more window or leaky parts, all but the
// last can lose units to a later refusal. A refusal on this path reports the
// parts it reached (the ones after the refusing part are not looked at).
// Taking a window part after the refundable ones matters: a per-chat fixed
// window taken before a global token bucket wastes its windows on the
// global's refusals (see the README's composite figures).
func (s *Store) TakeAll(ctx context.Context, reqs []sluice.Request) (sluice.Result, error) {
	rs, err := storeapi.Requests(reqs)
	if err != nil {
		return sluice.Result{}, err
	}
	return s.takeAllNow(ctx, rs)
}

// takeAllNow is TakeAll on requests in core's form, checked (by TakeAll, or
// by the Limiter before it calls the engine).
func (s *Store) takeAllNow(ctx context.Context, reqs []core.Request) (sluice.Result, error) {
	now, err := s.clock()
	if err != nil {
		return sluice.Result{}, err
	}
	d, err := s.takeAll(ctx, reqs, now)
	return s.settle(&d, err, func() (sluice.Result, error) { return s.local.TakeAll(ctx, storeapi.Publics(reqs)) })
}

func (s *Store) takeAll(ctx context.Context, reqs []core.Request, now int64) (algo.Decision, error) {
	if !s.together(reqs) {
		return s.takeInTurn(ctx, reqs, now)
	}
	c := scripts.CompositeCall(len(reqs), now, s.margin)
	for i := range reqs {
		r := &reqs[i]
		redisrun.AddPart(c, s.prefix+r.Key, redisrun.LimitOf(&r.Params, r.MaxDelay), r.Cost)
	}
	if err := s.call(ctx, c); err != nil {
		return algo.Decision{}, err
	}
	if len(c.Reply) != 5*len(reqs) {
		return algo.Decision{}, fmt.Errorf("%w: composite script replied %v", redisrun.ErrBadReply, c.Reply)
	}
	var acc algo.Decision
	for i := range reqs {
		d, err := decisionOf(c.Reply[5*i:5*i+5], c.Keys[i])
		if err != nil {
			return algo.Decision{}, err
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
		// looks: what is left of algo.Refused is that nothing waits.
		acc.Delay = 0
	}
	return acc, nil
}

// takeInTurn takes the parts one at a time and gives back the ones taken when
// a later one refuses.
func (s *Store) takeInTurn(ctx context.Context, reqs []core.Request, now int64) (algo.Decision, error) {
	reqs = slices.Clone(reqs)
	slices.SortStableFunc(reqs, func(a, b core.Request) int {
		return cmp.Compare(refundRank(a.Params.Kind), refundRank(b.Params.Kind))
	})
	var acc algo.Decision
	taken := make([]algo.Decision, 0, len(reqs))
	for i, r := range reqs {
		d, err := s.decide(ctx, r, now)
		if err != nil || !d.Allowed {
			// Give back what can be; the refusal then reports the parts
			// taken as they are afterwards (a refund replies a look), the
			// ones not given back as spent, and the refusing part's own
			// look. The parts after it were not reached.
			looks := taken
			for j, t := range reqs[:i] {
				if t.Cost > 0 && (t.Params.Kind == algo.TokenBucket || t.Params.Kind == algo.GCRA) {
					if l, rerr := s.refund(context.WithoutCancel(ctx), t, now); rerr == nil {
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
			return acc, nil
		}
		taken = append(taken, d)
		if i == 0 {
			acc = d
		} else {
			algo.Combine(&acc, d)
		}
	}
	return acc, nil
}

// refundRank orders the parts of a cross-slot composite: those that can be
// given back first.
func refundRank(k algo.Kind) int {
	if k == algo.TokenBucket || k == algo.GCRA {
		return 0
	}
	return 1
}

// together reports whether one script may name every request's key: one
// key, or keys the client puts in one group (see redisrun.Router).
func (s *Store) together(reqs []core.Request) bool {
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
