package redisrun

import (
	"fmt"

	"github.com/sluice-go/sluice/algo"
)

// The argument layouts of the store's scripts are written here and nowhere
// else: each function below names the script whose header documents its
// layout (redisstore/scripts/*.lua).

// Scripts are the store's scripts, by algorithm (algo.Kind) where they
// decide for one: Single (single.lua) and Multi (multi.lua) per algorithm,
// Composite (composite.lua), Refund (refund.lua) and Reset (reset.lua).
type Scripts struct {
	Single, Multi [algo.AlignedWindow + 1]*Script
	Composite     *Script
	Refund, Reset *Script
}

// Width is how many values a script replies for one decision (see decision
// in redisstore/scripts/prelude.lua): allowed, remaining, retry_after,
// reset_after, delay and window.
const Width = 6

// A Reply is a script's reply for one decision.
type Reply = [Width]int64

// A Single is one decision on one key, kept as integers until it is sent:
// the decisions of a pipeline that share a group and an algorithm are merged
// into one multi-decision script, which names each distinct limit once.
type Single struct {
	Key    string
	Lim    Limit
	Cost   int64
	Now    int64 // µs, -1 for the server's TIME
	Margin int64 // µs
}

// A Limit is a decision's limit as the scripts read it: the algorithm, the
// rate, period (µs) and burst, and the largest delay a leaky-bucket
// admission may carry (µs, -1 for none: see MaxDelay).
type Limit struct{ Kind, Rate, Period, Burst, MaxDelay int64 }

// LimitOf returns p, with the bound maxDelay (µs, algo.Never for none), as
// the scripts read it.
func LimitOf(p *algo.Params, maxDelay int64) Limit {
	if maxDelay == algo.Never {
		maxDelay = -1
	}
	return Limit{int64(p.Kind), p.Rate, p.Period, p.Burst, maxDelay}
}

// CompositeCall returns the composite script's call for one request of n
// parts at now (µs, -1 for the server's TIME), without its parts: add each
// with AddPart.
func (s *Scripts) CompositeCall(n int, now, margin int64) *Call {
	c := &Call{Script: s.Composite, Keys: make([]string, 0, n), Args: make([]any, 0, 4+6*n)}
	c.Args = append(c.Args, margin, int64(1), now, int64(n))
	return c
}

// AddPart adds to c, made by CompositeCall, a part on key under l, of cost
// units.
func AddPart(c *Call, key string, l Limit, cost int64) {
	c.Keys = append(c.Keys, key)
	c.Args = append(c.Args, l.Kind, l.Rate, l.Period, l.Burst, cost, l.MaxDelay)
}

// RefundCall returns the refund script's call giving units back to key
// under l (token-bucket, gcra, fixed-window or aligned-window), at now (µs,
// -1 for the server's TIME); a window's units only to the window that ends
// at window (0: the window the key is in).
func (s *Scripts) RefundCall(key string, l Limit, units, now, margin, window int64) *Call {
	return &Call{
		Script: s.Refund,
		Keys:   []string{key},
		Args:   []any{l.Kind, l.Rate, l.Period, l.Burst, units, now, margin, window},
	}
}

// ResetCall returns the reset script's call, which deletes key.
func (s *Scripts) ResetCall(key string) *Call {
	return &Call{Script: s.Reset, Keys: []string{key}}
}

// MergeComposites returns one composite script call for the composite calls
// cs, in order: their keys and their requests after one header (see
// composite.lua).
func (s *Scripts) MergeComposites(cs []*Call) *Call {
	nk, na := 0, 2
	for _, c := range cs {
		nk += len(c.Keys)
		na += len(c.Args) - 2
	}
	m := &Call{Script: s.Composite, Keys: make([]string, 0, nk), Args: make([]any, 0, na)}
	m.Args = append(m.Args, cs[0].Args[0], int64(len(cs)))
	for _, c := range cs {
		m.Keys = append(m.Keys, c.Keys...)
		m.Args = append(m.Args, c.Args[2:]...)
	}
	return m
}

// SplitComposites gives each composite call of cs its part of m's reply
// (or m's error); m may be the only call itself.
func SplitComposites(m *Call, cs []*Call) {
	if len(cs) == 1 && cs[0] == m {
		return
	}
	r, err := m.Reply, m.Err
	if err == nil && len(r) != Width*len(m.Keys) {
		err = fmt.Errorf("%w: composite script replied %d values for %d limits", ErrBadReply, len(r), len(m.Keys))
	}
	for _, c := range cs {
		if err != nil {
			c.Err = err
			continue
		}
		n := Width * len(c.Keys)
		c.Reply, r = r[:n:n], r[n:]
	}
}

// SingleCall returns the single-decision script's call for one.
func (s *Scripts) SingleCall(one *Single) *Call {
	l := &one.Lim
	return &Call{
		Script: s.Single[l.Kind],
		Keys:   []string{one.Key},
		Args:   []any{l.Kind, l.Rate, l.Period, l.Burst, one.Cost, l.MaxDelay, one.Now, one.Margin},
	}
}

// Merge returns one multi-decision call for ones, single decisions of one
// algorithm: each distinct limit once, then per decision only what differs
// (see scripts/multi.lua): its limit's position when there are several
// limits, its cost when the costs differ, its time when any decision carries
// its own.
func (s *Scripts) Merge(ones []*Single) *Call {
	var limits []Limit
	var index map[Limit]int // past a few limits, instead of a scan
	pos := make([]int, len(ones))
	timed := false
	shared := ones[0].Cost
	last := -1
	for i, one := range ones {
		k := one.Lim
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
				index = make(map[Limit]int, 2*len(limits))
				for x, l := range limits {
					index[l] = x
				}
			}
		}
		pos[i], last = j, j
		if one.Now >= 0 {
			timed = true
		}
		if one.Cost != shared {
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
	m := &Call{Script: s.Multi[ones[0].Lim.Kind], Keys: make([]string, len(ones)), Args: make([]any, 0, 4+5*len(limits)+per*len(ones))}
	m.Args = append(m.Args, ones[0].Margin, int64(len(limits)), shared, flag)
	for _, l := range limits {
		m.Args = append(m.Args, l.Kind, l.Rate, l.Period, l.Burst, l.MaxDelay)
	}
	for i, one := range ones {
		m.Keys[i] = one.Key
		if len(limits) > 1 {
			m.Args = append(m.Args, int64(pos[i]+1))
		}
		if shared < 0 {
			m.Args = append(m.Args, one.Cost)
		}
		if timed {
			m.Args = append(m.Args, one.Now)
		}
	}
	return m
}
