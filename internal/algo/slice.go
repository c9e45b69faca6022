package algo

// Sliceable reports whether a store may take slices of a key's budget under k
// (SEMANTICS.md, "Slices"): the algorithms that can give units back. A
// sliding window or log cannot take back units spent at one instant without
// moving them in time, and a leaky bucket's admission carries a delay that
// depends on the queue at the instant of the request.
func Sliceable(k Kind) bool {
	return k == TokenBucket || k == GCRA || k == FixedWindow || k == AlignedWindow
}

// TakeSlice takes a slice of a key's budget at now: cost units and, when they
// pass, up to want − cost more, never more than the key has available (the
// Remaining of a look at now). It returns the decision of the take that
// spent the units and how many it spent (got): 0 when refused (then the
// decision is the refusal of cost, and s is what that refusal leaves), else
// from cost to max(cost, want). p must be sliceable and 0 ≤ cost ≤
// p.Capacity(); scripts/slice.lua is its twin.
func TakeSlice(p *Params, s *State, now, cost, want int64) (d Decision, got int64) {
	look := *s // a query stores nothing, but a step updates its state in place
	n := min(max(want, cost), Step(p, &look, now, 0, Never).Remaining)
	if n < cost {
		return Step(p, s, now, cost, Never), 0
	}
	d = Step(p, s, now, n, Never)
	if !d.Allowed {
		return d, 0 // unreachable: n units were available
	}
	return d, n
}
