package redisstore

import (
	"fmt"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/store"
)

// The argument layouts of the store's scripts are written here and nowhere
// else: each function below names the script whose header documents its
// layout (scripts/*.lua), and the replies are read beside them (decisionOf,
// in scripts.go).

// scriptSet holds the store's scripts, by algorithm (algo.Kind) where they
// decide for one: single (single.lua) and multi (multi.lua) per algorithm,
// composite (composite.lua), charge (charge.lua) per algorithm that can
// charge and chargeAll for composites of several, refund (refund.lua) and
// reset (reset.lua). It is the runner's redisrun.Merger: the decisions
// that wait together in one group are sent in one multi or composite call.
type scriptSet struct {
	single, multi [algo.AlignedWindow + 1]*redisrun.Script
	charge        [algo.AlignedWindow + 1]*redisrun.Script
	composite     *redisrun.Script
	chargeAll     *redisrun.Script
	refund, reset *redisrun.Script
}

var _ redisrun.Merger[decision] = (*scriptSet)(nil)

// width is how many values a script replies for one decision (see decision
// in scripts/prelude.lua): allowed, remaining, retry_after, reset_after,
// delay and window.
const width = 6

// A decision is one decision as the store hands it to its runner: a single
// one (one), kept as integers until it is sent, or a composite (comp, the
// call compositeCall made). The runner writes the outcome into it: one's
// reply or its error (the call's, or a reply of another layout); a
// composite's into comp.
type decision struct {
	one   single
	comp  *redisrun.Call
	reply [width]int64
	err   error
}

// A single is one decision on one key: the decisions of a pipeline that
// share a group and an algorithm are merged into one multi-decision script,
// which names each distinct limit once.
type single struct {
	key    string
	lim    limit
	cost   int64
	now    int64 // µs, -1 for the server's TIME
	margin int64 // µs
}

// A limit is a decision's limit as the scripts read it: the algorithm, the
// rate, period (µs), burst and debt allowance, and the largest delay a
// leaky-bucket admission may carry (µs, -1 for none). charge is 1 for a
// single decision that is a charge of its cost (algo.Charge), else 0: the
// multi-decision script reads it with the limit, so that a take and a
// charge of one algorithm share a call.
type limit struct{ kind, rate, period, burst, debt, maxDelay, charge int64 }

// limitOf returns l, with the bound maxDelay (µs, store.Never for none), as
// the scripts read it.
func limitOf(l *store.Limit, maxDelay int64) limit {
	if maxDelay == store.Never {
		maxDelay = -1
	}
	return limit{int64(l.Algorithm), l.Rate, l.Period, l.Burst, l.Debt, maxDelay, 0}
}

// chargeLimitOf returns l as the scripts read it for a charge.
func chargeLimitOf(l *store.Limit) limit {
	c := limitOf(l, store.Never)
	c.charge = 1
	return c
}

// chargeUnits returns units as a charge under l is sent: at most its
// capacity + debt allowance + 1, which the scripts forgive as they would
// more (algo.Charge's chargeLevel and chargeCount), so that they stay
// within the exact range.
func chargeUnits(l *store.Limit, units int64) int64 {
	p := storelink.AlgoParams(l)
	return min(units, p.Capacity()+p.Debt+1)
}

// compositeClass is the class (redisrun.Merger) of the composites; a single
// decision's is its algorithm.
const compositeClass = -1

// Class returns the key d is routed by and its class.
func (s *scriptSet) Class(d *decision) (string, int64) {
	if d.comp != nil {
		return d.comp.Keys[0], compositeClass
	}
	return d.one.key, d.one.lim.kind
}

// Merge returns the call that makes ds, of one class: a single decision's
// call, a multi-decision call, or one composite call for all.
func (s *scriptSet) Merge(ds []*decision) *redisrun.Call {
	switch {
	case ds[0].comp != nil && len(ds) == 1:
		return ds[0].comp
	case ds[0].comp != nil:
		return s.mergeComposites(ds)
	case len(ds) == 1:
		return s.singleCall(&ds[0].one)
	}
	return s.merge(ds)
}

// Split gives each of ds its part of m's reply, or m's error.
func (s *scriptSet) Split(m *redisrun.Call, ds []*decision) {
	if ds[0].comp != nil {
		splitComposites(m, ds)
		return
	}
	r, err := m.Reply, m.Err
	if err == nil && len(r) != width*len(ds) {
		err = fmt.Errorf("%w: %d values for %d decisions", redisrun.ErrBadReply, len(r), len(ds))
	}
	for i, d := range ds {
		d.err = err
		if err == nil {
			copy(d.reply[:], r[width*i:])
		}
	}
}

// singleCall returns the single-decision script's call for one: a charge's
// is the charge script's, of one part.
func (s *scriptSet) singleCall(one *single) *redisrun.Call {
	l := &one.lim
	if l.charge != 0 {
		return &redisrun.Call{
			Script: s.charge[l.kind],
			Keys:   []string{one.key},
			Args:   []any{one.now, one.margin, l.kind, l.rate, l.period, l.burst, l.debt, one.cost},
		}
	}
	return &redisrun.Call{
		Script: s.single[l.kind],
		Keys:   []string{one.key},
		Args:   []any{l.kind, l.rate, l.period, l.burst, l.debt, one.cost, l.maxDelay, one.now, one.margin},
	}
}

// merge returns one multi-decision call for ds, single decisions of one
// algorithm: each distinct limit once, then per decision only what differs
// (see scripts/multi.lua): its limit's position when there are several
// limits, its cost when the costs differ, its time when any decision carries
// its own.
func (s *scriptSet) merge(ds []*decision) *redisrun.Call {
	var limits []limit
	var index map[limit]int // past a few limits, instead of a scan
	pos := make([]int, len(ds))
	timed := false
	shared := ds[0].one.cost
	last := -1
	for i, d := range ds {
		one := &d.one
		k := one.lim
		j := -1
		switch {
		case last >= 0 && limits[last] == k:
			j = last
		case index != nil:
			if x, ok := index[k]; ok {
				j = x
			}
		default:
			for x := range limits {
				if limits[x] == k {
					j = x
					break
				}
			}
		}
		if j < 0 {
			j = len(limits)
			limits = append(limits, k)
			if index != nil {
				index[k] = j
			} else if len(limits) > 8 {
				index = make(map[limit]int, 2*len(limits))
				for x, l := range limits {
					index[l] = x
				}
			}
		}
		pos[i], last = j, j
		if one.now >= 0 {
			timed = true
		}
		if one.cost != shared {
			shared = -1
		}
	}
	per := 0
	if len(limits) > 1 {
		per++
	}
	if shared < 0 {
		per++
	}
	flag := int64(0)
	if timed {
		per++
		flag = 1
	}
	m := &redisrun.Call{Script: s.multi[ds[0].one.lim.kind], Keys: make([]string, len(ds)), Args: make([]any, 0, 4+7*len(limits)+per*len(ds))}
	m.Args = append(m.Args, ds[0].one.margin, int64(len(limits)), shared, flag)
	for _, l := range limits {
		m.Args = append(m.Args, l.kind, l.rate, l.period, l.burst, l.debt, l.maxDelay, l.charge)
	}
	for i, d := range ds {
		m.Keys[i] = d.one.key
		if len(limits) > 1 {
			m.Args = append(m.Args, int64(pos[i]+1))
		}
		if shared < 0 {
			m.Args = append(m.Args, d.one.cost)
		}
		if timed {
			m.Args = append(m.Args, d.one.now)
		}
	}
	return m
}

// compositeCall returns the composite script's call for one request of n
// parts at now (µs, -1 for the server's TIME), without its parts: add each
// with addPart.
func (s *scriptSet) compositeCall(n int, now, margin int64) *redisrun.Call {
	c := &redisrun.Call{Script: s.composite, Keys: make([]string, 0, n), Args: make([]any, 0, 4+8*n)}
	c.Args = append(c.Args, margin, int64(1), now, int64(n))
	return c
}

// addPart adds to c, made by compositeCall, a part on key under l, of cost
// units, leaving headroom units to higher classes.
func addPart(c *redisrun.Call, key string, l limit, cost, headroom int64) {
	c.Keys = append(c.Keys, key)
	c.Args = append(c.Args, l.kind, l.rate, l.period, l.burst, l.debt, cost, l.maxDelay, headroom)
}

// mergeComposites returns one composite script call for the composites of
// ds, in order: their keys and their requests after one header (see
// composite.lua).
func (s *scriptSet) mergeComposites(ds []*decision) *redisrun.Call {
	nk, na := 0, 2
	for _, d := range ds {
		nk += len(d.comp.Keys)
		na += len(d.comp.Args) - 2
	}
	m := &redisrun.Call{Script: s.composite, Keys: make([]string, 0, nk), Args: make([]any, 0, na)}
	m.Args = append(m.Args, ds[0].comp.Args[0], int64(len(ds)))
	for _, d := range ds {
		m.Keys = append(m.Keys, d.comp.Keys...)
		m.Args = append(m.Args, d.comp.Args[2:]...)
	}
	return m
}

// splitComposites gives the composite of each of ds its part of m's reply
// (or m's error); m may be the only composite's call itself.
func splitComposites(m *redisrun.Call, ds []*decision) {
	if len(ds) == 1 && ds[0].comp == m {
		return
	}
	r, err := m.Reply, m.Err
	if err == nil && len(r) != width*len(m.Keys) {
		err = fmt.Errorf("%w: composite script replied %d values for %d limits", redisrun.ErrBadReply, len(r), len(m.Keys))
	}
	for _, d := range ds {
		c := d.comp
		if err != nil {
			c.Err = err
			continue
		}
		n := width * len(c.Keys)
		c.Reply, r = r[:n:n], r[n:]
	}
}

// refundCall returns the refund script's call giving units back to key
// under l (token-bucket, gcra, fixed-window or aligned-window), at now (µs,
// -1 for the server's TIME); a window's units only to the window that ends
// at window (0: the window the key is in).
func (s *scriptSet) refundCall(key string, l limit, units, now, margin, window int64) *redisrun.Call {
	return &redisrun.Call{
		Script: s.refund,
		Keys:   []string{key},
		Args:   []any{l.kind, l.rate, l.period, l.burst, l.debt, units, now, margin, window},
	}
}

// chargeCall returns the charge script's call for the composite charge of
// parts at now (µs, -1 for the server's TIME): their keys keys, in one
// group.
func (s *scriptSet) chargeCall(parts []store.Part, keys []string, now, margin int64) *redisrun.Call {
	c := &redisrun.Call{Script: s.chargeAll, Keys: keys, Args: make([]any, 0, 2+6*len(parts))}
	c.Args = append(c.Args, now, margin)
	kind := parts[0].Limit.Algorithm
	for i := range parts {
		pt := &parts[i]
		if pt.Limit.Algorithm != kind {
			kind = 0
		}
		l := &pt.Limit
		c.Args = append(c.Args, int64(l.Algorithm), l.Rate, l.Period, l.Burst, l.Debt, chargeUnits(l, pt.Cost))
	}
	if kind != 0 {
		c.Script = s.charge[kind] // the steps of one algorithm: a smaller script to run
	}
	return c
}

// resetCall returns the reset script's call, which deletes keys (of one
// group: see redisrun.Router).
func (s *scriptSet) resetCall(keys ...string) *redisrun.Call {
	return &redisrun.Call{Script: s.reset, Keys: keys}
}
