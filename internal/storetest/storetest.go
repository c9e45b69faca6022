// Package storetest holds the checks every sluice store must pass, so the
// memory store and the Redis store (standalone and cluster) run the same ones.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/internal/model"
	"github.com/sluice-go/sluice/internal/testenv"
)

// Base is a time near the present, in µs since the epoch.
const Base = int64(1_764_000_000_000_000)

// TakeAllAt makes one composite decision at time now.
type TakeAllAt func(reqs []sluice.Request, now int64) (algo.Decision, error)

func req(key string, l sluice.Limit, cost int64) sluice.Request {
	p, err := l.Params()
	if err != nil {
		panic(err)
	}
	return sluice.Request{Key: key, Params: p, Cost: cost, MaxDelay: algo.Never}
}

// OneUserBurst checks a composite of a per-user limit of 1 and a global one
// of 10 when one user sends 20 at once: exactly 1 passes, and the global
// budget is spent by exactly 1.
func OneUserBurst(t *testing.T, take TakeAllAt, prefix string) {
	user := sluice.PerMinute(1)
	global := sluice.PerMinute(10)
	parts := []sluice.Request{req(prefix+"user:1", user, 1), req(prefix+"global", global, 1)}
	allowed := 0
	for i := 0; i < 20; i++ {
		d, err := take(parts, Base)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			allowed++
		} else if d.RetryAfter != 60_000_000 {
			t.Fatalf("refusal %d: retry after %dµs, want the user's 60s", i, d.RetryAfter)
		}
	}
	if allowed != 1 {
		t.Fatalf("%d admitted, want exactly 1", allowed)
	}
	d, err := take([]sluice.Request{req(prefix+"global", global, 0)}, Base)
	if err != nil {
		t.Fatal(err)
	}
	if d.Remaining != 9 {
		t.Fatalf("global remaining %d, want 9: a refusal must spend nothing", d.Remaining)
	}
	// Another user still passes, spending the global budget.
	d, _ = take([]sluice.Request{req(prefix+"user:2", user, 1), req(prefix+"global", global, 1)}, Base)
	if !d.Allowed || d.Remaining != 0 {
		t.Fatalf("second user: %+v", d)
	}
}

// RandomComposites replays random composite traces (two or three parts of
// random algorithms) and requires every decision equal to the model's, which
// applies SEMANTICS.md limit by limit.
func RandomComposites(t *testing.T, take TakeAllAt, prefix string, traces, n int) {
	seed := testenv.Seed(t)
	r := rand.New(rand.NewPCG(seed, 11))
	limits := []sluice.Limit{
		sluice.PerSecond(3).WithBurst(4),
		sluice.Per(7, 100*time.Millisecond).WithBurst(2).Using(sluice.GCRA),
		sluice.PerSecond(5).WithBurst(3).Using(sluice.LeakyBucket),
		sluice.PerSecond(6).Using(sluice.FixedWindow),
		sluice.PerSecond(5).Using(sluice.SlidingWindow),
		sluice.PerSecond(4).Using(sluice.SlidingLog),
	}
	decisions := 0
	for ti := 0; ti < traces; ti++ {
		np := 2 + r.IntN(2)
		var parts []sluice.Request
		var models []*model.Model
		var keys []string
		capacity := int64(1 << 62)
		for i := 0; i < np; i++ {
			l := limits[r.IntN(len(limits))]
			key := fmt.Sprintf("%st%d:p%d", prefix, ti, i)
			p, _ := l.Params()
			parts = append(parts, req(key, l, 0))
			models = append(models, model.New(p.Kind, p.Rate, p.Period, p.Burst))
			keys = append(keys, key)
			capacity = min(capacity, p.Capacity())
		}
		now := Base
		for i := 0; i < n; i++ {
			now += r.Int64N(400_000) * int64(r.IntN(2))
			cost := r.Int64N(capacity + 1)
			for j := range parts {
				parts[j].Cost = cost
			}
			got, err := take(parts, now)
			if err != nil {
				t.Fatal(err)
			}
			got.FreshAt = 0
			want := model.TakeAll(models, keys, now, cost)
			if got != want {
				t.Fatalf("seed %d trace %d request %d (cost %d at +%dµs) over %v:\n got  %+v\n want %+v", seed, ti, i, cost, now-Base, keys, got, want)
			}
			decisions++
		}
	}
	t.Logf("%d composite decisions equal to the model (seed %d)", decisions, seed)
}

// Refund checks that a token bucket or GCRA gives units back, never past its
// burst, and that the other algorithms refuse to.
func Refund(t *testing.T, lim *sluice.Limiter, prefix string) {
	ctx := context.Background()
	for _, a := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA} {
		l := sluice.PerMinute(60).WithBurst(100).Using(a)
		key := prefix + "llm:" + a.String()
		// Take an estimate of 80 tokens, use 30: give 50 back.
		if r, _ := lim.Take(ctx, key, l, 80); !r.Allowed || r.Remaining != 20 {
			t.Fatalf("%s: take: %+v", a, r)
		}
		r, err := lim.Refund(ctx, key, l, 50)
		if err != nil || r.Remaining != 70 {
			t.Fatalf("%s: refund: %+v %v", a, r, err)
		}
		// A refund never creates capacity beyond the burst.
		if r, _ := lim.Refund(ctx, key, l, 1000); r.Remaining != 100 {
			t.Fatalf("%s: refund past the burst: %+v", a, r)
		}
		if r, _ := lim.Take(ctx, key, l, 100); !r.Allowed {
			t.Fatalf("%s: full bucket refused", a)
		}
		if r, _ := lim.Take(ctx, key, l, 1); r.Allowed {
			t.Fatalf("%s: refund created capacity", a)
		}
	}
	_, err := lim.Refund(ctx, prefix+"w", sluice.PerMinute(5).Using(sluice.FixedWindow), 1)
	if !errors.Is(err, algo.ErrNoRefund) {
		t.Fatalf("refund on a window: %v", err)
	}
}
