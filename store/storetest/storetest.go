// Package storetest checks a store.Store against the exact model of
// SEMANTICS.md, decision by decision: every store of this module passes
// it, and so should one written anywhere else.
//
// A store's test calls Run with a function that returns an empty store:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store { return mystore.Open(t.TempDir()) })
//	}
//
// Run sends ops with explicit times (Op.At), so the store's own clock is
// never read but by one check that At 0 works. Its random traces draw
// from a seed they log, which SLUICE_SEED=N replays; SLUICE_LONG=1 makes
// them three times as long. A group of checks whose ops the store answers
// with errors.ErrUnsupported is skipped, and says so.
package storetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/model"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/store"
)

// Base is the time the checks start at, in µs since the epoch: a time
// near the present.
const Base = int64(1_764_000_000_000_000)

// Run checks the store that newStore returns against SEMANTICS.md, in
// subtests, each on a store of its own (newStore is called once per
// subtest, and its store must hold no key):
//
//   - Trace: random takes and refunds (with and without a window) over
//     every algorithm, the limit of a key changing now and then.
//   - Headroom: the same takes, each leaving random headroom.
//   - Composite, CompositeHeadroom: random composite takes of one to five
//     parts; each part's decision and the summary.
//   - MaxDelay: leaky-bucket takes whose turn would come too late.
//   - Refund, LateRefund, ChangedLimits, Reset: the cases users meet.
//   - Holds: random acquires, releases and extensions; lifetimes; an id in
//     use; goroutines that never hold more than the limit; composite
//     acquires with rate parts.
//   - Charge: charges past what a key has, its debt and what takes see
//     of it; random takes, refunds and charges whose limits (and debt
//     allowances) change; composite charges; a charge an algorithm cannot
//     make. A store that answers a Charge, or a limit with a debt
//     allowance, with errors.ErrUnsupported skips it.
//   - Errors: an invalid time, a refund an algorithm cannot make, an
//     unknown op; none changes anything.
//   - Batch: ops in one call of Run are decided in order, each on its own.
//   - StoreClock: At 0 decides at the store's clock.
//
// The keys of a composite share a {hash tag}, so that a store over a Redis
// Cluster can decide it in one slot.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	n := 1000 // a trace's length; SLUICE_LONG=1 asks for three times as many
	if testenv.Long() {
		n *= 3
	}
	groups := []struct {
		name string
		f    func(c *checker, n int)
	}{
		{"Trace", traceRates},
		{"Headroom", traceHeadroom},
		{"Composite", traceComposites},
		{"CompositeHeadroom", traceCompositesHeadroom},
		{"MaxDelay", maxDelay},
		{"Refund", refunds},
		{"LateRefund", lateRefund},
		{"ChangedLimits", changedLimits},
		{"Reset", reset},
		{"Charge", charges},
		{"Holds", traceHolds},
		{"HoldLifetime", holdLifetime},
		{"HoldComposite", traceHoldComposites},
		{"HoldGoroutines", holdGoroutines},
		{"Errors", errorCases},
		{"Batch", batch},
		{"StoreClock", storeClock},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			g.f(&checker{t: t, s: newStore(t)}, n)
		})
	}
}

// checker runs ops on the store under test.
type checker struct {
	t *testing.T
	s store.Store
}

// run runs ops in one call of the store's Run. An op answered with
// errors.ErrUnsupported skips the test; any other error fails it.
func (c *checker) run(ops ...store.Op) []store.Op {
	c.t.Helper()
	c.runErr(ops...)
	for i := range ops {
		if ops[i].Err != nil {
			c.t.Fatalf("%s: %v", describe(&ops[i]), ops[i].Err)
		}
	}
	return ops
}

// runErr is run that leaves errors other than errors.ErrUnsupported to
// the caller.
func (c *checker) runErr(ops ...store.Op) []store.Op {
	c.t.Helper()
	c.s.Run(c.t.Context(), ops)
	for i := range ops {
		if errors.Is(ops[i].Err, errors.ErrUnsupported) {
			c.t.Skipf("skipped: the store does not support %s (%v)", describe(&ops[i]), ops[i].Err)
		}
	}
	return ops
}

// one runs op alone and returns its answer.
func (c *checker) one(op store.Op) store.Op {
	c.t.Helper()
	return c.run(op)[0]
}

// expect fails the test unless got is want.
func (c *checker) expect(what string, got, want store.Decision) {
	c.t.Helper()
	if got != want {
		c.t.Fatalf("%s:\n got  %+v\n want %+v", what, got, want)
	}
}

// take is a Take of cost units of key under l at at, with no MaxDelay.
func take(key string, l store.Limit, at, cost int64) store.Op {
	return store.Op{Kind: store.Take, At: at, Key: key, Limit: l, Cost: cost, MaxDelay: store.Never}
}

// charge is a Charge of units to key under l at at.
func charge(key string, l store.Limit, at, units int64) store.Op {
	return store.Op{Kind: store.Charge, At: at, Key: key, Limit: l, Cost: units}
}

// refund is a Refund of units to key under l at at, to window (0: any).
func refund(key string, l store.Limit, at, units, window int64) store.Op {
	return store.Op{Kind: store.Refund, At: at, Key: key, Limit: l, Cost: units, Window: window}
}

// limit is a store.Limit of the algorithm k.
func limit(k algo.Kind, rate, period, burst int64) store.Limit {
	return store.Limit{Algorithm: uint8(k), Rate: rate, Period: period, Burst: burst}
}

// params is l as the steps take it.
func params(l store.Limit) algo.Params {
	return algo.Params{Kind: algo.Kind(l.Algorithm), Rate: l.Rate, Period: l.Period, Burst: l.Burst, Debt: l.Debt}
}

// modelLimit is l as the model states it.
func modelLimit(l store.Limit) model.Limit {
	return model.Limit{Kind: algo.Kind(l.Algorithm), Rate: l.Rate, Period: l.Period, Burst: l.Burst, Debt: l.Debt}
}

// want is the model's decision as an Op reports it.
func want(d algo.Decision) store.Decision {
	return store.Decision{Allowed: d.Allowed, Remaining: d.Remaining, RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter, Delay: d.Delay, Window: d.Window}
}

// refundable reports whether k can give units back.
func refundable(k algo.Kind) bool {
	return k == algo.TokenBucket || k == algo.GCRA || k == algo.FixedWindow || k == algo.AlignedWindow
}

var kindNames = map[store.Kind]string{
	store.Take: "take", store.Refund: "refund", store.Reset: "reset",
	store.Acquire: "acquire", store.Release: "release", store.Extend: "extend",
	store.Charge: "charge",
}

// describe says what op asks, for a failure's message.
func describe(op *store.Op) string {
	var b strings.Builder
	name, ok := kindNames[op.Kind]
	if !ok {
		name = fmt.Sprintf("op of kind %d", op.Kind)
	}
	switch {
	case op.At == 0:
		fmt.Fprintf(&b, "%s %q at the store's clock", name, op.Key)
	case op.At < 0 || op.At > algo.MaxTime:
		fmt.Fprintf(&b, "%s %q at %dµs", name, op.Key, op.At)
	default:
		fmt.Fprintf(&b, "%s %q at %+dµs", name, op.Key, op.At-Base)
	}
	switch op.Kind {
	case store.Take, store.Refund, store.Charge:
		if len(op.Parts) == 0 {
			fmt.Fprintf(&b, " %s cost %d", limitString(op.Limit), op.Cost)
		}
	case store.Acquire, store.Release, store.Extend:
		fmt.Fprintf(&b, " limit %d lifetime %dµs units %d id %d", op.Concurrency.Limit, op.Concurrency.Lifetime, op.Cost, op.ID)
	}
	if op.Headroom != 0 {
		fmt.Fprintf(&b, " headroom %d", op.Headroom)
	}
	if op.Window != 0 {
		fmt.Fprintf(&b, " window %d", op.Window)
	}
	if op.MaxDelay != store.Never && op.Kind == store.Take {
		fmt.Fprintf(&b, " max delay %dµs", op.MaxDelay)
	}
	for _, p := range op.Parts {
		fmt.Fprintf(&b, " [%q %s cost %d headroom %d]", p.Key, limitString(p.Limit), p.Cost, p.Headroom)
	}
	return b.String()
}

func limitString(l store.Limit) string {
	s := fmt.Sprintf("%d/%dµs %v burst %d", l.Rate, l.Period, algo.Kind(l.Algorithm), l.Burst)
	if l.Debt != 0 {
		s += fmt.Sprintf(" debt %d", l.Debt)
	}
	return s
}
