package policycore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/sluice-go/sluice"
)

// Spend is what an admitted request spent on one policy's key: what a
// Refund may give back, and where.
type Spend struct {
	Rule *Rule
	Key  string // the store key
	Cost int64
	// Window is the window the units were spent in (sluice.Result.Window):
	// a window policy gives back only while its key is still in it.
	Window   int64
	refunded atomic.Int64
}

// AppendSpend appends what p spent, in window, to ss; a part that spent
// nothing has no Spend.
func AppendSpend(ss []Spend, p *Part, window int64) []Spend {
	if p.Cost <= 0 {
		return ss
	}
	return append(ss, Spend{Rule: p.Rule, Key: p.Key, Cost: p.Cost, Window: window})
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
		n := c.claim(units)
		if n <= 0 {
			continue
		}
		if _, err := lim.Refund(ctx, c.Key, c.Rule.Limit, n, sluice.Result{Window: c.Window}); err != nil {
			c.refunded.Add(-n)
			errs = append(errs, fmt.Errorf("policy %q: %w", c.Rule.Name, err))
		}
	}
	return found, errors.Join(errs...)
}

// claim takes up to units from what c has left to give back, and
// returns how many it took.
func (c *Spend) claim(units int64) int64 {
	for {
		done := c.refunded.Load()
		n := min(units, c.Cost-done)
		if n <= 0 || c.refunded.CompareAndSwap(done, done+n) {
			return n
		}
	}
}
