package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/model"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/store"
)

// decide runs op, a take, a refund or a charge of one limit, and fails
// the test unless its decision is the model's (over the key space ks).
func (c *checker) decide(ks *model.Keys, op store.Op) store.Decision {
	c.t.Helper()
	got := c.one(op)
	m := ks.Model(modelLimit(op.Limit))
	var d algo.Decision
	switch op.Kind {
	case store.Refund:
		d = m.Refund(op.Key, op.At, op.Cost, op.Window)
	case store.Charge:
		d, _ = m.Charge(op.Key, op.At, op.Cost)
	default:
		d = m.TakeHeadroom(op.Key, op.At, op.Cost, op.Headroom)
	}
	c.expect(describe(&got), got.Decision, want(d))
	return got.Decision
}

// refunds checks that a token bucket or gcra gives units back, never past
// its burst, that a fixed or aligned window takes them off its count,
// never below 0, that a fresh key stays fresh, and that the other
// algorithms answer ErrNoRefund and change nothing.
func refunds(c *checker, _ int) {
	ks := model.NewKeys()
	for _, l := range []store.Limit{
		limit(algo.TokenBucket, 60, 60_000_000, 100),
		limit(algo.GCRA, 60, 60_000_000, 100),
		limit(algo.FixedWindow, 100, 3_600_000_000, 0),
		limit(algo.AlignedWindow, 100, 3_600_000_000, 0),
	} {
		key := "refund:" + algo.Kind(l.Algorithm).String()
		at := Base
		next := func() int64 { at += 1000; return at }
		checks := []struct {
			op    store.Op
			check func(d store.Decision) bool
			what  string
		}{
			{refund(key, l, next(), 30, 0), func(d store.Decision) bool { return d.Remaining == 100 }, "a refund on a fresh key leaves it fresh"},
			{take(key, l, next(), 80), func(d store.Decision) bool { return d.Allowed && d.Remaining == 20 }, "80 taken"},
			{refund(key, l, next(), 50, 0), func(d store.Decision) bool { return d.Remaining == 70 }, "50 given back"},
			{refund(key, l, next(), 1000, 0), func(d store.Decision) bool { return d.Remaining == 100 }, "a refund creates no capacity"},
			{take(key, l, next(), 100), func(d store.Decision) bool { return d.Allowed }, "the whole budget"},
			{take(key, l, next(), 1), func(d store.Decision) bool { return !d.Allowed }, "nothing more"},
		}
		for _, k := range checks {
			if d := c.decide(ks, k.op); !k.check(d) {
				c.t.Fatalf("%s: %s: %+v", describe(&k.op), k.what, d)
			}
		}
	}
	for _, k := range []algo.Kind{algo.LeakyBucket, algo.SlidingWindow, algo.SlidingLog} {
		l := limit(k, 5, 60_000_000, 5)
		key := "norefund:" + k.String()
		c.decide(ks, take(key, l, Base, 2))
		op := c.runErr(refund(key, l, Base+1, 2, 0))[0]
		if !errors.Is(op.Err, store.ErrNoRefund) {
			c.t.Fatalf("%s: %+v, error %v; want one wrapping ErrNoRefund", describe(&op), op.Decision, op.Err)
		}
		c.decide(ks, take(key, l, Base+2, 0)) // nothing given back
	}
}

// lateRefund checks that units a window spent are not given back to the
// next one: 10 of 10 taken in one window, 10 in the next, then a refund
// of the first take's 10 naming its window gives nothing (the next window
// still admits no more), where a refund naming no window gives to the
// current one. A refund that brings the count to 0 leaves the key fresh.
func lateRefund(c *checker, _ int) {
	ks := model.NewKeys()
	for _, k := range []algo.Kind{algo.FixedWindow, algo.AlignedWindow} {
		l := limit(k, 10, 60_000_000, 0)
		key := "late:" + k.String()
		start := (Base/60_000_000 + 1) * 60_000_000 // on the minute, for both
		first := c.decide(ks, take(key, l, start, 10))
		if !first.Allowed || first.Window != start+60_000_000 {
			c.t.Fatalf("%s: the first take: %+v", k, first)
		}
		next := c.decide(ks, take(key, l, start+60_000_000, 10))
		if !next.Allowed || next.Window != start+120_000_000 {
			c.t.Fatalf("%s: the take in the next window: %+v", k, next)
		}
		if d := c.decide(ks, refund(key, l, start+61_000_000, 10, first.Window)); d.Remaining != 0 {
			c.t.Fatalf("%s: a late refund of the first window's units gave back: %+v", k, d)
		}
		if d := c.decide(ks, take(key, l, start+61_000_000, 1)); d.Allowed {
			c.t.Fatalf("%s: the next window admitted 11 of 10 after a late refund", k)
		}
		if d := c.decide(ks, refund(key, l, start+61_000_000, 4, next.Window)); d.Remaining != 4 {
			c.t.Fatalf("%s: a refund of 4 to the take's own window: %+v", k, d)
		}
		if d := c.decide(ks, refund(key, l, start+61_000_000, 6, 0)); d.Remaining != 10 || d.ResetAfter != 0 {
			c.t.Fatalf("%s: a refund of the last 6: %+v; want the key fresh", k, d)
		}
	}
}

// changedLimits checks the cases of changed limits users meet: a rolling
// deploy alternating token bucket and gcra on one key spends one budget; a
// raised burst keeps what was spent; a fixed window whose period shrinks
// ends a new period after its start; a sliding log's units count when a
// token bucket takes the key over; a query under another algorithm
// changes nothing.
func changedLimits(c *checker, _ int) {
	ks := model.NewKeys()
	hour := int64(3_600_000_000)
	tb, gcra := limit(algo.TokenBucket, 10, hour, 10), limit(algo.GCRA, 10, hour, 10)
	admitted := 0
	for i := range 100 {
		l := tb
		if i%2 == 1 {
			l = gcra
		}
		if c.decide(ks, take("deploy", l, Base+int64(i), 1)).Allowed {
			admitted++
		}
	}
	if admitted != 10 {
		c.t.Fatalf("alternating token-bucket and gcra on a limit of 10/hour admitted %d of 100", admitted)
	}
	for _, l := range []store.Limit{tb, gcra} {
		key := "burst:" + algo.Kind(l.Algorithm).String()
		c.decide(ks, take(key, l, Base, 10))
		raised := l
		raised.Burst = 100
		if d := c.decide(ks, take(key, raised, Base+1, 0)); d.Remaining != 90 {
			c.t.Fatalf("%s: burst 10 → 100 with 10 spent: %+v, want 90 remaining", key, d)
		}
	}
	c.decide(ks, take("window", limit(algo.FixedWindow, 1, hour, 0), Base, 1))
	if d := c.decide(ks, take("window", limit(algo.FixedWindow, 1, 1_000_000, 0), Base+10, 1)); d.Allowed || d.RetryAfter > 1_000_000 {
		c.t.Fatalf("a fixed window shrunk from an hour to a second: %+v, want a refusal for at most a second", d)
	}
	c.decide(ks, take("handover", limit(algo.SlidingLog, 5, hour, 0), Base, 3))
	for _, k := range []algo.Kind{algo.GCRA, algo.FixedWindow, algo.AlignedWindow, algo.LeakyBucket} {
		if d := c.decide(ks, take("handover", limit(k, 5, 60_000_000, 7), Base+1, 0)); !d.Allowed {
			c.t.Fatalf("a query under %v was refused", k)
		}
	}
	if d := c.decide(ks, take("handover", limit(algo.TokenBucket, 5, hour, 5), Base+2, 0)); d.Remaining != 2 {
		c.t.Fatalf("a token bucket taking over a sliding log that spent 3 of 5: %+v, want 2 remaining", d)
	}
}

// maxDelay checks leaky-bucket takes with a MaxDelay: a composite refused
// because one part's turn would come too late, then admitted under a
// longer bound; and a random trace of takes under random bounds, each
// key under one limit, against the model and SEMANTICS.md's rule (a
// request whose delay would pass MaxDelay is refused with RetryAfter
// Never, spends nothing, and reports a look's figures).
func maxDelay(c *checker, n int) {
	ks := model.NewKeys()
	q, tb := limit(algo.LeakyBucket, 10, 1_000_000, 4), limit(algo.TokenBucket, 5, 1_000_000, 5)
	for range 3 {
		c.decide(ks, take("{md}queue", q, Base, 1))
	}
	parts := []store.Part{{Key: "{md}queue", Limit: q, Cost: 1}, {Key: "{md}bucket", Limit: tb, Cost: 1}}
	op := store.Op{Kind: store.Take, At: Base, MaxDelay: 250_000, Parts: parts}
	op = c.one(op)
	look := ks.Model(modelLimit(q)).Take("{md}queue", Base, 0)
	late := store.Decision{Remaining: look.Remaining, RetryAfter: store.Never, ResetAfter: look.ResetAfter}
	c.expect("a composite whose queue part's turn comes 300ms on, bound 250ms: the queue part", op.Parts[0].Decision, late)
	c.expect("the same: the bucket part", op.Parts[1].Decision, store.Decision{Allowed: true, Remaining: 5})
	c.expect("the same: the summary", op.Decision, late)
	op = c.one(store.Op{Kind: store.Take, At: Base, MaxDelay: 300_000, Parts: parts})
	models := []*model.Model{ks.Model(modelLimit(q)), ks.Model(modelLimit(tb))}
	each := make([]algo.Decision, 2)
	sum := model.TakeEach(models, []string{"{md}queue", "{md}bucket"}, []int64{1, 1}, Base, each)
	c.expect("the same composite, bound 300ms", op.Decision, want(sum))
	for j := range each {
		c.expect(fmt.Sprintf("the same composite, bound 300ms: part %d", j), op.Parts[j].Decision, want(each[j]))
	}
	maxDelayTrace(c, n)
}

// maxDelayTrace is maxDelay's random trace.
func maxDelayTrace(c *checker, n int) {
	seed := testenv.Seed(c.t)
	r := rand.New(rand.NewPCG(seed, 17))
	ks := model.NewKeys()
	limits := []store.Limit{limit(algo.LeakyBucket, 10, 1_000_000, 4), limit(algo.LeakyBucket, 3, 1_000_000, 0), limit(algo.LeakyBucket, 7, 2_000_000, 9)}
	now, late := Base, 0
	for i := range n {
		j := r.IntN(len(limits))
		key, l := fmt.Sprintf("md%d", j), limits[j]
		now += r.Int64N(l.Period/l.Rate+1) * int64(r.IntN(2))
		op := take(key, l, now, r.Int64N(l.Burst+2))
		op.MaxDelay = []int64{0, r.Int64N(2 * l.Period), store.Never}[r.IntN(3)]
		op = c.one(op)
		m := ks.Model(modelLimit(l))
		look := m.Take(key, now, 0)
		w := store.Decision{Remaining: look.Remaining, RetryAfter: store.Never, ResetAfter: look.ResetAfter}
		if op.Cost == 0 || look.Delay <= op.MaxDelay {
			w = want(m.Take(key, now, op.Cost))
		} else {
			late++
		}
		if op.Decision != w {
			c.t.Fatalf("seed %d op %d (%s):\n got  %+v\n want %+v", seed, i, describe(&op), op.Decision, w)
		}
	}
	c.t.Logf("%d takes under a MaxDelay, %d of them refused as too late, equal to the model (seed %d)", n, late, seed)
}

// reset checks that Reset returns a key to its fresh state: its budget
// and its holds (when the store supports holds), and that a key never
// seen resets too.
func reset(c *checker, _ int) {
	l := limit(algo.TokenBucket, 10, 60_000_000, 10)
	cc := store.Concurrency{Limit: 3, Lifetime: 60_000_000}
	c.one(take("r", l, Base, 4))
	holds := c.supports(acquire("r", cc, Base, 2, 1))
	c.one(store.Op{Kind: store.Reset, At: Base + 1, Key: "r"})
	c.one(store.Op{Kind: store.Reset, At: Base + 1, Key: "never-seen"})
	c.expect("the budget after a reset", c.one(take("r", l, Base+2, 0)).Decision, store.Decision{Allowed: true, Remaining: 10})
	if holds {
		look := c.one(acquire("r", cc, Base+2, 0, 2))
		c.expect("the holds after a reset", look.Decision, store.Decision{Allowed: true, Remaining: 3})
		rel := c.one(holdOp(store.Release, hold{"r", cc, 1, 0}, Base+2, 0))
		c.expect("a release of a hold a reset dropped", rel.Decision, store.Decision{Remaining: 3})
	}
	ks := model.NewKeys() // the key is fresh: the model of a fresh key
	c.decide(ks, take("r", l, Base+3, 10))
}

// errorCases checks the errors a store answers to checked ops, and that
// none changes anything: an At outside [0, 2^52] (ErrInvalidTime) for
// every kind of op; a refund an algorithm cannot make (in refunds); an
// acquire whose id is held (ErrIDInUse); an op of no known kind
// (errors.ErrUnsupported).
func errorCases(c *checker, _ int) {
	ks := model.NewKeys()
	l := limit(algo.TokenBucket, 5, 60_000_000, 5)
	cc := store.Concurrency{Limit: 2, Lifetime: 60_000_000}
	c.decide(ks, take("e", l, Base, 2))
	holds := c.supports(store.Op{Kind: store.Acquire, At: Base, Key: "e", Concurrency: cc, Cost: 1, ID: 7})
	parts := []store.Part{{Key: "{e}a", Limit: l, Cost: 1}, {Key: "{e}b", Limit: l, Cost: 1}}
	for _, at := range []int64{-1, algo.MaxTime + 1} {
		ops := []store.Op{
			take("e", l, at, 1),
			{Kind: store.Take, At: at, MaxDelay: store.Never, Parts: parts},
			refund("e", l, at, 1, 0),
			{Kind: store.Acquire, At: at, Key: "e", Concurrency: cc, Cost: 1, ID: 8},
			{Kind: store.Acquire, At: at, Key: "e", Concurrency: cc, Cost: 1, ID: 9, MaxDelay: store.Never, Parts: parts},
			{Kind: store.Release, At: at, Key: "e", Concurrency: cc, ID: 7},
			{Kind: store.Extend, At: at, Key: "e", Concurrency: cc, ID: 7},
		}
		for _, op := range ops {
			c.expectErr(op, store.ErrInvalidTime)
		}
	}
	c.decide(ks, take("e", l, Base+1, 0)) // nothing spent
	for _, k := range []string{"{e}a", "{e}b"} {
		c.decide(ks, take(k, l, Base+1, 0))
	}
	if holds {
		c.expectErr(store.Op{Kind: store.Acquire, At: Base + 1, Key: "e", Concurrency: cc, Cost: 1, ID: 7}, store.ErrIDInUse)
		rel := c.one(store.Op{Kind: store.Release, At: Base + 1, Key: "e", Concurrency: cc, ID: 7})
		c.expect("a release of the hold after the errors", rel.Decision, store.Decision{Allowed: true, Remaining: 2})
	}
	ops := []store.Op{{Kind: 200, At: Base, Key: "e"}}
	c.s.Run(c.t.Context(), ops)
	if !errors.Is(ops[0].Err, errors.ErrUnsupported) {
		c.t.Fatalf("an op of kind 200: %+v, error %v; want one wrapping errors.ErrUnsupported", ops[0].Decision, ops[0].Err)
	}
}

// expectErr runs op and fails the test unless its error wraps want and
// it reports nothing. An op the store does not support is only logged.
func (c *checker) expectErr(op store.Op, want error) {
	c.t.Helper()
	ops := []store.Op{op}
	c.s.Run(c.t.Context(), ops)
	got := &ops[0]
	if errors.Is(got.Err, errors.ErrUnsupported) && !errors.Is(want, errors.ErrUnsupported) {
		c.t.Logf("%s: not supported (%v)", describe(got), got.Err)
		return
	}
	var parts store.Decision
	for _, p := range got.Parts {
		parts = p.Decision
		if parts != (store.Decision{}) {
			break
		}
	}
	if !errors.Is(got.Err, want) || got.Decision != (store.Decision{}) || got.Expiry != 0 || parts != (store.Decision{}) {
		c.t.Fatalf("%s: %+v expiry %d (a part %+v), error %v; want no answer and an error wrapping %v", describe(got), got.Decision, got.Expiry, parts, got.Err, want)
	}
}

// batch checks that the ops of one call of Run are decided in order, each
// on its own: one that fails changes nothing for the others.
func batch(c *checker, _ int) {
	ks := model.NewKeys()
	l, w := limit(algo.TokenBucket, 2, 60_000_000, 2), limit(algo.FixedWindow, 3, 1_000_000, 0)
	parts := []store.Part{{Key: "{b}x", Limit: w, Cost: 2}, {Key: "{b}y", Limit: l, Cost: 1}}
	ops := c.runErr(
		take("b", l, Base, 1),
		take("b", l, Base, 1),
		take("b", l, -1, 1),
		take("b", l, Base, 1),
		store.Op{Kind: store.Take, At: Base + 1, MaxDelay: store.Never, Parts: parts},
		take("{b}x", w, Base+2, 1),
		take("b", l, Base+40_000_000, 1),
	)
	for i := range ops {
		op := &ops[i]
		switch {
		case op.At == -1:
			if !errors.Is(op.Err, store.ErrInvalidTime) {
				c.t.Fatalf("op %d (%s): error %v, want one wrapping ErrInvalidTime", i, describe(op), op.Err)
			}
			continue
		case op.Err != nil:
			c.t.Fatalf("op %d (%s): %v", i, describe(op), op.Err)
		case len(op.Parts) > 0:
			models := []*model.Model{ks.Model(modelLimit(w)), ks.Model(modelLimit(l))}
			each := make([]algo.Decision, 2)
			sum := model.TakeEach(models, []string{"{b}x", "{b}y"}, []int64{2, 1}, op.At, each)
			c.expect(fmt.Sprintf("op %d (%s)", i, describe(op)), op.Decision, want(sum))
			continue
		}
		d := ks.Model(modelLimit(op.Limit)).Take(op.Key, op.At, op.Cost)
		c.expect(fmt.Sprintf("op %d (%s)", i, describe(op)), op.Decision, want(d))
	}
}

// storeClock checks that an op whose At is 0 is decided at the store's
// clock: a take on a fresh key, and an acquire whose Expiry is a lifetime
// after a time the store's clock read.
func storeClock(c *checker, _ int) {
	op := c.one(take("clock", limit(algo.TokenBucket, 10, 3_600_000_000, 10), 0, 1))
	c.expect("a take at the store's clock", op.Decision, store.Decision{Allowed: true, Remaining: 9, ResetAfter: 360_000_000})
	cc := store.Concurrency{Limit: 2, Lifetime: 1_000_000}
	ops := []store.Op{{Kind: store.Acquire, Key: "clock", Concurrency: cc, Cost: 1, ID: 1}}
	c.s.Run(c.t.Context(), ops)
	switch op := &ops[0]; {
	case errors.Is(op.Err, errors.ErrUnsupported):
		c.t.Logf("holds not supported (%v)", op.Err)
	case op.Err != nil || !op.Decision.Allowed || op.Expiry <= cc.Lifetime:
		c.t.Fatalf("an acquire at the store's clock: %+v expiry %d, error %v", op.Decision, op.Expiry, op.Err)
	}
}
