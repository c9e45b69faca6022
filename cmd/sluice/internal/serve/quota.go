package serve

import (
	"context"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
)

// quotaAnswers are the stores' answers to a call's quota_mode parts.
type quotaAnswers struct {
	res   []sluice.Result // per quota part
	over  []bool          // per quota part: it could not spend its cost
	spent []bool          // per quota part: it took its cost
}

// canGiveBack reports whether a limit's algorithm can give units back
// (sluice.Limiter.Refund): all but the sliding ones and the leaky bucket.
func canGiveBack(l sluice.Limit) bool {
	return storelink.Refundable(algo.Kind(l.Algorithm))
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

// decideQuota runs before the enforced parts are decided, after the
// give-backs (giveBack) and the charges. It decides the quota_mode parts,
// each on its own as envoy counts every descriptor: a part with a cost
// spends it when it passes alone; a look (cost 0) is over when nothing is
// left; when blocked (the call is refused already) every part only looks.
// It reports whether the quota_mode descriptors refuse the call
// (plan.quotaRefuses).
func (s *stores) decideQuota(ctx context.Context, p *plan, d *decision, blocked bool) (bool, error) {
	q := &d.quota
	n := len(p.quota)
	q.res, q.over, q.spent = grow(q.res, n), grow(q.over, n), grow(q.spent, n)
	if n > 0 {
		if err := s.takeQuota(ctx, p.quota, q, blocked); err != nil {
			s.undoQuota(ctx, p.quota, q) // a failed call spends nothing: what the others spent goes back
			return false, err
		}
	}
	return p.quotaRefuses(q.over), nil
}

// giveBack makes the call's is_negative_hits give-backs, each on its own
// and whatever the call's answer, so the call's spending can use them,
// refunded receiving what a look sees afterwards.
func (s *stores) giveBack(ctx context.Context, refunds []sluice.Part, refunded []sluice.Result) error {
	return s.each(len(refunds), func(i int) error {
		p := &refunds[i]
		if p.Limit.Rate == 0 {
			return nil // requests_per_unit 0 holds nothing to give back
		}
		r, err := s.limFor(p.Limit).Refund(ctx, p.Key, p.Limit, p.Cost, sluice.Result{})
		refunded[i] = r
		return err
	})
}

// takeQuota decides the quota_mode parts (see decideQuota).
func (s *stores) takeQuota(ctx context.Context, parts []sluice.Part, q *quotaAnswers, blocked bool) error {
	return s.each(len(parts), func(i int) error {
		p := &parts[i]
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
func (s *stores) undoQuota(ctx context.Context, parts []sluice.Part, q *quotaAnswers) {
	s.each(len(parts), func(i int) error {
		p := &parts[i]
		if !q.spent[i] || !canGiveBack(p.Limit) {
			return nil
		}
		r, err := s.limFor(p.Limit).Refund(context.WithoutCancel(ctx), p.Key, p.Limit, p.Cost, q.res[i])
		if err != nil {
			s.storeErrors.Inc()
			return nil
		}
		q.res[i] = r
		return nil
	})
}
