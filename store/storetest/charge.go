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

// charges checks charges and debt (SEMANTICS.md, "Charges and debt"): an
// LLM's tokens charged after the work, past what the key had; random
// traces of takes, refunds and charges whose limits change; composite
// charges among composite takes; and the charges an algorithm cannot
// make. Every decision equals the model's.
func charges(c *checker, n int) {
	chargeByHand(c)
	chargeTrace(c, n)
	chargeComposites(c, n/2)
	noCharge(c)
}

// debt is l with a debt allowance.
func debt(l store.Limit, d int64) store.Limit {
	l.Debt = d
	return l
}

// chargeByHand checks a budget of 1000 tokens a minute, 5000 of debt
// allowed: an estimate of 500 taken, 4000 used and the 3500 more charged,
// which leaves the key 3000 in debt; a take refused until it is paid; a
// charge past the allowance, whose excess is forgiven; a refund that pays
// the debt back; and, with no allowance, a charge that empties the key and
// no further.
func chargeByHand(c *checker) {
	ks := model.NewKeys()
	l := debt(limit(algo.TokenBucket, 1000, 60_000_000, 1000), 5000)
	checks := []struct {
		op    store.Op
		check func(d store.Decision) bool
		what  string
	}{
		{take("llm", l, Base, 500), func(d store.Decision) bool { return d.Allowed && d.Remaining == 500 }, "the estimate taken"},
		{charge("llm", l, Base, 3500), func(d store.Decision) bool { return d.Allowed && d.Remaining == -3000 }, "the rest charged: 3000 in debt"},
		{take("llm", l, Base+1, 1), func(d store.Decision) bool { return !d.Allowed && d.RetryAfter == 180_059_999 }, "a take waits until the debt is paid"},
		{charge("llm", l, Base+2, 10_000), func(d store.Decision) bool { return !d.Allowed && d.Remaining == -5000 }, "a charge past the allowance"},
		{refund("llm", l, Base+3, 2000, 0), func(d store.Decision) bool { return d.Allowed && d.Remaining == -3000 }, "a refund pays the debt back"},
		{charge("drain", limit(algo.GCRA, 10, 1_000_000, 10), Base, 25), func(d store.Decision) bool { return !d.Allowed && d.Remaining == 0 }, "no allowance: the key emptied"},
		{charge("drain", limit(algo.GCRA, 10, 1_000_000, 10), Base, 0), func(d store.Decision) bool { return d.Allowed && d.Remaining == 0 }, "a charge of 0 looks"},
	}
	for _, k := range checks {
		if d := c.decide(ks, k.op); !k.check(d) {
			c.t.Fatalf("%s: %s: %+v", describe(&k.op), k.what, d)
		}
	}
}

// chargeTrace checks a random trace of takes whose limits change (every
// algorithm), among which, under the algorithms that carry a debt, about
// one op in three is a charge (of nothing, a few units, the capacity and
// the allowance, or far more) and one in six a refund, each limit with a
// debt allowance of its own. The ops go to the store in batches of one to
// four.
func chargeTrace(c *checker, n int) {
	seed := testenv.Seed(c.t)
	r := rand.New(rand.NewPCG(seed, 43))
	tr := changedTrace(r, n)
	debts := map[store.Limit]int64{}
	charged := 0
	for i := range tr {
		q := &tr[i]
		if !algo.Chargeable(algo.Kind(q.limit.Algorithm)) {
			continue
		}
		d, ok := debts[q.limit]
		if !ok {
			d = []int64{0, 1 + r.Int64N(3), q.limit.Rate, 4 * params(q.limit).Capacity()}[r.IntN(4)]
			debts[q.limit] = d
		}
		q.limit.Debt = d
		switch x := r.IntN(6); {
		case x < 2:
			p := params(q.limit)
			q.isCharge, q.cost = true, []int64{0, 1 + r.Int64N(3), p.Capacity() + p.Debt, 1 << 40, r.Int64N(2*(p.Capacity()+p.Debt) + 1)}[r.IntN(5)]
			charged++
		case x < 3:
			q.isRefund, q.refundWin = true, r.IntN(2) == 0
		}
	}
	c.replay(seed, tr)
	c.t.Logf("%d ops, %d of them charges, equal to the model (seed %d)", n, charged, seed)
}

// debtParts are the limits a random composite charge's parts are drawn
// from.
var debtParts = []store.Limit{
	debt(limit(algo.TokenBucket, 3, 1_000_000, 4), 6),
	debt(limit(algo.GCRA, 7, 100_000, 2), 0),
	debt(limit(algo.FixedWindow, 6, 1_000_000, 0), 9),
	debt(limit(algo.AlignedWindow, 4, 1_000_000, 0), 2),
	debt(limit(algo.GCRA, 3, 1_000_000, 4), 30),
}

// chargeComposites checks a random trace of composite takes and charges
// of one to four parts over five keys, each part under a limit drawn anew:
// a charge charges every part, none refused; every part's decision and
// the summary equal the model's (model.ChargeEach, model.TakeEach).
func chargeComposites(c *checker, n int) {
	seed := testenv.Seed(c.t)
	r := rand.New(rand.NewPCG(seed, 47))
	ks := model.NewKeys()
	now, forgiven := Base, 0
	for i := range n {
		now += r.Int64N(300_000) * int64(r.IntN(2))
		kind := []store.Kind{store.Take, store.Charge}[r.IntN(2)]
		op := store.Op{Kind: kind, At: now, MaxDelay: store.Never, Parts: make([]store.Part, 1+r.IntN(4))}
		models, keys, costs := make([]*model.Model, len(op.Parts)), make([]string, len(op.Parts)), make([]int64, len(op.Parts))
		for j, k := range r.Perm(5)[:len(op.Parts)] {
			l := debtParts[r.IntN(len(debtParts))]
			cost := r.Int64N(params(l).Capacity() + 1)
			if kind == store.Charge {
				cost = r.Int64N(3 * (params(l).Capacity() + l.Debt + 1))
			}
			keys[j], costs[j], models[j] = fmt.Sprintf("{debt}k%d", k), cost, ks.Model(modelLimit(l))
			op.Parts[j] = store.Part{Key: keys[j], Limit: l, Cost: cost}
		}
		op = c.one(op)
		each := make([]algo.Decision, len(op.Parts))
		var sum algo.Decision
		if kind == store.Charge {
			sum = model.ChargeEach(models, keys, costs, now, each)
			if !sum.Allowed {
				forgiven++
			}
		} else {
			sum = model.TakeEach(models, keys, costs, now, each)
		}
		for j := range op.Parts {
			if got, w := op.Parts[j].Decision, want(each[j]); got != w {
				c.t.Fatalf("seed %d op %d (%s): part %d:\n got  %+v\n want %+v", seed, i, describe(&op), j, got, w)
			}
		}
		if got, w := op.Decision, want(sum); got != w {
			c.t.Fatalf("seed %d op %d (%s): the summary:\n got  %+v\n want %+v", seed, i, describe(&op), got, w)
		}
	}
	c.t.Logf("%d composite takes and charges, %d charges forgiving units, equal to the model (seed %d)", n, forgiven, seed)
}

// noCharge checks that a charge under an algorithm that cannot carry a
// debt, alone or as a part of a composite, answers an error wrapping
// ErrNoRefund and changes nothing.
func noCharge(c *checker) {
	ks := model.NewKeys()
	tb := limit(algo.TokenBucket, 5, 60_000_000, 5)
	for _, k := range []algo.Kind{algo.LeakyBucket, algo.SlidingWindow, algo.SlidingLog} {
		l := limit(k, 5, 60_000_000, 5)
		key := "{nocharge}" + k.String()
		c.decide(ks, take(key, l, Base, 2))
		parts := []store.Part{{Key: "{nocharge}tb", Limit: tb, Cost: 3}, {Key: key, Limit: l, Cost: 1}}
		for _, op := range []store.Op{charge(key, l, Base+1, 2), {Kind: store.Charge, At: Base + 1, Parts: parts}} {
			got := c.runErr(op)[0]
			if !errors.Is(got.Err, store.ErrNoRefund) || got.Decision != (store.Decision{}) {
				c.t.Fatalf("%s: %+v, error %v; want none and an error wrapping ErrNoRefund", describe(&got), got.Decision, got.Err)
			}
		}
		c.decide(ks, take(key, l, Base+2, 0)) // nothing charged
		c.decide(ks, take("{nocharge}tb", tb, Base+2, 0))
	}
}
