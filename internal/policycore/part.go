package policycore

import (
	"context"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/observe"
)

// Part is one policy's share of a request: its rule, the store key (the
// rule's KeyPrefix and the request's key), what the request spends and
// what it leaves for higher classes (Rule.HeadroomFor).
//
// A counting rule's part (Rule.Counts) only looks when Take decides it:
// Cost is what Settle charges if the outcome counts. Taken reports that
// Take spent its Cost after all (see Take).
type Part struct {
	Rule     *Rule
	Key      string
	Cost     int64
	Headroom int64
	Taken    bool
}

// RequestKey is the request's key, without the store prefix.
func (p *Part) RequestKey() string { return p.Key[len(p.Rule.KeyPrefix):] }

// Quota is the draft-11 q of the request's class: the rule's Q less what
// the request leaves for higher classes, so that RateLimit's r (the
// class's Remaining) never exceeds it.
func (p *Part) Quota() int64 { return p.Rule.Q - p.Headroom }

// Sluice is p as a part of a composite on the Limiter: a counting rule's
// part, a look.
func (p *Part) Sluice() sluice.Part {
	return sluice.Part{Key: p.Key, Limit: p.Rule.Limit, Cost: p.takeCost(), Headroom: p.Headroom}
}

// takeCost is what Take spends on p: nothing for a counting rule's look.
func (p *Part) takeCost() int64 {
	if p.Rule.Counts && !p.Taken {
		return 0
	}
	return p.Cost
}

// Record counts outcome o for each part's rule and reports it to obs (nil
// reports nothing): one Event per part with source, the latency of their
// store call and wait, its Index the part's place among ps.
func Record(obs observe.Observer, source string, ps []Part, o observe.Outcome, lat, wait time.Duration) {
	for i := range ps {
		ps[i].Rule.Record(obs, source, o, lat, wait, i)
	}
}

// RecordRefused is Record for the parts of a refused composite that could
// not grant their cost (each[i] is ps[i]'s own result at the decision), an
// Event's Index its place among them: a part that would have granted
// reports nothing, the refusal is the others'.
func RecordRefused(obs observe.Observer, source string, ps []Part, each []sluice.Result, o observe.Outcome, lat time.Duration) {
	n := 0
	for i := range ps {
		if !each[i].Allowed {
			ps[i].Rule.Record(obs, source, o, lat, 0, n)
			n++
		}
	}
}

// Refused returns the rules of the parts of a refused composite that could
// not grant their cost (each[i] is ps[i]'s result).
func Refused(ps []Part, each []sluice.Result) []*Rule {
	var out []*Rule
	for i := range ps {
		if !each[i].Allowed {
			out = append(out, ps[i].Rule)
		}
	}
	return out
}

// RefusedNames is Refused's names.
func RefusedNames(ps []Part, each []sluice.Result) []string {
	var out []string
	for i := range ps {
		if !each[i].Allowed {
			out = append(out, ps[i].Rule.Name)
		}
	}
	return out
}

// Take decides ps as one composite on lim (sluice.Limiter.TakeAll) and
// writes each part's own result at the decision into each[i] (each may be
// nil when ps is one part). With timed, it returns how long the store
// took; without, it reads no clock.
//
// A counting rule's part only looks, and refuses when its class could not
// spend Cost now (Remaining < Cost: the key is spent or in debt): see
// looks.
func Take(ctx context.Context, lim *sluice.Limiter, ps []Part, each []sluice.Result, timed bool) (sluice.Result, time.Duration, error) {
	var start time.Time
	if timed {
		start = time.Now()
	}
	var res sluice.Result
	var err error
	switch {
	case len(ps) == 1 && ps[0].Headroom == 0: // a composite of one is a Take, without the parts
		res, err = lim.Take(ctx, ps[0].Key, ps[0].Rule.Limit, ps[0].takeCost())
		if each != nil {
			each[0] = res
		}
	default: // a lower class's part (Headroom) or more than one part
		buf := sluiceParts.Get().(*[2]sluice.Part)
		sp := buf[:0]
		for i := range ps {
			sp = append(sp, ps[i].Sluice())
		}
		res, err = lim.TakeAll(ctx, sp, each)
		*buf = [2]sluice.Part{} // hold no keys in the pool
		sluiceParts.Put(buf)
	}
	if err == nil && !res.Degraded && counting(ps) {
		one := [1]sluice.Result{res}
		e := each
		if e == nil { // one part: its result is the summary
			e = one[:]
		}
		res, err = looks(ctx, lim, ps, e, res)
	}
	var lat time.Duration
	if timed {
		lat = time.Since(start)
	}
	return res, lat, err
}

// sluiceParts lends Take room for two parts: a []sluice.Part escapes (the
// Limiter hands it to its store, an interface), and the Limiter keeps no
// reference to it once TakeAll returns.
var sluiceParts = sync.Pool{New: func() any { return new([2]sluice.Part) }}

// counting reports whether a part of ps is a counting rule's.
func counting(ps []Part) bool {
	for i := range ps {
		if ps[i].Rule.Counts {
			return true
		}
	}
	return false
}

// looks finishes a decided composite (res, each[i] part i's result) whose
// counting parts only looked: a look whose class could not spend its Cost
// now (Remaining < Cost: the key is spent, or in debt) refuses the
// request. Its refusal is a take of its Cost, which spends nothing when
// refused and says when the part could pass (a debt: when it is paid). If
// that take passes after all (the key refilled in between), the part has
// spent its Cost (Taken) and refuses nothing. A request a look refuses
// gives back what the composite spent on every part that can give back; a
// sliding or leaky part's units stay spent. looks returns the summary,
// folded again from each.
func looks(ctx context.Context, lim *sluice.Limiter, ps []Part, each []sluice.Result, res sluice.Result) (sluice.Result, error) {
	looked, short := false, false
	for i := range ps {
		p := &ps[i]
		if !p.Rule.Counts || each[i].Remaining >= p.Cost {
			continue
		}
		var r sluice.Result
		var err error
		if p.Headroom == 0 {
			r, err = lim.Take(ctx, p.Key, p.Rule.Limit, p.Cost)
		} else {
			one := [1]sluice.Part{{Key: p.Key, Limit: p.Rule.Limit, Cost: p.Cost, Headroom: p.Headroom}}
			r, err = lim.TakeAll(ctx, one[:], nil)
		}
		if err != nil {
			giveBack(ctx, lim, ps, each, res.Allowed)
			return sluice.Result{}, err
		}
		if r.Degraded { // the store's failure policy answered: the look stands
			continue
		}
		looked = true
		each[i] = r
		p.Taken = r.Allowed
		short = short || !r.Allowed
	}
	if !looked {
		return res, nil
	}
	if short || !res.Allowed {
		giveBack(ctx, lim, ps, each, res.Allowed)
	}
	return fold(each, res.Allowed && !short), nil
}

// giveBack gives back what a refused request's composite spent: on every
// part when it had admitted it (all), else only what the counting parts'
// takes spent (looks). A part that cannot give back (a sliding or leaky
// one), or whose refund the store fails, keeps its units spent.
func giveBack(ctx context.Context, lim *sluice.Limiter, ps []Part, each []sluice.Result, all bool) {
	for i := range ps {
		p := &ps[i]
		c := p.takeCost()
		if c <= 0 || !all && !p.Taken {
			continue
		}
		p.Taken = false
		if _, err := lim.Refund(ctx, p.Key, p.Rule.Limit, c, sluice.Result{Window: each[i].Window}); err == nil {
			each[i].Remaining = min(each[i].Remaining+c, p.Quota())
		}
		each[i].Delay = 0
	}
}

// fold is the summary of a composite whose parts' results are each,
// allowed or not, as sluice.Limiter.TakeAll folds them.
func fold(each []sluice.Result, allowed bool) sluice.Result {
	r := sluice.Result{Allowed: allowed, Remaining: each[0].Remaining}
	for i := range each {
		e := &each[i]
		r.Remaining = min(r.Remaining, e.Remaining)
		r.ResetAfter = max(r.ResetAfter, e.ResetAfter)
		if allowed {
			r.Delay = max(r.Delay, e.Delay)
		} else if !e.Allowed {
			r.RetryAfter = max(r.RetryAfter, e.RetryAfter)
		}
	}
	if len(each) == 1 {
		r.Window = each[0].Window
	}
	return r
}
