package storetest

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/model"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// ReserveTrace checks a random trace of n requests whose limits change
// (ChangedTrace), each of a random class (a reserve from 0 to what its
// cost leaves of the capacity), through Limiter.TakeReserving over a store
// that decides by a clock the trace sets: every decision equals the
// model's TakeReserving.
func ReserveTrace(t *testing.T, newStore NewStore, n int) {
	seed := testenv.Seed(t)
	r := rand.New(rand.NewPCG(seed, 29))
	clock := new(setClock)
	lim := sluice.New(newStore(t, clock))
	ks := model.NewKeys()
	ctx := context.Background()
	for i, q := range ChangedTrace(r, n) {
		clock.us.Store(q.Now)
		l := sluice.Limit{Algorithm: sluice.Algorithm(q.Params.Kind), Rate: q.Params.Rate, Period: time.Duration(q.Params.Period) * time.Microsecond, Burst: q.Params.Burst}
		reserve := r.Int64N(q.Params.Capacity() - q.Cost + 1)
		got, err := lim.TakeReserving(ctx, q.Key, l, q.Cost, reserve)
		if err != nil {
			t.Fatalf("seed %d request %d: %v", seed, i, err)
		}
		want := resultOf(ks.Model(ModelLimit(q.Params)).TakeReserving(q.Key, q.Now, q.Cost, reserve))
		if got != want {
			t.Fatalf("seed %d request %d (%s %v cost %d reserve %d at +%dµs): %+v, model %+v", seed, i, q.Key, l, q.Cost, reserve, q.Now-Base, got, want)
		}
	}
	t.Logf("%d requests of random classes equal to the model (seed %d)", n, seed)
}
