package rlqs

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// TestHottest drives budgets with random demand, holders that come, go
// and fall silent, and reloads that change a budget's fill, and checks
// after each step that Hottest lists what sorting every budget by its
// holders' demand per second lists, with the shares of the largest grants.
func TestHottest(t *testing.T) {
	seed := testenv.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 7))
	h := newHarness(t, Config{})
	budgets := make([]Budget, 30)
	for i := range budgets {
		budgets[i] = Budget{Key: fmt.Sprint("k", i), Family: "f", Rate: int64(10 + rng.IntN(1000)), Fill: time.Second}
	}
	var next Holder
	type hold struct {
		id Holder
		b  int
		r  uint64
	}
	var holds []hold
	for step := range 200 {
		switch {
		case len(holds) < 80 && rng.IntN(3) == 0:
			next++
			holds = append(holds, hold{next, rng.IntN(len(budgets)), uint64(rng.IntN(500))})
		case len(holds) > 0 && rng.IntN(8) == 0:
			i := rng.IntN(len(holds))
			h.a.Close(holds[i].id)
			holds = slices.Delete(holds, i, i+1)
		case rng.IntN(20) == 0:
			b := &budgets[rng.IntN(len(budgets))]
			b.Fill = time.Duration(1+rng.IntN(3)) * time.Second
		}
		h.advance(time.Duration(200+rng.IntN(1200)) * time.Millisecond)
		for i := range holds {
			if rng.IntN(2) == 0 {
				holds[i].r = uint64(rng.IntN(500))
			}
			if rng.IntN(4) != 0 {
				h.report(budgets[holds[i].b], holds[i].id, 1, holds[i].r, 0)
			}
		}
		h.round()
		checkHottest(t, h.a, h.now, step, seed)
	}
}

func checkHottest(t *testing.T, a *Allocator, now int64, step int, seed uint64) {
	t.Helper()
	for i, bk := range a.hot {
		var sum int64
		for _, ho := range bk.holders {
			sum += demandOf(ho)
		}
		if bk.hot != i || sum != bk.demand {
			t.Fatalf("seed %d step %d: budget %q at %d (says %d), demand %d, its holders' %d", seed, step, bk.key, i, bk.hot, bk.demand, sum)
		}
		if i > 0 && hotter(bk, a.hot[(i-1)/2]) {
			t.Fatalf("seed %d step %d: budget %q hotter than its parent", seed, step, bk.key)
		}
	}
	if len(a.hot) != len(a.list) {
		t.Fatalf("seed %d step %d: %d budgets in the heap, %d in the list", seed, step, len(a.hot), len(a.list))
	}
	want := slices.Clone(a.list)
	slices.SortStableFunc(want, func(x, y *bucket) int {
		return cmpProducts(uint64(y.demand), uint64(x.fill), uint64(x.demand), uint64(y.fill))
	})
	const n, m = 7, 3
	var got []*BucketView
	a.Hottest(now, n, m, func(v *BucketView) bool { got = append(got, v); return true })
	if len(got) != min(n, len(want)) {
		t.Fatalf("seed %d step %d: %d budgets shown, want %d", seed, step, len(got), min(n, len(want)))
	}
	for i, v := range got {
		// Ties may come in any order: compare the demand per second.
		w := want[i]
		b := a.buckets[v.Key]
		if cmpProducts(uint64(b.demand), uint64(w.fill), uint64(w.demand), uint64(b.fill)) != 0 {
			t.Fatalf("seed %d step %d: #%d is %q (demand %d per %d), want %q's %d per %d", seed, step, i, v.Key, b.demand, b.fill, w.key, w.demand, w.fill)
		}
		if v.Room != v.Rate-v.Outstanding || v.Holders != len(b.holders) || len(v.Shares) != min(m, len(b.holders)) {
			t.Fatalf("seed %d step %d: %q: %+v", seed, step, v.Key, v)
		}
		grants := make([]int64, 0, len(b.holders))
		for _, ho := range b.holders {
			grants = append(grants, a.granted(now, ho))
		}
		slices.SortFunc(grants, func(x, y int64) int { return cmp.Compare(y, x) })
		for j, s := range v.Shares {
			if s.Granted != grants[j] || s.Outstanding < s.Granted || s.Granted > 0 && s.GrantEnds <= 0 {
				t.Fatalf("seed %d step %d: %q share %d: %+v, want a grant of %d", seed, step, v.Key, j, s, grants[j])
			}
		}
	}
	// f returning false stops the walk.
	calls := 0
	a.Hottest(now, n, m, func(*BucketView) bool { calls++; return false })
	if len(a.list) > 0 && calls != 1 {
		t.Fatalf("seed %d step %d: %d calls after a false", seed, step, calls)
	}
}
