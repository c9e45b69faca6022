package serve

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/redisstore"
	"github.com/sluice-go/sluice/store"
)

// stores are the limiters a plan is decided on, and how to use them best.
type stores struct {
	lim  *sluice.Limiter
	lim2 *sluice.Limiter // Options.PerSecondStore's; nil without one
	// local: lim's store is in this process (see each).
	local bool
	// togetherMain and togetherSec: decideTogether may decide a call's
	// enforced and shadow parts in one TakeAll on the store, or on the
	// per-second store: a Redis store, where that saves a round trip (in
	// memory it saves nothing), and one whose TakeAll says exactly which
	// parts refused (not a Store from outside this module).
	togetherMain, togetherSec bool
	// storeErrors counts the store failures that fail no call (a shadow
	// part, a give-back after a refusal): sluice_serve_store_errors_total.
	storeErrors prometheus.Counter
}

// newStores are the limiters over o's stores.
func newStores(o *Options, storeErrors prometheus.Counter) stores {
	s := stores{lim: sluice.New(o.Store), storeErrors: storeErrors}
	if o.PerSecondStore != nil {
		s.lim2 = sluice.New(o.PerSecondStore)
	}
	_, s.local = o.Store.(*memstore.Store)
	s.togetherMain = together(o.Store)
	s.togetherSec = o.PerSecondStore != nil && together(o.PerSecondStore)
	return s
}

// together reports whether decideTogether decides in one TakeAll on st:
// a redisstore, whose composite is one script and says exactly which parts
// refused. A memstore's says so too, but in memory one TakeAll saves
// nothing over a Take a part.
func together(st store.Store) bool {
	_, ok := st.(*redisstore.Store)
	return ok
}

// decision is the stores' answers to a plan.
type decision struct {
	results []sluice.Result // per enforced part, then per shadow part
	over    []bool          // per enforced part, then per shadow part: it refused
	// enf, sha, enfOver and shaOver are results and over, each kind apart.
	enf, sha         []sluice.Result
	enfOver, shaOver []bool
	quota            quotaAnswers
	refunded         []sluice.Result // per give-back: what a look sees afterwards
	// comp is the enforced parts' composite; quotaRefused, whether the
	// quota_mode descriptors refuse the call (plan.quotaRefuses).
	comp         sluice.Result
	quotaRefused bool
	// chg and chgOver are the charge parts' answers and whether each is
	// over the limit; chgComp folds them (RetryAfter: the wait until the
	// refusing ones are out of debt); chgRefused, whether they refuse the
	// call (charge.go).
	chg        []sluice.Result
	chgOver    []bool
	chgComp    sluice.Result
	chgRefused bool
	both       []sluice.Part // the enforced parts, then the shadow parts (decideTogether)
}

// size makes room for the answers of p's enforced and shadow parts.
func (d *decision) size(p *plan) {
	ne, ns := len(p.enforced), len(p.shadow)
	d.results, d.over = grow(d.results, ne+ns), grow(d.over, ne+ns)
	d.enf, d.sha = d.results[:ne], d.results[ne:]
	d.enfOver, d.shaOver = d.over[:ne], d.over[ne:]
	d.comp, d.quotaRefused, d.chgRefused = sluice.Result{}, false, false
}

// decide makes the store calls plan p needs and leaves their answers in
// d: the give-backs first, then the charges (decideCharges), whatever the
// answer, then the quota_mode parts (decideQuota), then the enforced
// parts, all or nothing, then the shadow parts. A call refused before the
// enforced parts are decided (requests_per_unit 0, a charge over the
// limit, its quota descriptors over) only looks at them, so that it spends
// nothing. Its error is the store's: the call is not decided.
func (s *stores) decide(ctx context.Context, p *plan, d *decision) error {
	d.size(p)
	d.refunded = grow(d.refunded, len(p.refunds))
	if len(p.refunds) > 0 {
		if err := s.giveBack(ctx, p.refunds, d.refunded); err != nil {
			return err
		}
	}
	chargeOver, err := s.decideCharges(ctx, p, d)
	if err != nil {
		return err
	}
	d.chgRefused = chargeOver
	blocked := p.blocked || chargeOver
	quotaOver, err := s.decideQuota(ctx, p, d, blocked)
	d.quotaRefused = quotaOver
	shadowDone := false // decideTogether decided the shadow parts too
	switch {
	case err != nil: // a quota part failed: the call is not decided
	case blocked || quotaOver:
		// Refused whatever the others say, so they spend nothing: a look.
		if err = s.look(ctx, p.enforced, d.enf); err == nil {
			for i := range d.enf {
				d.enfOver[i] = d.enf[i].Remaining < p.enforced[i].Cost
			}
		}
	default:
		if len(p.shadow) > 0 && len(p.enforced) > 0 && len(p.quota) == 0 {
			if d.comp, shadowDone, err = s.decideTogether(ctx, p, d); shadowDone || err != nil {
				break
			}
		}
		d.comp, err = s.decideParts(ctx, p.enforced, d.enf, d.enfOver)
		if err == nil && !d.comp.Allowed && len(p.enforced) > 0 {
			s.undoQuota(ctx, p.quota, &d.quota)
		}
	}
	if err != nil {
		return err
	}
	// Shadow parts spend as if enforced when the call is admitted, each on
	// its own so that none blocks the others; when the call is refused they
	// only look, since a refused call spends nothing.
	if len(p.shadow) > 0 && !shadowDone {
		s.decideShadow(ctx, p.shadow, d.comp.Allowed, d.sha, d.shaOver)
	}
	return nil
}

// decideTogether decides the enforced and the shadow parts in one TakeAll,
// one round trip, where that gives what deciding them in turn gives: when
// every part passes (the call is admitted and each shadow part spends as
// decideShadow would have it), or when an enforced part refuses (the call
// is refused, and TakeAll spent nothing and looked at every part). When
// only shadow parts refuse, nothing was spent and done is false: the
// caller decides in turn. It is not tried (done false) for parts in two
// stores (PerSecondStore), a key in both groups, a cost over a capacity,
// or a store it does not pay on (see together).
func (s *stores) decideTogether(ctx context.Context, p *plan, d *decision) (comp sluice.Result, done bool, err error) {
	lim := s.limFor(p.enforced[0].Limit)
	if (lim == s.lim && !s.togetherMain) || (lim == s.lim2 && !s.togetherSec) {
		return sluice.Result{}, false, nil
	}
	for i := range p.enforced {
		if s.limFor(p.enforced[i].Limit) != lim {
			return sluice.Result{}, false, nil
		}
	}
	for i := range p.shadow {
		if s.limFor(p.shadow[i].Limit) != lim {
			return sluice.Result{}, false, nil
		}
		for j := range p.enforced {
			if p.shadow[i].Key == p.enforced[j].Key {
				return sluice.Result{}, false, nil
			}
		}
	}
	d.both = append(append(d.both[:0], p.enforced...), p.shadow...)
	defer clear(d.both)
	res := d.results[:len(d.both)] // enf, then sha
	all, err := lim.TakeAll(ctx, d.both, res)
	if errors.Is(err, sluice.ErrCostExceedsCapacity) {
		return sluice.Result{}, false, nil // nothing spent
	}
	if err != nil {
		return all, true, err
	}
	if all.Allowed {
		return fold(d.enf, true), true, nil
	}
	refused := false
	for i := range d.enf {
		d.enfOver[i] = !d.enf[i].Allowed
		refused = refused || d.enfOver[i]
	}
	if !refused {
		clear(d.enfOver)
		clear(res)
		return sluice.Result{}, false, nil // only shadow parts refused: in turn
	}
	for i := range d.sha {
		// Over as decideShadow reads a look for a refused call.
		d.shaOver[i] = d.sha[i].Remaining < p.shadow[i].Cost
	}
	return fold(d.enf, false), true, nil
}

// fold is the composite of parts' results: allowed as given, the smallest
// Remaining, the largest ResetAfter, Delay and RetryAfter.
func fold(rs []sluice.Result, allowed bool) sluice.Result {
	c := sluice.Result{Allowed: allowed, Remaining: math.MaxInt64}
	for _, r := range rs {
		c.Remaining = min(c.Remaining, r.Remaining)
		c.ResetAfter = max(c.ResetAfter, r.ResetAfter)
		c.Delay = max(c.Delay, r.Delay)
		c.RetryAfter = max(c.RetryAfter, r.RetryAfter)
		c.Degraded = c.Degraded || r.Degraded
	}
	if allowed {
		c.RetryAfter = 0
	}
	return c
}

// decideShadow decides the shadow parts, each on its own: spending as if
// enforced when the call is admitted, looking when it is refused. A store
// error counts, but never fails the call.
func (s *stores) decideShadow(ctx context.Context, parts []sluice.Part, admitted bool, res []sluice.Result, over []bool) {
	s.each(len(parts), func(i int) error {
		p := &parts[i]
		c := p.Cost
		if !admitted {
			c = 0
		}
		r, tooBig, err := s.take(ctx, p, c)
		switch {
		case tooBig:
			over[i] = true
		case err != nil:
			s.storeErrors.Inc()
			over[i] = false
		default:
			over[i] = !r.Allowed || (c == 0 && r.Remaining < p.Cost)
		}
		res[i] = r
		return nil
	})
}

// decideParts decides the enforced parts, all or nothing, in one Take or
// TakeAll (per store, with Options.PerSecondStore: see decideSplit). res
// receives each part's own numbers at the decision, over (zeroed, one per
// part) which parts refused. The composite's result is returned.
func (s *stores) decideParts(ctx context.Context, parts []sluice.Part, res []sluice.Result, over []bool) (sluice.Result, error) {
	if s.lim2 != nil {
		n := 0
		for i := range parts {
			if perSecond(parts[i].Limit) {
				n++
			}
		}
		switch n {
		case 0:
		case len(parts):
			return s.decideOn(ctx, s.lim2, parts, res, over)
		default:
			return s.decideSplit(ctx, parts, res, over)
		}
	}
	return s.decideOn(ctx, s.lim, parts, res, over)
}

// decideOn is decideParts on one limiter.
func (s *stores) decideOn(ctx context.Context, lim *sluice.Limiter, parts []sluice.Part, res []sluice.Result, over []bool) (sluice.Result, error) {
	if len(parts) == 0 {
		return sluice.Result{Allowed: true}, nil
	}
	if len(parts) == 1 {
		p := &parts[0]
		r, tooBig, err := s.take(ctx, p, p.Cost)
		if err != nil {
			return r, err
		}
		r.Allowed = !tooBig && (r.Allowed || p.Cost == 0) // a look is never refused
		res[0] = r
		over[0] = !r.Allowed
		return r, nil
	}
	// Each part's own numbers come from the decision itself.
	comp, err := lim.TakeAll(ctx, parts, res)
	if errors.Is(err, sluice.ErrCostExceedsCapacity) {
		// A cost that could never pass refuses the call, which spends
		// nothing: the parts' numbers come from a look.
		if err := s.look(ctx, parts, res); err != nil {
			return sluice.Result{}, err
		}
		for i := range parts {
			over[i] = res[i].Remaining < parts[i].Cost
		}
		return sluice.Result{}, nil
	}
	if err != nil {
		return comp, err
	}
	for i := range parts {
		over[i] = !res[i].Allowed
	}
	return comp, nil
}

// decideSplit decides parts some of which are per second (Options.
// PerSecondStore) and some not: the per-second ones first, all or nothing;
// when they refuse, the others are only looked at; when they pass, the
// others are decided, and if those refuse, what the per-second ones spent
// is given back, so that a refused call spends nothing.
func (s *stores) decideSplit(ctx context.Context, parts []sluice.Part, res []sluice.Result, over []bool) (sluice.Result, error) {
	idx, group := splitPerSecond(parts)
	var gres [2][]sluice.Result
	var gover [2][]bool
	for g := range 2 {
		gres[g], gover[g] = make([]sluice.Result, len(group[g])), make([]bool, len(group[g]))
	}
	defer func() {
		for g := range 2 {
			for j, i := range idx[g] {
				res[i], over[i] = gres[g][j], gover[g][j]
			}
		}
	}()
	sec, err := s.decideOn(ctx, s.lim2, group[1], gres[1], gover[1])
	if err != nil {
		return sec, err
	}
	if !sec.Allowed {
		if err := s.look(ctx, group[0], gres[0]); err != nil {
			return sluice.Result{}, err
		}
		for j := range group[0] {
			gover[0][j] = gres[0][j].Remaining < group[0][j].Cost
		}
		return sec, nil
	}
	rest, err := s.decideOn(ctx, s.lim, group[0], gres[0], gover[0])
	if err != nil || !rest.Allowed {
		for j := range group[1] {
			p := &group[1][j]
			if p.Cost <= 0 {
				continue
			}
			r, rerr := s.lim2.Refund(context.WithoutCancel(ctx), p.Key, p.Limit, p.Cost, gres[1][j])
			if rerr != nil {
				s.storeErrors.Inc()
				continue
			}
			gres[1][j] = r // what the part has now that nothing is spent
		}
		return rest, err
	}
	return sluice.Result{
		Allowed:    true,
		Remaining:  min(rest.Remaining, sec.Remaining),
		ResetAfter: max(rest.ResetAfter, sec.ResetAfter),
		Delay:      max(rest.Delay, sec.Delay),
		Degraded:   rest.Degraded || sec.Degraded,
	}, nil
}

// splitPerSecond splits parts in two groups, the per-second ones (group
// 1: Options.PerSecondStore's) and the others (group 0), each part's index
// in parts beside.
func splitPerSecond(parts []sluice.Part) (idx [2][]int, group [2][]sluice.Part) {
	for i := range parts {
		g := 0
		if perSecond(parts[i].Limit) {
			g = 1
		}
		idx[g] = append(idx[g], i)
		group[g] = append(group[g], parts[i])
	}
	return idx, group
}

// perSecond reports whether l is counted per second: an epoch-aligned
// window of one second, envoy's unit second.
func perSecond(l sluice.Limit) bool {
	return l.Algorithm == sluice.AlignedWindow && l.Period == time.Second
}

// limFor is the limiter that keeps l's budgets.
func (s *stores) limFor(l sluice.Limit) *sluice.Limiter {
	if s.lim2 != nil && perSecond(l) {
		return s.lim2
	}
	return s.lim
}

// take spends cost on p alone. A cost that could never pass (over the
// limit's capacity) is refused, as envoy refuses it: r is then a look, and
// tooBig is set.
func (s *stores) take(ctx context.Context, p *sluice.Part, cost int64) (r sluice.Result, tooBig bool, err error) {
	lim := s.limFor(p.Limit)
	r, err = lim.Take(ctx, p.Key, p.Limit, cost)
	if errors.Is(err, sluice.ErrCostExceedsCapacity) {
		r, err = lim.Take(ctx, p.Key, p.Limit, 0)
		return r, true, err
	}
	return r, false, err
}

// look fills res with a look (cost 0) at each part.
func (s *stores) look(ctx context.Context, parts []sluice.Part, res []sluice.Result) error {
	if len(parts) == 0 {
		return nil
	}
	one := func(i int) error {
		r, err := s.limFor(parts[i].Limit).Take(ctx, parts[i].Key, parts[i].Limit, 0)
		res[i] = r
		if err != nil && !errors.Is(err, sluice.ErrCostExceedsCapacity) {
			return err
		}
		return nil
	}
	if s.local {
		for i := range parts {
			if err := one(i); err != nil {
				return err
			}
		}
		return nil
	}
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for i := 1; i < len(parts); i++ {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = one(i) }()
	}
	errs[0] = one(0)
	wg.Wait()
	return errors.Join(errs...)
}

// each runs f(0) … f(n-1), the decisions of a call's descriptors that are
// decided each on its own, and returns the first error by index. On a store
// in this process they run one after the other, stopping at an error; on
// another (Redis) they run at once, so that its batcher sends them in one
// round trip rather than one each.
func (s *stores) each(n int, f func(i int) error) error {
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
