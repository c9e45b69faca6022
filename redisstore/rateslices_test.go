package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/internal/rateslice"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/redisstore"
)

// TestClaimRates has holders claim slices of a few rates on random
// traces at a shared fake clock, some holders going silent: at every
// instant the live slices of a rate add up to at most the rate, a holder
// keeps at least the smaller of its want and its slice, and the fair
// shares are weighted max-min.
func TestClaimRates(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]redis.UniversalClient{"standalone": redistest.Shared(t).Client(), "cluster": redistest.SharedCluster(t).Client()} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st := newGoRedis(t, c, redisstore.WithPrefix(fmt.Sprintf("claimrates-%s-%d/", name, time.Now().UnixNano())))
			r := rand.New(rand.NewPCG(testenv.Seed(t), 34))
			const life = 50 * time.Millisecond
			keys := []string{"a", "b", "c", "d"}
			rates := map[string]int64{"a": 100, "b": 7, "c": 0, "d": 1000}
			type held struct{ tokens, end int64 }
			slices := map[string]map[string]held{} // key → holder → slice
			for _, k := range keys {
				slices[k] = map[string]held{}
			}
			now := int64(1_000_000)
			for step := 0; step < 400; step++ {
				now += int64(r.IntN(20_000))
				h := fmt.Sprintf("h%d", r.IntN(4))
				var claims []rateslice.Claim
				for _, k := range keys {
					if r.IntN(3) == 0 {
						continue
					}
					claims = append(claims, rateslice.Claim{Key: k, Unit: time.Second, Rate: rates[k], Want: r.Int64N(rates[k] + 1), Demand: r.Int64N(rates[k] + 1), Weight: 1 + r.Int64N(3)})
				}
				got := rateslice.For(st)(ctx, h, now, life, claims)
				for i, cl := range claims {
					if got[i].Err != nil {
						t.Fatalf("step %d: %s: %v", step, cl.Key, got[i].Err)
					}
					mine := slices[cl.Key][h]
					if mine.end <= now {
						mine.tokens = 0
					}
					if got[i].Tokens > cl.Want || got[i].Tokens < min(cl.Want, mine.tokens) {
						t.Fatalf("step %d: %s %s: want %d, held %d, got %d", step, h, cl.Key, cl.Want, mine.tokens, got[i].Tokens)
					}
					if got[i].Fair < 0 || got[i].Fair > cl.Rate {
						t.Fatalf("step %d: %s %s: fair %d of %d", step, h, cl.Key, got[i].Fair, cl.Rate)
					}
					slices[cl.Key][h] = held{got[i].Tokens, now + life.Microseconds()}
					sum := int64(0)
					for _, s := range slices[cl.Key] {
						if s.end > now {
							sum += s.tokens
						}
					}
					if sum > cl.Rate {
						t.Fatalf("step %d: %s: live slices add up to %d, over %d", step, cl.Key, sum, cl.Rate)
					}
				}
			}
			// Fair shares: demands 10 and 100 (weight 1 each) of 60, then
			// weights 1 and 2 of 90 both wanting all.
			now += 2 * life.Microseconds()
			rateslice.For(st)(ctx, "x", now, life, []rateslice.Claim{{Key: "fair", Unit: time.Second, Rate: 60, Want: 10, Demand: 10, Weight: 1}})
			got := rateslice.For(st)(ctx, "y", now, life, []rateslice.Claim{{Key: "fair", Unit: time.Second, Rate: 60, Want: 100, Demand: 100, Weight: 1}})
			if got[0].Tokens != 50 || got[0].Fair != 50 {
				t.Errorf("y: got %+v, want 50 tokens, fair 50", got[0])
			}
			rateslice.For(st)(ctx, "x", now, life, []rateslice.Claim{{Key: "fair2", Unit: time.Second, Rate: 90, Want: 0, Demand: 90, Weight: 1}})
			got = rateslice.For(st)(ctx, "y", now, life, []rateslice.Claim{{Key: "fair2", Unit: time.Second, Rate: 90, Want: 90, Demand: 90, Weight: 2}})
			if got[0].Tokens != 90 || got[0].Fair != 60 {
				t.Errorf("y, weight 2: got %+v, want 90 tokens (x holds none), fair 60", got[0])
			}
			// Bad claims are refused one by one.
			got = rateslice.For(st)(ctx, "x", now, life, []rateslice.Claim{{Key: "bad", Rate: 10, Want: -1, Weight: 1}, {Key: "fair", Unit: time.Second, Rate: 60, Want: 10, Demand: 10, Weight: 1}})
			if !errors.Is(got[0].Err, rateslice.ErrClaim) || got[1].Err != nil || got[1].Tokens != 10 {
				t.Errorf("a bad claim beside a good one: got %+v", got)
			}
			if got := rateslice.For(st)(ctx, "", now, life, []rateslice.Claim{{Key: "fair", Unit: time.Second, Rate: 60, Weight: 1}}); !errors.Is(got[0].Err, rateslice.ErrClaim) {
				t.Errorf("no holder: got %+v", got)
			}
		})
	}
}

// TestClaimRatesUnits: holders of one rate claim it in different units
// (a reload changed it): the others' slices count as the rates they stand
// for, rounded up, the holder's own rounded down, exactly up to a year's
// unit and 2^32 tokens; a claim of no unit, or of a rate past MaxRate, is
// refused.
func TestClaimRatesUnits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newGoRedis(t, redistest.Shared(t).Client(), redisstore.WithPrefix(fmt.Sprintf("claimunits-%d/", time.Now().UnixNano())))
	const life = time.Minute
	year := 365 * 24 * time.Hour
	now := int64(1_000_000)
	claim := func(holder, key string, unit time.Duration, rate, want int64) int64 {
		t.Helper()
		got := rateslice.For(st)(ctx, holder, now, life, []rateslice.Claim{{Key: key, Unit: unit, Rate: rate, Want: want, Demand: want, Weight: 1}})
		if got[0].Err != nil {
			t.Fatalf("%s %s: %v", holder, key, got[0].Err)
		}
		return got[0].Tokens
	}
	for _, c := range []struct {
		name                 string
		aUnit                time.Duration
		aRate, aWant         int64
		bUnit                time.Duration
		bRate, bWant, bWants int64 // bWants: what b gets
	}{
		{"a second, then a minute", time.Second, 100, 100, time.Minute, 6000, 6000, 0},
		{"a minute's rate raised", time.Second, 100, 100, time.Minute, 12000, 12000, 6000},
		{"rounded up", time.Minute, 100, 7, time.Second, 2, 2, 1},
		{"a year to a second", year, 1<<32 - 1, 1<<32 - 1, time.Second, 200, 200, 200 - 137},
		{"a second to a year", time.Second, 1<<32 - 1, 1<<32 - 1, year, 1<<32 - 1, 1<<32 - 1, 0},
	} {
		key := "u/" + c.name
		if got := claim("a", key, c.aUnit, c.aRate, c.aWant); got != c.aWant {
			t.Fatalf("%s: a got %d, want %d", c.name, got, c.aWant)
		}
		if got := claim("b", key, c.bUnit, c.bRate, c.bWant); got != c.bWants {
			t.Errorf("%s: b got %d, want %d", c.name, got, c.bWants)
		}
	}
	// a's own slice in the new unit, rounded down: 7 a minute is 0 a
	// second, so a gets what b's 1 leaves of 2.
	if got := claim("a", "u/rounded up", time.Second, 2, 2); got != 1 {
		t.Errorf("a, its unit changed: got %d, want 1", got)
	}
	for _, bad := range []rateslice.Claim{
		{Key: "x", Rate: 1, Want: 1, Weight: 1},
		{Key: "x", Unit: 1500 * time.Millisecond, Rate: 1, Want: 1, Weight: 1},
		{Key: "x", Unit: time.Second, Rate: rateslice.MaxRate + 1, Want: 1, Weight: 1},
	} {
		if got := rateslice.For(st)(ctx, "a", now, life, []rateslice.Claim{bad}); !errors.Is(got[0].Err, rateslice.ErrClaim) {
			t.Errorf("claim %+v: got %+v, want ErrClaim", bad, got[0])
		}
	}
}
