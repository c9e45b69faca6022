package storetest

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/model"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// ReserveTrace checks a random trace of n requests whose limits change
// (ChangedTrace), each of a random class (a headroom from 0 to what its
// cost leaves of the capacity), through a one-part Limiter.TakeAll with
// Headroom over a store that decides by a clock the trace sets, and
// through the store's Run as a single Take with Headroom at the trace's
// times, on keys of its own ("r:" and the key): every decision equals the
// model's, model.TakeEachHeadroom's for the composite and
// Model.TakeHeadroom's for the single Take.
func ReserveTrace(t *testing.T, newStore NewStore, n int) {
	seed := testenv.Seed(t)
	r := rand.New(rand.NewPCG(seed, 29))
	clock := new(setClock)
	st := newStore(t, clock)
	lim := sluice.New(st)
	ks, rks := model.NewKeys(), model.NewKeys() // the Limiter's, Run's
	ctx := context.Background()
	for i, q := range ChangedTrace(r, n) {
		clock.us.Store(q.Now)
		l := sluice.Limit{Algorithm: sluice.Algorithm(q.Params.Kind), Rate: q.Params.Rate, Period: time.Duration(q.Params.Period) * time.Microsecond, Burst: q.Params.Burst}
		reserve := r.Int64N(q.Params.Capacity() - q.Cost + 1)
		got, err := lim.TakeAll(ctx, []sluice.Part{{Key: q.Key, Limit: l, Cost: q.Cost, Headroom: reserve}}, nil)
		if err != nil {
			t.Fatalf("seed %d request %d: %v", seed, i, err)
		}
		// A one-part composite: a refusal leaves the key's state as it
		// was, where a single take's stores it as the new limit reads it.
		want := resultOf(model.TakeEachHeadroom([]*model.Model{ks.Model(ModelLimit(q.Params))}, []string{q.Key}, []int64{q.Cost}, []int64{reserve}, q.Now, make([]algo.Decision, 1)))
		if got != want {
			t.Fatalf("seed %d request %d (%s %v cost %d headroom %d at +%dµs): %+v, model %+v", seed, i, q.Key, l, q.Cost, reserve, q.Now-Base, got, want)
		}
		key := "r:" + q.Key
		d, err := TakeAt(ctx, st, storelink.Request{Key: key, Params: q.Params, Cost: q.Cost, MaxDelay: algo.Never, Reserve: reserve}, q.Now)
		if err != nil {
			t.Fatalf("seed %d request %d, through Run: %v", seed, i, err)
		}
		d.FreshAt = 0
		wantD := rks.Model(ModelLimit(q.Params)).TakeHeadroom(key, q.Now, q.Cost, reserve)
		if wantD.FreshAt = 0; d != wantD {
			t.Fatalf("seed %d request %d (%s %v cost %d headroom %d at +%dµs), through Run: %+v, model %+v", seed, i, key, l, q.Cost, reserve, q.Now-Base, d, wantD)
		}
	}
	t.Logf("%d requests of random classes equal to the model, through a Limiter and through Run (seed %d)", n, seed)
}
