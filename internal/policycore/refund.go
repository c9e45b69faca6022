package policycore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/sluice-go/sluice"
)

// Spend is what an admitted request spent on one policy's key: what a
// Refund may give back, and where; and, for a rule that settles or counts,
// what Settle settles once the response is known.
type Spend struct {
	Rule *Rule
	Key  string // the store key
	// Cost is the request's cost under Rule: what its take spent, unless
	// Taken is false (a counting rule's look spent nothing).
	Cost int64
	// Window is the window the units were spent in (sluice.Result.Window):
	// a window policy gives back only while its key is still in it.
	Window int64
	Taken  bool
	// said: the handler charged units (Charge), charged in all.
	said     atomic.Bool
	refunded atomic.Int64
	charged  atomic.Int64
}

// AppendSpend appends what p spent, in window, to ss; a part that spent
// nothing has no Spend, unless its rule settles or counts. The Spends of
// one rule, key and window are one (a stream's messages add up).
func AppendSpend(ss []Spend, p *Part, window int64) []Spend {
	if p.Cost <= 0 && !p.Rule.Settles && !p.Rule.Counts {
		return ss
	}
	taken := !p.Rule.Counts || p.Taken
	for i := range ss {
		if s := &ss[i]; s.Rule == p.Rule && s.Key == p.Key && s.Window == window && s.Taken == taken {
			s.Cost += p.Cost
			return ss
		}
	}
	return append(ss, Spend{Rule: p.Rule, Key: p.Key, Cost: p.Cost, Window: window, Taken: taken})
}

// AppendSpends appends what the admitted parts ps spent, each in the
// window its own result each[i] names.
func AppendSpends(ss []Spend, ps []Part, each []sluice.Result) []Spend {
	for i := range ps {
		ss = AppendSpend(ss, &ps[i], each[i].Window)
	}
	return ss
}

// Refund gives up to units back to each Spend of ss of the policy named
// name (every Spend when name is ""), never more than it spent in all,
// through lim.Refund in the window the units were spent in. It reports
// whether name named a Spend, and the errors of the Spends that could not
// give back (an algorithm that cannot, wrapping
// algo.ErrNoRefund; a store error), each naming its policy.
//
// Refunds may run at once, from several goroutines, on one request's
// Spends: each takes its units from what is left to give back before its
// store call, and returns them if the call fails, so that together they
// never give back more than was spent.
func Refund(ctx context.Context, lim *sluice.Limiter, ss []Spend, name string, units int64) (found bool, err error) {
	var errs []error
	for i := range ss {
		c := &ss[i]
		if name != "" && c.Rule.Name != name {
			continue
		}
		found = true
		if _, err := c.giveBack(ctx, lim, units); err != nil {
			errs = append(errs, err)
		}
	}
	return found, errors.Join(errs...)
}

// giveBack gives up to units of what c spent back, and returns how many
// it gave.
func (c *Spend) giveBack(ctx context.Context, lim *sluice.Limiter, units int64) (int64, error) {
	n := c.claim(units)
	if n <= 0 {
		return 0, nil
	}
	if _, err := lim.Refund(ctx, c.Key, c.Rule.Limit, n, sluice.Result{Window: c.Window}); err != nil {
		c.refunded.Add(-n)
		return 0, fmt.Errorf("policy %q: %w", c.Rule.Name, err)
	}
	return n, nil
}

// spent is what c's take spent.
func (c *Spend) spent() int64 {
	if c.Taken {
		return c.Cost
	}
	return 0
}

// claim takes up to units from what c has left to give back, and
// returns how many it took.
func (c *Spend) claim(units int64) int64 {
	for {
		done := c.refunded.Load()
		n := min(units, c.spent()-done)
		if n <= 0 || c.refunded.CompareAndSwap(done, done+n) {
			return n
		}
	}
}
