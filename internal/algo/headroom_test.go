package algo_test

import (
	"math/rand/v2"
	"testing"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/model"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// TestStepReservingByHand: a token bucket of 10 with 2 reserved for
// critical requests: a normal request passes while 2 tokens stay after
// it, then waits for the bucket to hold cost + 2; a critical one takes the
// rest.
func TestStepReservingByHand(t *testing.T) {
	p := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: 1_000_000, Burst: 10}
	var s algo.State
	for i := range 8 {
		var d algo.Decision
		algo.StepHeadroom(&p, &s, t0, 1, 2, algo.Never, &d)
		if !d.Allowed || d.Remaining != int64(7-i) {
			t.Fatalf("normal %d: %+v", i, d)
		}
	}
	var d algo.Decision
	algo.StepHeadroom(&p, &s, t0, 1, 2, algo.Never, &d)
	if d.Allowed || d.Remaining != 0 || d.RetryAfter != 1_000_000 {
		t.Fatalf("normal past its share: %+v, want refused, retry 1s (a third token)", d)
	}
	for i := range 2 {
		d = algo.Decision{}
		algo.StepHeadroom(&p, &s, t0, 1, 0, algo.Never, &d)
		if !d.Allowed {
			t.Fatalf("critical %d refused", i)
		}
	}
}

// TestStepReservingMatchesModel: random traces of requests of random
// classes under every algorithm, limits changing now and then, through
// StepHeadroom and the model's TakeHeadroom: every decision agrees.
func TestStepReservingMatchesModel(t *testing.T) {
	r := rand.New(rand.NewPCG(testenv.Seed(t), 28))
	for trace := range 200 {
		ks := model.NewKeys()
		states := map[string]*algo.State{"a": {}, "b": {}}
		now := t0
		var p algo.Params
		for i := range 150 {
			if i == 0 || r.IntN(20) == 0 {
				rt := rates[r.IntN(len(rates))]
				p = algo.Params{Kind: algo.Kinds()[r.IntN(len(algo.Kinds()))], Rate: rt.rate, Period: rt.period, Burst: 1 + r.Int64N(6)}
				if p.Validate() != nil {
					p = algo.Params{Kind: algo.TokenBucket, Rate: 3, Period: 1_000_000, Burst: 5}
				}
			}
			now += r.Int64N(p.Period/3 + 2)
			key := []string{"a", "b"}[r.IntN(2)]
			c := p.Capacity()
			reserve := r.Int64N(c)
			cost := r.Int64N(c - reserve + 1)
			var d algo.Decision
			algo.StepHeadroom(&p, states[key], now, cost, reserve, algo.Never, &d)
			m := ks.Model(model.Limit{Kind: p.Kind, Rate: p.Rate, Period: p.Period, Burst: p.Burst})
			want := m.TakeHeadroom(key, now, cost, reserve)
			if !same(d, want) {
				t.Fatalf("trace %d request %d (%v %+v, %s cost %d reserve %d at %d): got %+v, model %+v", trace, i, p.Kind, p, key, cost, reserve, now, d, want)
			}
		}
	}
}
