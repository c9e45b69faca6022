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
type Part struct {
	Rule     *Rule
	Key      string
	Cost     int64
	Headroom int64
}

// RequestKey is the request's key, without the store prefix.
func (p *Part) RequestKey() string { return p.Key[len(p.Rule.KeyPrefix):] }

// Quota is the draft-11 q of the request's class: the rule's Q less what
// the request leaves for higher classes, so that RateLimit's r (the
// class's Remaining) never exceeds it.
func (p *Part) Quota() int64 { return p.Rule.Q - p.Headroom }

// Sluice is p as a part of a composite on the Limiter.
func (p *Part) Sluice() sluice.Part {
	return sluice.Part{Key: p.Key, Limit: p.Rule.Limit, Cost: p.Cost, Headroom: p.Headroom}
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
func Take(ctx context.Context, lim *sluice.Limiter, ps []Part, each []sluice.Result, timed bool) (sluice.Result, time.Duration, error) {
	var start time.Time
	if timed {
		start = time.Now()
	}
	var res sluice.Result
	var err error
	switch {
	case len(ps) == 1 && ps[0].Headroom == 0: // a composite of one is a Take, without the parts
		res, err = lim.Take(ctx, ps[0].Key, ps[0].Rule.Limit, ps[0].Cost)
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
