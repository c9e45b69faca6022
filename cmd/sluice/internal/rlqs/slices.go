package rlqs

import "time"

// Several replicas share a budget's rate through slices (Config.Sliced):
// each leases from a store its slice of every budget's rate, and grants
// only from it. A round of a replica asks (Claims) and the store answers
// (SetSlices); the store grants a slice only from what the other
// replicas' slices leave of the rate, so that at every instant the
// slices add up to at most the rate, and each replica's leases to at most
// its slice.
//
// A slice lasts SliceLife from the instant it was asked for, and a
// replica grants from it only what ends before it does (a lease, TTL and
// slack, after the grant): a replica that cannot renew its slices cuts
// its grants to DENY_ALL as they come due, and the store counts a dead
// replica's slices until they end, after every grant made from them. A
// slice shrinks only to what its grants still hold: a replica asks at
// least its outstanding rate.

// A Claim is what a replica asks of a budget's rate.
type Claim struct {
	// Key and Fill name the budget; Rate is its rate R.
	Key  string
	Fill time.Duration
	Rate int64
	// Want is the slice asked for, tokens per Fill: at least the rate
	// the replica's leases hold, at most the rate unless they hold more.
	Want int64
	// Demand is what the replica's clients want (their demand, the
	// headroom and the newcomers' reserve), at most Rate; Weight is the
	// sum of their weights, at least 1. The store splits the rate among
	// the replicas by them (weighted max-min).
	Demand, Weight int64
}

// A Slice is what the store leased a replica of a budget's rate.
type Slice struct {
	// Key and Fill name the budget, as its Claim did.
	Key  string
	Fill time.Duration
	// Tokens is the slice, per Fill: at most the Claim's Want, at least
	// the smaller of Want and the slice the replica held.
	Tokens int64
	// Fair is the replica's fair share of the rate, by the demands and
	// weights of every replica's claim.
	Fair int64
}

// Claims appends to out what the Allocator asks of each budget's rate at
// now (µs) and returns it. Until SetSlices answers, each budget grants
// from the smaller of its slice and what it asked: the store may shrink
// the slice to that.
func (a *Allocator) Claims(now int64, out []Claim) []Claim {
	now = a.clock(now)
	for _, bk := range a.list {
		held := a.outstanding(now, bk)
		demand, weight := int64(0), int64(0)
		for _, ho := range bk.holders {
			if a.active(now, ho) {
				demand += a.capOf(ho)
				weight += ho.weight
			}
		}
		demand = min(bk.rate, (demand+scale-1)/scale+max(1, a.reserve(bk)))
		if bk.rate == 0 {
			demand = 0
		}
		want := demand
		if bk.fair > 0 || bk.asked > 0 {
			// Past the first claim, no more than the fair share: what a
			// replica over it gives up goes to the others.
			want = min(want, max(bk.fair, 1))
		}
		want = max(want, held)
		bk.asked = want
		bk.slice = min(bk.slice, want)
		out = append(out, Claim{Key: bk.key, Fill: time.Duration(bk.fill) * time.Microsecond, Rate: bk.rate,
			Want: want, Demand: demand, Weight: max(weight, 1)})
	}
	return out
}

// SetSlices takes the store's answer to the Claims made at sent (µs): each
// slice lasts SliceLife from sent. A slice of a budget the Allocator no
// longer has, or of another fill interval, is ignored.
func (a *Allocator) SetSlices(sent int64, slices []Slice) {
	for _, s := range slices {
		bk := a.buckets[s.Key]
		if bk == nil || time.Duration(bk.fill)*time.Microsecond != s.Fill {
			continue
		}
		bk.slice, bk.sliceEnd, bk.fair = max(0, min(s.Tokens, bk.asked)), sent+a.sliceLife, max(0, s.Fair)
	}
}

// capacity is what bk grants from at now, for a lease of lease µs: its
// rate, or its slice (no more than the rate: one leased before a reload
// lowered it may be larger) when a grant made now ends before the slice
// does (else nothing).
func (a *Allocator) capacity(now int64, bk *bucket, lease int64) int64 {
	if !a.cfg.Sliced {
		return bk.rate
	}
	if now+lease > bk.sliceEnd {
		return 0
	}
	return min(bk.slice, bk.rate)
}

// shareOf is the rate bk's rounds share out: its rate, or its fair share
// of it.
func (a *Allocator) shareOf(bk *bucket) int64 {
	if !a.cfg.Sliced {
		return bk.rate
	}
	return min(bk.rate, bk.fair)
}
