package model_test

import (
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/model"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// A charge worked out by hand from SEMANTICS.md: a token bucket of 3/s,
// burst 2, debt allowance 4 (T = 333333⅓ µs).
func TestChargeByHand(t *testing.T) {
	m := model.NewKeys().Model(model.Limit{Kind: algo.TokenBucket, Rate: 3, Period: 1_000_000, Burst: 2, Debt: 4})
	d, charged := m.Charge("k", 0, 5)
	if want := (algo.Decision{Allowed: true, Remaining: -3, ResetAfter: 1_666_667}); d != want || charged.Cmp(big.NewRat(5, 1)) != 0 {
		t.Fatalf("5 charged of 2: %+v (%s charged), want %+v", d, charged, want)
	}
	// At 500000 µs, 1.5 units have come back: x = −1.5; a take of 1 waits
	// for 2.5 more, 833333⅓ µs.
	if d := m.Take("k", 500_000, 1); d.Allowed || d.Remaining != -2 || d.RetryAfter != 833_334 {
		t.Fatalf("a take in debt: %+v", d)
	}
	// x + D = 2.5 units fit; the other 7.5 are forgiven.
	d, charged = m.Charge("k", 500_000, 10)
	if d.Allowed || d.Remaining != -4 || charged.Cmp(big.NewRat(5, 2)) != 0 {
		t.Fatalf("a charge past the allowance: %+v (%s charged)", d, charged)
	}
	// A refund pays the debt back first.
	if d := m.Refund("k", 500_000, 3, 0); !d.Allowed || d.Remaining != -1 {
		t.Fatalf("a refund of 3 in debt 4: %+v", d)
	}
}

// debtLimits are the limits the bound is checked under (units per period
// in µs, burst), each with debt allowances of 0, 1, about a rate and
// several capacities.
var debtLimits = []model.Limit{
	{Kind: algo.TokenBucket, Rate: 3, Period: 1_000_000, Burst: 2},
	{Kind: algo.GCRA, Rate: 7, Period: 100_000, Burst: 5},
	{Kind: algo.TokenBucket, Rate: 13, Period: 1000, Burst: 1},
	{Kind: algo.GCRA, Rate: 2, Period: 3, Burst: 4},
	{Kind: algo.FixedWindow, Rate: 5, Period: 1_000_000},
	{Kind: algo.FixedWindow, Rate: 1, Period: 1000},
	{Kind: algo.AlignedWindow, Rate: 4, Period: 2_000_000},
	{Kind: algo.AlignedWindow, Rate: 10, Period: 70},
}

// TestDebtBound checks SEMANTICS.md's bound under debt on random traces of
// one key: a client that takes as hard as the limit lets it (often exactly
// when a refusal's RetryAfter says), charges from nothing to far past the
// allowance, and refunds now and then, to any window or its last take's.
// In every span the units admitted and charged stay within what the limit
// allows plus the debt allowance plus what was refunded
// (model.CheckDebtBound). It also checks that the bound is reached.
func TestDebtBound(t *testing.T) {
	seed := testenv.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 41))
	traces := 12
	if testenv.Long() {
		traces = 60
	}
	for _, base := range debtLimits {
		reached := false
		for _, debt := range []int64{0, 1, base.Rate, 3*base.Capacity() + 2} {
			lim := base
			lim.Debt = debt
			for n := range traces {
				spends, tight := debtTrace(rng, lim, 150)
				if err := model.CheckDebtBound(lim, spends); err != nil {
					t.Fatalf("seed %d, %+v, trace %d: %v", seed, lim, n, err)
				}
				reached = reached || tight
			}
		}
		if !reached {
			t.Errorf("%v: no trace spent all a span allowed: the traces test little", base)
		}
	}
}

// debtTrace runs a greedy client on one key under lim and returns its
// spends, and whether one instant spent everything the bound allows in a
// span of 0 µs (burst or rate, and the allowance).
func debtTrace(rng *rand.Rand, lim model.Limit, n int) ([]model.Spend, bool) {
	m := model.NewKeys().Model(lim)
	now := int64(1_764_000_000_000_000) + rng.Int64N(2*lim.Period)
	var spends []model.Spend
	var retry, window int64
	at, atNow := now, rat(0) // the units spent at the latest instant
	for range n {
		switch r := rng.IntN(10); {
		case r < 3 && retry > 0:
			now += retry
		case r < 5:
		case r < 8:
			now += rng.Int64N(lim.Period/lim.Rate + 2)
		default:
			now += rng.Int64N(3*lim.Period + 1)
		}
		switch r := rng.IntN(10); {
		case r < 5:
			cost := 1 + rng.Int64N(lim.Capacity())
			d := m.Take("k", now, cost)
			retry = d.RetryAfter
			if d.Allowed {
				spends = append(spends, model.Spend{T: now, Units: rat(cost)})
				window = d.Window
			}
		case r < 9:
			units := []int64{1, lim.Capacity(), lim.Debt + 1, 1 << 40, rng.Int64N(lim.Capacity() + lim.Debt + 2)}[rng.IntN(5)]
			_, charged := m.Charge("k", now, units)
			spends = append(spends, model.Spend{T: now, Units: charged})
		default:
			units := 1 + rng.Int64N(lim.Capacity())
			m.Refund("k", now, units, []int64{0, window}[rng.IntN(2)])
			spends = append(spends, model.Spend{T: now, Units: rat(-units)})
		}
		if last := spends[len(spends)-1]; last.T != at {
			at, atNow = last.T, rat(0)
		}
		if last := spends[len(spends)-1]; last.Units.Sign() > 0 {
			atNow.Add(atNow, last.Units)
		}
	}
	full := lim.Capacity() + lim.Debt
	return spends, atNow.Cmp(rat(full)) >= 0 || tightSomewhere(spends, full)
}

// tightSomewhere reports whether some instant with no refund spent full
// units.
func tightSomewhere(spends []model.Spend, full int64) bool {
	for i := 0; i < len(spends); {
		sum, refunded, j := rat(0), false, i
		for ; j < len(spends) && spends[j].T == spends[i].T; j++ {
			if spends[j].Units.Sign() < 0 {
				refunded = true
			} else {
				sum.Add(sum, spends[j].Units)
			}
		}
		if !refunded && sum.Cmp(rat(full)) >= 0 {
			return true
		}
		i = j
	}
	return false
}

// TestDebtBoundCatches feeds CheckDebtBound spends past the bound: a
// window that admitted its rate and a debt, and then its rate again in the
// next window with the debt forgotten.
func TestDebtBoundCatches(t *testing.T) {
	lim := model.Limit{Kind: algo.AlignedWindow, Rate: 10, Period: 100, Debt: 5}
	ok := []model.Spend{{T: 100, Units: rat(10)}, {T: 150, Units: rat(5)}, {T: 200, Units: rat(5)}}
	if err := model.CheckDebtBound(lim, ok); err != nil {
		t.Fatalf("spends within the bound: %v", err)
	}
	bad := append(ok, model.Spend{T: 250, Units: rat(1)}, model.Spend{T: 300, Units: rat(10)}, model.Spend{T: 301, Units: rat(5)})
	if err := model.CheckDebtBound(lim, bad); err == nil {
		t.Fatal("spends past the bound were not caught")
	}
}

func rat(n int64) *big.Rat { return new(big.Rat).SetInt64(n) }
