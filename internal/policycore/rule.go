package policycore

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/observe"
)

// Rule is a door's policy as its New checked it: what both doors keep of
// it, the head of its store keys, its draft-11 q and w, and its counts. A
// door's policy embeds it beside what is about its transport (its key and
// cost functions).
type Rule struct {
	Name  string
	Limit sluice.Limit
	Cost  int64 // what a request spends when no cost function decides; at least 1
	// Headroom is kept for critical requests (priority classes): the
	// others pass only while Headroom units would stay after them (see
	// sluice.Part.Headroom). 0 ≤ Headroom < Q.
	Headroom int64
	Shadow   bool
	Optional bool
	// Settles: what a request actually used is read once its response is
	// known (the door's Policy.Used), and its Spend settled to it (Settle).
	Settles bool
	// Counts: counting by outcome (the door's Policy.Count). The request's
	// part only looks before the handler (Take) and is charged its Cost
	// afterwards when the response's outcome counts (Settle).
	Counts    bool
	KeyPrefix string // KeyPrefix(the door's prefix, Name)
	Q, W      int64  // Quota(Limit)
	counts    counts
}

type counts struct {
	allowed, refused, degraded, errors, missing atomic.Uint64
}

// Checker checks a door's policies, in order, as its New reads them.
type Checker struct {
	// Prefix is the door's store key prefix.
	Prefix string
	// Noun is what the door limits, for the errors: "request", "call".
	Noun string
	seen map[string]bool
	n    int
}

// Check checks r, the next policy, as its door's Policy gave it (Name,
// Limit, Cost, Headroom, Shadow, Optional, Settles, Counts), and fills in
// the rest: a Cost of 0 is 1,
// KeyPrefix, Q and W. costFunc says that a function reads each request's
// cost, so that Cost need not fit the limit's capacity. The error names
// the policy; the door says where it comes from.
func (c *Checker) Check(r *Rule, costFunc bool) error {
	i := c.n
	c.n++
	if err := CheckName(r.Name); err != nil {
		return fmt.Errorf("policy %d: %w", i, err)
	}
	if c.seen[r.Name] {
		return fmt.Errorf("two policies named %q", r.Name)
	}
	if c.seen == nil {
		c.seen = map[string]bool{}
	}
	c.seen[r.Name] = true
	if err := r.Limit.Validate(); err != nil {
		return fmt.Errorf("policy %q: %w", r.Name, err)
	}
	if (r.Settles || r.Counts) && !algo.Chargeable(algo.Kind(r.Limit.Algorithm)) {
		what := "charging what was used (Used)"
		if r.Counts {
			what = "counting by outcome (Count)"
		}
		return fmt.Errorf("policy %q: %s needs an algorithm that can be charged (token-bucket, gcra, fixed-window or aligned-window), not %s", r.Name, what, r.Limit.Algorithm)
	}
	switch {
	case r.Cost < 0:
		return fmt.Errorf("policy %q: negative cost %d", r.Name, r.Cost)
	case r.Cost == 0:
		r.Cost = 1
	}
	r.KeyPrefix = KeyPrefix(c.Prefix, r.Name)
	r.Q, r.W = Quota(r.Limit)
	if !costFunc && r.Cost > r.Q {
		return fmt.Errorf("policy %q: cost %d exceeds the limit's capacity %d: no %s could pass", r.Name, r.Cost, r.Q, c.Noun)
	}
	switch {
	case r.Headroom < 0:
		return fmt.Errorf("policy %q: negative headroom %d", r.Name, r.Headroom)
	case r.Headroom >= r.Q || (!costFunc && r.Cost+r.Headroom > r.Q):
		return fmt.Errorf("policy %q: a headroom of %d leaves less than one %s's cost of the capacity %d to the other classes", r.Name, r.Headroom, c.Noun, r.Q)
	}
	return nil
}

// HeadroomFor is what a request leaves for higher classes under r:
// nothing when it is critical, else r's Headroom.
func (r *Rule) HeadroomFor(critical bool) int64 {
	if critical {
		return 0
	}
	return r.Headroom
}

// CheckCost is the cost a policy's cost function returned: c, or an error
// for a negative c.
func CheckCost(c int64, err error) (int64, error) {
	if err == nil && c < 0 {
		err = fmt.Errorf("negative cost %d", c)
	}
	return c, err
}

// Stats is one policy's counts, as both doors' Stats types hold them
// (each converts it to its own).
type Stats struct {
	Policy   string
	Shadow   bool
	Allowed  uint64
	Refused  uint64
	Degraded uint64
	Errors   uint64
	Missing  uint64
}

// Stats returns r's counts.
func (r *Rule) Stats() Stats {
	c := &r.counts
	return Stats{
		Policy: r.Name, Shadow: r.Shadow,
		Allowed: c.allowed.Load(), Refused: c.refused.Load(), Degraded: c.degraded.Load(),
		Errors: c.errors.Load(), Missing: c.missing.Load(),
	}
}

// Count counts one outcome of r in its Stats: a refusal, shadow or not,
// is Refused.
func (r *Rule) Count(o observe.Outcome) {
	switch o {
	case observe.Allowed:
		r.counts.allowed.Add(1)
	case observe.Denied, observe.ShadowDenied:
		r.counts.refused.Add(1)
	case observe.Error:
		r.counts.errors.Add(1)
	case observe.Degraded:
		r.counts.degraded.Add(1)
	}
}

// Record counts outcome o of r and reports it to obs (nil reports
// nothing) as an Event of source with the latency of its store call, wait,
// and index, its place among the Events of that call.
func (r *Rule) Record(obs observe.Observer, source string, o observe.Outcome, lat, wait time.Duration, index int) {
	r.Count(o)
	if obs != nil {
		obs.Observe(observe.Event{Source: source, Policy: r.Name, Outcome: o, Latency: lat, Index: index, Wait: wait})
	}
}

// MissingKey counts a request that carries no key for r, and reports
// whether r lets it go on without it: an Optional policy does not apply
// to it, and a shadow policy never answers. Otherwise the door answers it
// (400, InvalidArgument) naming r.
func (r *Rule) MissingKey() (goOn bool) {
	r.counts.missing.Add(1)
	return r.Optional || r.Shadow
}
