package model_test

import (
	"math/rand/v2"
	"testing"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/model"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

func TestLeaseTakeSpendsAtMostWhatIsAvailable(t *testing.T) {
	m := model.New(algo.TokenBucket, 10, 1000, 10)
	// Fresh: 10 available; a want of 4 with cost 1 spends 4.
	d, got := m.LeaseTake("k", 0, 1, 4)
	if !d.Allowed || got != 4 || d.Remaining != 6 {
		t.Fatalf("first slice: %+v, got %d", d, got)
	}
	// 6 left: a want of 50 spends the 6, never more.
	if d, got = m.LeaseTake("k", 0, 1, 50); !d.Allowed || got != 6 || d.Remaining != 0 {
		t.Fatalf("second slice: %+v, got %d", d, got)
	}
	// Empty: refused, nothing spent, the refusal's figures.
	if d, got = m.LeaseTake("k", 0, 1, 50); d.Allowed || got != 0 || d.RetryAfter != 100 {
		t.Fatalf("third slice: %+v, got %d", d, got)
	}
	// A prefetch (cost 0) on an empty key takes nothing and is allowed.
	if d, got = m.LeaseTake("k", 0, 0, 5); !d.Allowed || got != 0 {
		t.Fatalf("prefetch: %+v, got %d", d, got)
	}
}

func TestLeaseLocalDecisionsByHand(t *testing.T) {
	ks := model.NewKeys()
	lim := model.Limit{Kind: algo.FixedWindow, Rate: 10, Period: 100}
	p := ks.Process(1000)
	// The first take spends 1 + 4 more: a lease of 4 until the window's end;
	// remaining counts the 5 left in the store and the lease's 4.
	d, local := p.Take("k", lim, 10, 1, 5)
	if local || !d.Allowed || d.Window != 110 || d.Remaining != 9 {
		t.Fatalf("first: %+v local=%v", d, local)
	}
	d, local = p.Take("k", lim, 20, 3, 5)
	if want := (algo.Decision{Allowed: true, Remaining: 1, ResetAfter: 90, Window: 110}); !local || d != want {
		t.Fatalf("second: %+v local=%v, want %+v local", d, local, want)
	}
	// Two units do not fit the lease's one: it is given back (a refund
	// naming its window) and the store takes 2 + 3 more: 4 + 5 spent, and
	// the lease's 3.
	d, local = p.Take("k", lim, 30, 2, 5)
	if local || !d.Allowed || d.Remaining != 10-4-5+3 {
		t.Fatalf("third: %+v local=%v", d, local)
	}
	if p.Held("k", 30) != 3 {
		t.Fatalf("held %d, want 3", p.Held("k", 30))
	}
	// The window ends at 110: the lease runs out with it, unspent.
	if d, local = p.Take("k", lim, 110, 1, 1); local || !d.Allowed || d.Window != 210 || p.Held("k", 110) != 0 {
		t.Fatalf("after the window: %+v local=%v held=%d", d, local, p.Held("k", 110))
	}
}

// TestLeaseBoundOnRandomTraces runs many processes with leases on random
// traces over one key space (changed limits, refunds, give-backs, prefetches)
// and checks every admission against SEMANTICS.md's bound.
func TestLeaseBoundOnRandomTraces(t *testing.T) {
	rng := rand.New(rand.NewPCG(testenv.SeedOr(t, 24), 24))
	var local, inStore int
	for trace := range 300 {
		kind := []algo.Kind{algo.TokenBucket, algo.GCRA, algo.FixedWindow, algo.AlignedWindow}[trace%4]
		l, s := runLeaseTrace(t, rng, trace, kind)
		local, inStore = local+l, inStore+s
	}
	// The traces must exercise the leases, not only the store.
	if local < inStore/10 {
		t.Fatalf("%d decisions from leases, %d in the store: the traces barely lease", local, inStore)
	}
	t.Logf("%d decisions from leases, %d in the store", local, inStore)
}

// leaseTrace is one random multi-process trace's setting.
type leaseTrace struct {
	procs          []*model.Process
	lims           []model.Limit
	adm            []model.Admission
	owed           [][]model.Admission // per process: admissions it may refund
	maxRate, maxB  int64
	period, life   int64
	local, inStore int
}

func runLeaseTrace(t *testing.T, rng *rand.Rand, trace int, kind algo.Kind) (local, inStore int) {
	t.Helper()
	ks := model.NewKeys()
	tr := &leaseTrace{period: int64(1 + rng.IntN(200)), life: int64(1 + rng.IntN(400))}
	// Changed limits change the rate and, for the buckets, the algorithm:
	// a burst lowered then raised forgets spent units without leases too
	// (a bucket is at most empty), so no bound spans it.
	burst := int64(1 + rng.IntN(20))
	for range 1 + rng.IntN(3) {
		l := model.Limit{Kind: kind, Rate: int64(1 + rng.IntN(20)), Period: tr.period, Burst: burst}
		if kind == algo.TokenBucket || kind == algo.GCRA {
			l.Kind = []algo.Kind{algo.TokenBucket, algo.GCRA}[rng.IntN(2)]
		} else {
			l.Burst = 0
		}
		tr.lims = append(tr.lims, l)
		tr.maxRate, tr.maxB = max(tr.maxRate, l.Rate), max(tr.maxB, l.Burst)
	}
	n := 2 + rng.IntN(5)
	for range n {
		tr.procs = append(tr.procs, ks.Process(tr.life))
	}
	tr.owed = make([][]model.Admission, n)
	now := int64(1_000)
	for range 400 {
		now += int64(rng.IntN(int(tr.period/4 + 2)))
		tr.step(rng, now)
	}
	var err error
	if kind == algo.TokenBucket || kind == algo.GCRA {
		err = model.CheckBucketBound(tr.adm, tr.maxB, tr.maxRate, tr.period, tr.life)
	} else {
		err = model.CheckWindowBound(tr.adm, tr.maxRate, tr.period)
	}
	if err != nil {
		t.Fatalf("trace %d (%v, %d processes, limits %+v, life %d): %v", trace, kind, n, tr.lims, tr.life, err)
	}
	return tr.local, tr.inStore
}

// step makes one random event at now: a take, a prefetch, a give-back or a
// refund of earlier admitted units, by a random process.
func (tr *leaseTrace) step(rng *rand.Rand, now int64) {
	i := rng.IntN(len(tr.procs))
	p := tr.procs[i]
	lim := tr.lims[rng.IntN(len(tr.lims))]
	capacity := lim.Capacity()
	switch r := rng.IntN(20); {
	case r < 14:
		cost := int64(rng.IntN(int(min(capacity, 4)) + 1))
		want := cost + int64(rng.IntN(int(capacity)))
		d, local := p.Take("k", lim, now, cost, want)
		if local {
			tr.local++
		} else {
			tr.inStore++
		}
		if d.Allowed && cost > 0 {
			a := model.Admission{T: now, Units: cost, Window: d.Window}
			tr.adm = append(tr.adm, a)
			tr.owed[i] = append(tr.owed[i], a)
		}
	case r < 16:
		p.Refill("k", lim, now, 0, int64(1+rng.IntN(int(capacity))))
	case r < 18:
		p.GiveBack("k", now)
	default:
		if len(tr.owed[i]) == 0 {
			return
		}
		j := rng.IntN(len(tr.owed[i]))
		a := tr.owed[i][j]
		tr.owed[i] = append(tr.owed[i][:j], tr.owed[i][j+1:]...)
		p.Refund("k", lim, now, a)
		tr.adm = append(tr.adm, model.Admission{T: now, Units: -a.Units, Window: a.Window})
	}
}
