package storetest

import (
	"errors"
	"math/rand/v2"
	"strconv"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/model"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/store"
)

// step is one take of a random trace.
type step struct {
	key       string
	limit     store.Limit
	at, cost  int64
	headroom  int64
	isRefund  bool
	refundWin bool // a refund that names the window of the key's last take
}

// changedTrace draws n takes over three keys, each under one of a few
// limits of every algorithm: a key often stays under one limit for a
// while, then moves to another (a new rate, period or burst, or another
// algorithm, as a rolling deploy does). Gaps run from zero to a few
// periods, costs from 0 to the capacity.
func changedTrace(r *rand.Rand, n int) []step {
	kinds := algo.Kinds()
	shapes := [][2]int64{{3, 1_000_000}, {7, 100_000}, {1, 60_000_000}, {5, 1_000_000}, {4, 2_000_000}, {13, 1000}}
	var limits []store.Limit
	for range 3 + r.IntN(4) {
		k := kinds[r.IntN(len(kinds))]
		sh := shapes[r.IntN(len(shapes))]
		if len(limits) > 0 && r.IntN(2) == 0 { // a variant of a limit drawn before
			q := limits[r.IntN(len(limits))]
			if r.IntN(2) == 0 {
				k = algo.Kind(q.Algorithm)
			} else {
				sh = [2]int64{q.Rate, q.Period}
			}
		}
		burst := 1 + r.Int64N(6)
		if k == algo.LeakyBucket {
			burst--
		}
		limits = append(limits, limit(k, sh[0], sh[1], burst))
	}
	cur := map[string]store.Limit{}
	tr := make([]step, n)
	now := Base + r.Int64N(1_000_000)
	for i := range tr {
		key := "k" + strconv.Itoa(r.IntN(3))
		l, ok := cur[key]
		if !ok || r.IntN(6) == 0 {
			l = limits[r.IntN(len(limits))]
			cur[key] = l
		}
		switch r.IntN(4) {
		case 0: // same instant
		case 1:
			now += r.Int64N(l.Period/l.Rate + 2)
		case 2:
			now += r.Int64N(l.Period + 1)
		default:
			now += r.Int64N(3*l.Period + 1)
		}
		tr[i] = step{key: key, limit: l, at: now, cost: r.Int64N(params(l).Capacity() + 1)}
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
// capacity): every decision equals the model's TakeReserving.
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
		}
		c.run(ops...)
		for j, q := range batch {
			var d algo.Decision
			m := ks.Model(modelLimit(q.limit))
			switch {
			case q.isRefund:
				d = m.Refund(q.key, q.at, q.cost, ops[j].Window)
			default:
				d = m.TakeReserving(q.key, q.at, q.cost, q.headroom)
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
