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
					claims = append(claims, rateslice.Claim{Key: k, Rate: rates[k], Want: r.Int64N(rates[k] + 1), Demand: r.Int64N(rates[k] + 1), Weight: 1 + r.Int64N(3)})
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
			rateslice.For(st)(ctx, "x", now, life, []rateslice.Claim{{Key: "fair", Rate: 60, Want: 10, Demand: 10, Weight: 1}})
			got := rateslice.For(st)(ctx, "y", now, life, []rateslice.Claim{{Key: "fair", Rate: 60, Want: 100, Demand: 100, Weight: 1}})
			if got[0].Tokens != 50 || got[0].Fair != 50 {
				t.Errorf("y: got %+v, want 50 tokens, fair 50", got[0])
			}
			rateslice.For(st)(ctx, "x", now, life, []rateslice.Claim{{Key: "fair2", Rate: 90, Want: 0, Demand: 90, Weight: 1}})
			got = rateslice.For(st)(ctx, "y", now, life, []rateslice.Claim{{Key: "fair2", Rate: 90, Want: 90, Demand: 90, Weight: 2}})
			if got[0].Tokens != 90 || got[0].Fair != 60 {
				t.Errorf("y, weight 2: got %+v, want 90 tokens (x holds none), fair 60", got[0])
			}
			// Bad claims are refused one by one.
			got = rateslice.For(st)(ctx, "x", now, life, []rateslice.Claim{{Key: "bad", Rate: 10, Want: -1, Weight: 1}, {Key: "fair", Rate: 60, Want: 10, Demand: 10, Weight: 1}})
			if !errors.Is(got[0].Err, rateslice.ErrClaim) || got[1].Err != nil || got[1].Tokens != 10 {
				t.Errorf("a bad claim beside a good one: got %+v", got)
			}
			if got := rateslice.For(st)(ctx, "", now, life, []rateslice.Claim{{Key: "fair", Rate: 60, Weight: 1}}); !errors.Is(got[0].Err, rateslice.ErrClaim) {
				t.Errorf("no holder: got %+v", got)
			}
		})
	}
}
