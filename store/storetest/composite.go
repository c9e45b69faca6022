package storetest

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/model"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/store"
)

// partLimits are the limits a random composite's parts are drawn from.
var partLimits = []store.Limit{
	limit(algo.TokenBucket, 3, 1_000_000, 4),
	limit(algo.GCRA, 3, 1_000_000, 4),
	limit(algo.GCRA, 7, 100_000, 2),
	limit(algo.LeakyBucket, 2, 1_000_000, 3),
	limit(algo.FixedWindow, 6, 1_000_000, 0),
	limit(algo.FixedWindow, 6, 2_000_000, 0),
	limit(algo.AlignedWindow, 4, 1_000_000, 0),
	limit(algo.SlidingWindow, 5, 1_000_000, 0),
	limit(algo.SlidingLog, 4, 1_000_000, 0),
}

// traceComposites checks a fixed case (one user's burst against a
// global limit), then a random trace of composite takes of one to five
// parts over six keys, each part under a limit drawn anew (so a key is
// read under other limits too): every part's decision and the summary
// equal the model's (model.TakeEach, and model.TakeAll for the summary).
func traceComposites(c *checker, n int) {
	oneUserBurst(c)
	compositeTrace(c, n, false)
}

// traceCompositesHeadroom is traceComposites with half the parts leaving
// random headroom (model.TakeEachHeadroom).
func traceCompositesHeadroom(c *checker, n int) { compositeTrace(c, n, true) }

// oneUserBurst checks a composite of a per-user limit of 1 a minute and a
// global one of 10 when one user sends 20 at once: the first passes, the
// others are refused by the user's part, with its RetryAfter, and the
// global part reports its budget as the first left it.
func oneUserBurst(c *checker) {
	user, global := limit(algo.TokenBucket, 1, 60_000_000, 1), limit(algo.TokenBucket, 10, 60_000_000, 10)
	for i := range 20 {
		op := c.one(store.Op{Kind: store.Take, At: Base, MaxDelay: store.Never, Parts: []store.Part{
			{Key: "{burst}user:1", Limit: user, Cost: 1}, {Key: "{burst}global", Limit: global, Cost: 1},
		}})
		wantUser := store.Decision{Allowed: true, ResetAfter: 60_000_000}
		wantGlobal := store.Decision{Allowed: true, Remaining: 9, ResetAfter: 6_000_000}
		sum := store.Decision{Allowed: true, ResetAfter: 60_000_000}
		if i > 0 {
			wantUser = store.Decision{RetryAfter: 60_000_000, ResetAfter: 60_000_000}
			sum = wantUser
		}
		c.expect(fmt.Sprintf("request %d: the user's part", i), op.Parts[0].Decision, wantUser)
		c.expect(fmt.Sprintf("request %d: the global part", i), op.Parts[1].Decision, wantGlobal)
		c.expect(fmt.Sprintf("request %d: the summary", i), op.Decision, sum)
	}
}

// compositeTrace is traceComposites's random trace, with random headroom
// in half the parts when headroom is set.
func compositeTrace(c *checker, n int, headroom bool) {
	seed := testenv.Seed(c.t)
	r := rand.New(rand.NewPCG(seed, 13))
	ks, all := model.NewKeys(), model.NewKeys() // TakeEach's model, TakeAll's
	seen := map[string]int{}
	now := Base
	for i := range n {
		now += r.Int64N(300_000) * int64(r.IntN(2))
		op, models, keys, costs, reserves := randomComposite(r, ks, now, headroom)
		op = c.one(op)
		each := make([]algo.Decision, len(op.Parts))
		sum := model.TakeEachHeadroom(models, keys, costs, reserves, now, each)
		for j := range op.Parts {
			if got, w := op.Parts[j].Decision, want(each[j]); got != w {
				c.t.Fatalf("seed %d op %d (%s): part %d:\n got  %+v\n want %+v", seed, i, describe(&op), j, got, w)
			}
		}
		if !headroom {
			allModels := make([]*model.Model, len(models))
			for j, p := range op.Parts {
				allModels[j] = all.Model(modelLimit(p.Limit))
			}
			if d := model.TakeAll(allModels, keys, costs, now); d != sum {
				c.t.Fatalf("seed %d op %d (%s): the model's TakeAll %+v and TakeEach %+v differ", seed, i, describe(&op), d, sum)
			}
		}
		if got, w := op.Decision, want(sum); got != w {
			c.t.Fatalf("seed %d op %d (%s): the summary:\n got  %+v\n want %+v", seed, i, describe(&op), got, w)
		}
		switch {
		case sum.Allowed:
			seen["allowed"]++
		case len(op.Parts) > 1 && slices.ContainsFunc(each, func(d algo.Decision) bool { return d.Allowed }):
			seen["refused, a part granting"]++
		default:
			seen["refused"]++
		}
	}
	if len(seen) < 3 {
		c.t.Errorf("a trace that tests little: %v", seen)
	}
	c.t.Logf("%v (seed %d)", seen, seed)
}

// randomComposite draws a composite take of one to five parts at now,
// and returns it with its parts' models in ks, keys, costs and reserves
// (nil unless headroom).
func randomComposite(r *rand.Rand, ks *model.Keys, now int64, headroom bool) (op store.Op, models []*model.Model, keys []string, costs, reserves []int64) {
	np := 1 + r.IntN(5)
	perm := r.Perm(6)
	op = store.Op{Kind: store.Take, At: now, MaxDelay: store.Never, Parts: make([]store.Part, np)}
	if headroom {
		reserves = make([]int64, np)
	}
	for j := range op.Parts {
		l := partLimits[r.IntN(len(partLimits))]
		capacity := params(l).Capacity()
		cost := r.Int64N(capacity + 1)
		if r.IntN(3) == 0 {
			cost = min(1, cost)
		}
		key := fmt.Sprintf("{each}k%d", perm[j])
		op.Parts[j] = store.Part{Key: key, Limit: l, Cost: cost}
		if headroom && r.IntN(2) == 0 {
			reserves[j] = r.Int64N(capacity - cost + 1)
			op.Parts[j].Headroom = reserves[j]
		}
		models = append(models, ks.Model(modelLimit(l)))
		keys, costs = append(keys, key), append(costs, cost)
	}
	return op, models, keys, costs, reserves
}
