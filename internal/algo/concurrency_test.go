package algo_test

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/model"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// holdOp is one operation of a hold trace and the decision it must get.
type holdOp struct {
	op, now, units, id int64
	allowed            bool
	remaining, retry   int64
	reset, expiry      int64
}

func runHolds(t *testing.T, c algo.Concurrency, ops []holdOp) {
	t.Helper()
	var held algo.Holds
	for i, o := range ops {
		var d algo.Decision
		exp, err := algo.HoldStep(&c, &held, o.op, o.now, o.units, o.id, &d)
		if err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		got := holdOp{o.op, o.now, o.units, o.id, d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter, exp}
		if got != o {
			t.Fatalf("op %d: got %+v, want %+v", i, got, o)
		}
		if d.FreshAt != o.now+d.ResetAfter {
			t.Fatalf("op %d: FreshAt %d, want now + ResetAfter = %d", i, d.FreshAt, o.now+d.ResetAfter)
		}
	}
}

func TestHoldStepByHand(t *testing.T) {
	const acq, rel, ext = algo.OpAcquire, algo.OpRelease, algo.OpExtend
	c := algo.Concurrency{Limit: 3, Lifetime: 100}
	runHolds(t, c, []holdOp{
		{acq, 0, 1, 1, true, 2, 0, 100, 100},
		{acq, 10, 2, 2, true, 0, 0, 100, 110},
		{acq, 20, 1, 3, false, 0, 80, 90, 0},   // hold 1 comes back at 100
		{acq, 20, 3, 3, false, 0, 90, 90, 0},   // needs both: the later, 110
		{acq, 20, 0, 3, true, 0, 0, 90, 0},     // a query always passes
		{rel, 30, 0, 2, true, 2, 0, 70, 0},     // hold 2 back: 2 free
		{rel, 30, 0, 2, false, 2, 0, 70, 0},    // twice: nothing more
		{ext, 40, 0, 1, true, 2, 0, 100, 140},  // held until 140
		{acq, 99, 2, 4, true, 0, 0, 100, 199},  // limit full again
		{acq, 139, 1, 5, false, 0, 1, 60, 0},   // hold 1 ends at 140, not before
		{acq, 140, 1, 5, true, 0, 0, 100, 240}, // and not after
		{rel, 150, 0, 1, false, 0, 0, 90, 0},   // hold 1 had come back
		{ext, 250, 0, 4, false, 3, 0, 0, 0},    // hold 4 too: an empty key is fresh
	})
}

// TestHoldStepLoweredLimit: a limit lowered below the units held refuses
// until enough holds have come back, and reports no negative remainder.
func TestHoldStepLoweredLimit(t *testing.T) {
	var held algo.Holds
	c := algo.Concurrency{Limit: 4, Lifetime: 10}
	for id := int64(1); id <= 4; id++ {
		var d algo.Decision
		if _, err := algo.HoldStep(&c, &held, algo.OpAcquire, id, 1, id, &d); err != nil || !d.Allowed {
			t.Fatalf("acquire %d: %+v %v", id, d, err)
		}
	}
	low := algo.Concurrency{Limit: 2, Lifetime: 10}
	var d algo.Decision
	algo.HoldStep(&low, &held, algo.OpAcquire, 5, 1, 9, &d)
	if d.Allowed || d.Remaining != 0 || d.RetryAfter != 13-5 {
		t.Fatalf("under the lowered limit: %+v, want refused, remaining 0, retry 8 (holds 1..3 back at 13)", d)
	}
}

func TestHoldStepIDInUse(t *testing.T) {
	c := algo.Concurrency{Limit: 5, Lifetime: 10}
	var held algo.Holds
	var d algo.Decision
	algo.HoldStep(&c, &held, algo.OpAcquire, 0, 1, 7, &d)
	d = algo.Decision{}
	if _, err := algo.HoldStep(&c, &held, algo.OpAcquire, 5, 1, 7, &d); !errors.Is(err, algo.ErrHoldID) {
		t.Fatalf("an id still held: err %v, want ErrHoldID", err)
	}
	if held.Len() != 1 {
		t.Fatalf("the refused id changed the holds: %v", held)
	}
	d = algo.Decision{}
	if _, err := algo.HoldStep(&c, &held, algo.OpAcquire, 10, 1, 7, &d); err != nil || !d.Allowed {
		t.Fatalf("the id once its hold came back: %+v %v", d, err)
	}
}

func TestConcurrencyValidate(t *testing.T) {
	for _, c := range []algo.Concurrency{{0, 1}, {-1, 1}, {1, 0}, {1, -5}, {algo.MaxScaled + 1, 1}, {1, algo.MaxScaled + 1}} {
		if err := c.Validate(); !errors.Is(err, algo.ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", c, err)
		}
	}
	if err := (algo.Concurrency{Limit: 1, Lifetime: 1}).Validate(); err != nil {
		t.Error(err)
	}
}

// TestHoldStepMatchesModel runs random traces of acquires, releases and
// extensions over a few keys through HoldStep and the model: every
// decision, and the hold's expiry, must agree, and the units held never
// pass the limit in force.
func TestHoldStepMatchesModel(t *testing.T) {
	r := rand.New(rand.NewPCG(testenv.Seed(t), 25))
	for trace := range 300 {
		limit := 1 + r.Int64N(6)
		lifetime := 1 + r.Int64N(50)
		keys := []string{"a", "b"}
		states := map[string]algo.Holds{}
		m := model.NewHolds()
		ids := map[string][]int64{} // every id acquired on a key, held or not
		now, next := t0, int64(1)
		for i := range 200 {
			now += r.Int64N(12)
			key := keys[r.IntN(len(keys))]
			lim := limit
			if r.IntN(10) == 0 {
				lim = 1 + r.Int64N(6) // a changed limit
			}
			life := lifetime
			if r.IntN(4) == 0 {
				life = 1 + r.Int64N(50)
			}
			c := algo.Concurrency{Limit: lim, Lifetime: life}
			var op, units, id int64
			switch k := r.IntN(10); {
			case k < 5 || len(ids[key]) == 0:
				op, units, id = algo.OpAcquire, r.Int64N(lim+1), next
				next++
			case k < 8:
				op, id = algo.OpRelease, ids[key][r.IntN(len(ids[key]))]
			default:
				op, id = algo.OpExtend, ids[key][r.IntN(len(ids[key]))]
			}
			held := states[key]
			var d algo.Decision
			exp, err := algo.HoldStep(&c, &held, op, now, units, id, &d)
			if err != nil {
				t.Fatalf("trace %d op %d: %v", trace, i, err)
			}
			states[key] = held
			var want algo.Decision
			switch op {
			case algo.OpAcquire:
				want = m.Acquire(key, lim, life, now, units, id)
				if d.Allowed && units > 0 {
					ids[key] = append(ids[key], id)
				}
			case algo.OpRelease:
				want = m.Release(key, lim, now, id)
			default:
				want = m.Extend(key, lim, life, now, id)
			}
			if !same(d, want) {
				t.Fatalf("trace %d op %d (op %d key %s units %d id %d at %d, limit %d life %d): got %+v, model %+v",
					trace, i, op, key, units, id, now, lim, life, d, want)
			}
			if wantExp := now + life; d.Allowed && (op == algo.OpExtend || op == algo.OpAcquire && units > 0) && exp != wantExp {
				t.Fatalf("trace %d op %d: expiry %d, want %d", trace, i, exp, wantExp)
			}
			if op == algo.OpAcquire && d.Allowed && units > 0 && m.Held(key, now) > lim {
				t.Fatalf("trace %d op %d: %d units held over the limit %d", trace, i, m.Held(key, now), lim)
			}
		}
	}
}

// TestHoldStepMatchesModelAcrossSizes is TestHoldStepMatchesModel with
// limits large enough for a key's holds to pass from the slice to the
// index and back (see Holds): phases of acquires, then of releases and
// of waits that let many holds come back at once, units of one to four,
// lifetimes that put a new hold anywhere among the others, lowered
// limits and refusals that walk many holds. Every decision and expiry
// must be the model's.
func TestHoldStepMatchesModelAcrossSizes(t *testing.T) {
	r := rand.New(rand.NewPCG(testenv.Seed(t), 33))
	crossings := 0 // past 32 holds (indexed), then down to 8 (a slice again), ...
	for trace := range 40 {
		limit := 40 + r.Int64N(120)
		var held algo.Holds
		many := false
		m := model.NewHolds()
		var ids []int64
		now, next := t0, int64(1)
		for i := range 1500 {
			grow := (i/150)%2 == 0
			c := algo.Concurrency{Limit: limit, Lifetime: 1 + r.Int64N(3000)}
			if r.IntN(20) == 0 {
				c.Limit = 1 + r.Int64N(limit) // lowered for one call
			}
			lim := c.Limit
			op, units, id := algo.OpAcquire, min(lim, 1+r.Int64N(4)), next
			switch k := r.IntN(10); {
			case r.IntN(30) == 0:
				units = r.Int64N(lim + 1) // a query, or a refusal that walks far
				next++
			case len(ids) > 0 && (!grow && k < 6 || grow && k < 2):
				op, units, id = algo.OpRelease, 0, ids[r.IntN(len(ids))]
			case len(ids) > 0 && k < 7:
				op, units, id = algo.OpExtend, 0, ids[r.IntN(len(ids))]
			default:
				next++
			}
			var d algo.Decision
			exp, err := algo.HoldStep(&c, &held, op, now, units, id, &d)
			if err != nil {
				t.Fatalf("trace %d op %d: %v", trace, i, err)
			}
			want := modelHold(m, "k", &c, op, now, units, id)
			if op == algo.OpAcquire && d.Allowed && units > 0 {
				ids = append(ids, id)
			}
			if !same(d, want) {
				t.Fatalf("trace %d op %d (op %d units %d id %d at %d, limit %d life %d, %d holds kept): got %+v, model %+v",
					trace, i, op, units, id, now, c.Limit, c.Lifetime, held.Len(), d, want)
			}
			if d.Allowed && (op == algo.OpExtend || op == algo.OpAcquire && units > 0) && exp != now+c.Lifetime {
				t.Fatalf("trace %d op %d: expiry %d, want %d", trace, i, exp, now+c.Lifetime)
			}
			if n := held.Len(); many && n <= 8 || !many && n > 32 {
				many = !many
				crossings++
			}
			now += r.Int64N(8)
			if !grow && r.IntN(100) == 0 {
				now += r.Int64N(3000) // many holds come back at once
			}
		}
	}
	t.Logf("%d crossings of the sizes between the slice and the index", crossings)
	if crossings < 40 {
		t.Fatalf("%d crossings of the sizes between the slice and the index, want at least 40", crossings)
	}
}

// modelHold is the model's decision for the hold operation op on key.
func modelHold(m *model.Holds, key string, c *algo.Concurrency, op, now, units, id int64) algo.Decision {
	switch op {
	case algo.OpAcquire:
		return m.Acquire(key, c.Limit, c.Lifetime, now, units, id)
	case algo.OpRelease:
		return m.Release(key, c.Limit, now, id)
	}
	return m.Extend(key, c.Limit, c.Lifetime, now, id)
}
