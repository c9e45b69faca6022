package serve

import (
	"context"
	"sync"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/internal/storelink"
)

// quotaScratch holds a call's quota_mode parts and its is_negative_hits
// give-backs; it lives in the pooled scratch.
type quotaScratch struct {
	parts    []sluice.Part   // quota_mode parts, equal keys merged
	res      []sluice.Result // per quota part
	over     []bool          // per quota part: it could not spend its cost
	spent    []bool          // per quota part: it took its cost
	refunds  []sluice.Part   // is_negative_hits descriptors, one part each
	refunded []sluice.Result // per give-back: what a look sees afterwards
}

func (q *quotaScratch) reset() { q.parts, q.refunds = q.parts[:0], q.refunds[:0] }

// clear drops the request's keys: a pooled scratch must not keep them.
func (q *quotaScratch) clear() {
	clear(q.parts[:cap(q.parts)])
	clear(q.refunds[:cap(q.refunds)])
}

// canGiveBack reports whether a limit's algorithm can give units back
// (sluice.Limiter.Refund): all but the sliding ones and the leaky bucket.
func canGiveBack(l sluice.Limit) bool {
	return storelink.Refundable(algo.Kind(l.Algorithm))
}

// addRefund makes descriptor i (its state ds, its part p of cost > 0) a
// give-back, or says why its rule cannot give units back.
func (q *quotaScratch) addRefund(i int, ds *descState, p sluice.Part) error {
	if !canGiveBack(p.Limit) {
		return badRequest("descriptor %d: is_negative_hits: rule %q counts with %s, which cannot give units back (token-bucket, gcra, fixed-window and aligned-window can)",
			i, policyName(ds.rule), p.Limit.Algorithm)
	}
	ds.kind, ds.zero = kindRefund, p.Limit.Rate == 0
	ds.part = len(q.refunds)
	q.refunds = append(q.refunds, p)
	return nil
}

// grow returns s with length n, zeroed, reusing its array when it can.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// decideQuota runs before the enforced descriptors are decided. It gives
// back the call's is_negative_hits units, each on its own and whatever the
// call's answer, so the call's spending can use them. Then it decides the
// quota_mode parts, each on its own as envoy counts every descriptor: a part
// with a cost spends it when it passes alone; a look (cost 0) is over when
// nothing is left; when blocked (the call is refused already) every part
// only looks. It reports whether the call has quota_mode descriptors and
// every one of them is over, which refuses the call.
func (s *Server) decideQuota(ctx context.Context, sc *scratch, blocked bool) (bool, error) {
	q := &sc.quota
	q.refunded = grow(q.refunded, len(q.refunds))
	if len(q.refunds) > 0 {
		if err := s.giveBack(ctx, q); err != nil {
			return false, err
		}
	}
	n := len(q.parts)
	q.res, q.over, q.spent = grow(q.res, n), grow(q.over, n), grow(q.spent, n)
	if n > 0 {
		if err := s.takeQuota(ctx, q, blocked); err != nil {
			s.undoQuota(ctx, sc) // a failed call spends nothing: what the others spent goes back
			return false, err
		}
	}
	found, all := false, true
	for i := range sc.desc {
		ds := &sc.desc[i]
		switch {
		case ds.kind == kindQuota:
			found = true
			all = all && (ds.zero || q.over[ds.part])
		case ds.kind == kindUnlimited:
		case s.opts.GlobalQuota || (ds.kind == kindShadow || ds.kind == kindRefund) && ds.rule.QuotaMode:
			// A quota descriptor whose status is always OK, as envoy
			// counts it: in shadow_mode or giving units back, and under
			// global quota mode one without a rule too.
			found, all = true, false
		}
	}
	return found && all, nil
}

// giveBack makes the call's is_negative_hits give-backs. (Apart from
// decideQuota, as takeQuota is, so that a call without them builds no
// closure.)
func (s *Server) giveBack(ctx context.Context, q *quotaScratch) error {
	return s.each(len(q.refunds), func(i int) error {
		p := &q.refunds[i]
		if p.Limit.Rate == 0 {
			return nil // requests_per_unit 0 holds nothing to give back
		}
		r, err := s.limFor(p.Limit).Refund(ctx, p.Key, p.Limit, p.Cost)
		q.refunded[i] = r
		return err
	})
}

// takeQuota decides the quota_mode parts (see decideQuota).
func (s *Server) takeQuota(ctx context.Context, q *quotaScratch, blocked bool) error {
	return s.each(len(q.parts), func(i int) error {
		p := &q.parts[i]
		c := p.Cost
		if blocked {
			c = 0
		}
		r, tooBig, err := s.take(ctx, p, c)
		if err != nil {
			return err
		}
		over := tooBig || !r.Allowed || (c == 0 && r.Remaining < max(p.Cost, 1))
		q.res[i], q.over[i], q.spent[i] = r, over, c > 0 && !over
		return nil
	})
}

// undoQuota gives back what the quota_mode parts spent in a call that an
// enforced descriptor refused, where the algorithm can (all but the sliding
// ones and the leaky bucket), so that a refused call spends nothing there;
// under the others the units stay spent, as envoy spends every descriptor
// whatever the answer. A part's status then shows what is left after the
// give-back.
func (s *Server) undoQuota(ctx context.Context, sc *scratch) {
	q := &sc.quota
	s.each(len(q.parts), func(i int) error {
		p := &q.parts[i]
		if !q.spent[i] || !canGiveBack(p.Limit) {
			return nil
		}
		r, err := s.limFor(p.Limit).RefundTake(context.WithoutCancel(ctx), p.Key, p.Limit, p.Cost, q.res[i])
		if err != nil {
			s.metrics.storeErrors.Inc()
			return nil
		}
		q.res[i] = r
		return nil
	})
}

// each runs f(0) … f(n-1), the decisions of a call's descriptors that are
// decided each on its own, and returns the first error by index. On a store
// in this process they run one after the other, stopping at an error; on
// another (Redis) they run at once, so that its batcher sends them in one
// round trip rather than one each.
func (s *Server) each(n int, f func(i int) error) error {
	if n < 2 || s.local {
		for i := range n {
			if err := f(i); err != nil {
				return err
			}
		}
		return nil
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	wg.Add(n - 1)
	for i := 1; i < n; i++ {
		go func() {
			defer wg.Done()
			errs[i] = f(i)
		}()
	}
	errs[0] = f(0)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// limits reports whether a descriptor of kind k is a limit the headers
// describe: an enforced or a quota_mode one.
func limits(k uint8) bool { return k == kindEnforced || k == kindQuota }

// refuses reports whether ds refused the call on its own (an enforced
// descriptor over its limit): envoy's headers describe such a one first.
func refuses(ds *descState) bool { return ds.over && ds.kind == kindEnforced }
