package storetest

import (
	"errors"
	"math/rand/v2"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/model"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/internal/testsupport/traces"
	"github.com/sluice-go/sluice/store"
)

// step is one op of a random trace: a take, a refund or a charge.
type step struct {
	key       string
	limit     store.Limit
	at, cost  int64
	headroom  int64
	isRefund  bool
	refundWin bool // a refund that names the window of the key's last take
	isCharge  bool
}

// changedTrace draws n takes over three keys, each under one of a few
// limits of every algorithm: a key often stays under one limit for a
// while, then moves to another (a new rate, period or burst, or another
// algorithm, as a rolling deploy does). Gaps run from zero to a few
// periods, costs from 0 to the capacity.
func changedTrace(r *rand.Rand, n int) []step {
	tr := make([]step, 0, n)
	for _, q := range traces.Changed(r, n) {
		tr = append(tr, step{key: q.Key, limit: storelink.LimitOf(&q.Params), at: q.Now, cost: q.Cost})
	}
	return tr
}

// traceRates checks a random trace of takes whose limits change: every
// decision equals the model's. About one op in four under an algorithm
// that can give units back is a refund of its cost instead, half of them
// naming the window of the key's last take (unless the store does not
// support refunds). The ops go to the store in batches of one to four.
func traceRates(c *checker, n int) {
	seed := testenv.Seed(c.t)
	r := rand.New(rand.NewPCG(seed, 7))
	tr := changedTrace(r, n)
	canRefund := c.supports(refund("probe", limit(algo.TokenBucket, 1, 1000, 1), Base, 0, 0))
	refunds := 0
	for i := range tr {
		if q := &tr[i]; canRefund && refundable(algo.Kind(q.limit.Algorithm)) && r.IntN(4) == 0 {
			q.isRefund, q.refundWin = true, r.IntN(2) == 0
			refunds++
		}
	}
	c.replay(seed, tr)
	c.t.Logf("%d ops, %d of them refunds, equal to the model (seed %d)", n, refunds, seed)
}

// traceHeadroom checks a random trace of takes whose limits change, each
// leaving random headroom (from 0 to what its cost leaves of the
// capacity): every decision equals the model's TakeHeadroom.
func traceHeadroom(c *checker, n int) {
	seed := testenv.Seed(c.t)
	r := rand.New(rand.NewPCG(seed, 29))
	tr := changedTrace(r, n)
	for i := range tr {
		tr[i].headroom = r.Int64N(params(tr[i].limit).Capacity() - tr[i].cost + 1)
	}
	c.replay(seed, tr)
	c.t.Logf("%d takes with headroom equal to the model (seed %d)", n, seed)
}

// replay sends the trace tr to the store in batches of one to four ops
// and checks every answer against the model.
func (c *checker) replay(seed uint64, tr []step) {
	c.t.Helper()
	r := rand.New(rand.NewPCG(seed, 9))
	ks := model.NewKeys()
	windows := map[string]int64{} // each key's last take's window
	for i := 0; i < len(tr); {
		batch := tr[i:min(len(tr), i+1+r.IntN(4))]
		ops := make([]store.Op, len(batch))
		for j, q := range batch {
			ops[j] = take(q.key, q.limit, q.at, q.cost)
			ops[j].Headroom = q.headroom
			if q.isRefund {
				w := int64(0)
				if q.refundWin {
					w = windows[q.key]
				}
				ops[j] = refund(q.key, q.limit, q.at, q.cost, w)
			}
			if q.isCharge {
				ops[j] = charge(q.key, q.limit, q.at, q.cost)
			}
		}
		c.run(ops...)
		for j, q := range batch {
			var d algo.Decision
			m := ks.Model(modelLimit(q.limit))
			switch {
			case q.isRefund:
				d = m.Refund(q.key, q.at, q.cost, ops[j].Window)
			case q.isCharge:
				d, _ = m.Charge(q.key, q.at, q.cost)
			default:
				d = m.TakeHeadroom(q.key, q.at, q.cost, q.headroom)
				if q.cost > 0 {
					windows[q.key] = ops[j].Decision.Window
				}
			}
			if got, w := ops[j].Decision, want(d); got != w {
				c.t.Fatalf("seed %d op %d (%s):\n got  %+v\n want %+v", seed, i+j, describe(&ops[j]), got, w)
			}
		}
		i += len(batch)
	}
}

// supports runs op and reports whether the store supports it (it did not
// answer errors.ErrUnsupported); any other error fails the test.
func (c *checker) supports(op store.Op) bool {
	c.t.Helper()
	ops := []store.Op{op}
	c.s.Run(c.t.Context(), ops)
	if errors.Is(ops[0].Err, errors.ErrUnsupported) {
		c.t.Logf("the store does not support %s (%v): not checked", describe(&ops[0]), ops[0].Err)
		return false
	}
	if ops[0].Err != nil {
		c.t.Fatalf("%s: %v", describe(&ops[0]), ops[0].Err)
	}
	return true
}
