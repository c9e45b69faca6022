package redisstore

import (
	"fmt"
)

// A single is one decision on one key, kept as integers until it is sent:
// the decisions of a pipeline that share a slot and an algorithm are merged
// into one multi-decision script, which names each distinct limit once.
type single struct {
	key    string
	lim    limit
	cost   int64
	now    int64 // µs, -1 for the server's TIME
	margin int64 // µs
}

// A limit is a single decision's limit as the scripts read it.
type limit struct{ kind, rate, period, burst, maxDelay int64 }

// mergeComposites returns one composite script call for the composite calls
// of ps, in order: their keys and their requests after one header (see
// scripts/composite.lua).
func mergeComposites(ps []*pending) *Call {
	nk, na := 0, 2
	for _, p := range ps {
		nk += len(p.call.Keys)
		na += len(p.call.Args) - 2
	}
	m := &Call{Script: composite, Keys: make([]string, 0, nk), Args: make([]any, 0, na)}
	m.Args = append(m.Args, ps[0].call.Args[0], int64(len(ps)))
	for _, p := range ps {
		m.Keys = append(m.Keys, p.call.Keys...)
		m.Args = append(m.Args, p.call.Args[2:]...)
	}
	return m
}

// splitComposites gives each composite call of ps its part of m's reply (or
// m's error); m may be the only call itself.
func splitComposites(m *Call, ps []*pending) {
	if len(ps) == 1 && ps[0].call == m {
		return
	}
	r, err := m.Reply, m.Err
	if err == nil && len(r) != 5*len(m.Keys) {
		err = fmt.Errorf("%w: composite script replied %d values for %d limits", errBadReply, len(r), len(m.Keys))
	}
	for _, p := range ps {
		c := p.call
		if err != nil {
			c.Err = err
			continue
		}
		n := 5 * len(c.Keys)
		c.Reply, r = r[:n:n], r[n:]
	}
}

// singleCall returns the single-decision script's call for one.
func singleCall(one *single) *Call {
	l := &one.lim
	return &Call{
		Script: scripts[l.kind],
		Keys:   []string{one.key},
		Args:   []any{l.kind, l.rate, l.period, l.burst, one.cost, l.maxDelay, one.now, one.margin},
	}
}

// merge returns one multi-decision call for ps, single decisions of one
// algorithm: each distinct limit once, then per decision only what differs
// (see scripts/multi.lua): its limit's position when there are several
// limits, its cost when the costs differ, its time when any decision carries
// its own.
func merge(ps []*pending) *Call {
	var limits []limit
	var index map[limit]int // past a few limits, instead of a scan
	pos := make([]int, len(ps))
	timed := false
	shared := ps[0].one.cost
	last := -1
	for i, p := range ps {
		k := p.one.lim
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
		if p.one.now >= 0 {
			timed = true
		}
		if p.one.cost != shared {
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
	m := &Call{Script: multis[ps[0].one.lim.kind], Keys: make([]string, len(ps)), Args: make([]any, 0, 4+5*len(limits)+per*len(ps))}
	m.Args = append(m.Args, ps[0].one.margin, int64(len(limits)), shared, flag)
	for _, l := range limits {
		m.Args = append(m.Args, l.kind, l.rate, l.period, l.burst, l.maxDelay)
	}
	for i, p := range ps {
		m.Keys[i] = p.one.key
		if len(limits) > 1 {
			m.Args = append(m.Args, int64(pos[i]+1))
		}
		if shared < 0 {
			m.Args = append(m.Args, p.one.cost)
		}
		if timed {
			m.Args = append(m.Args, p.one.now)
		}
	}
	return m
}
