// Package storetest holds the checks every sluice store must pass, so the
// memory store and the Redis store (standalone and cluster) run the same ones.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/model"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/internal/testsupport/traces"
	"github.com/sluice-go/sluice/store"
)

// Base is a time near the present, in µs since the epoch.
const Base = traces.Base

// TakeAllAt makes one composite decision at time now (AllAt builds one
// from a store).
type TakeAllAt func(ctx context.Context, reqs []storelink.Request, now int64) (algo.Decision, error)

// TakeEachAt makes one composite decision at time now and writes each
// part's into each[i] (each as long as reqs; see model.TakeEach). EachAt
// builds one from a store.
type TakeEachAt func(ctx context.Context, reqs []storelink.Request, now int64, each []algo.Decision) (algo.Decision, error)

func req(key string, l sluice.Limit, cost int64) storelink.Request {
	p, err := storelink.Params(l)
	if err != nil {
		panic(err)
	}
	return storelink.Request{Key: key, Params: p, Cost: cost, MaxDelay: algo.Never}
}

// OneUserBurst checks a composite of a per-user limit of 1 and a global one
// of 10 when one user sends 20 at once: exactly 1 passes, and the global
// budget is spent by exactly 1.
func OneUserBurst(t *testing.T, take TakeAllAt, prefix string) {
	user := sluice.PerMinute(1)
	global := sluice.PerMinute(10)
	parts := []storelink.Request{req(prefix+"user:1", user, 1), req(prefix+"global", global, 1)}
	allowed := 0
	for i := 0; i < 20; i++ {
		d, err := take(t.Context(), parts, Base)
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
	d, err := take(t.Context(), []storelink.Request{req(prefix+"global", global, 0)}, Base)
	if err != nil {
		t.Fatal(err)
	}
	if d.Remaining != 9 {
		t.Fatalf("global remaining %d, want 9: a refusal must spend nothing", d.Remaining)
	}
	// Another user still passes, spending the global budget.
	d, _ = take(t.Context(), []storelink.Request{req(prefix+"user:2", user, 1), req(prefix+"global", global, 1)}, Base)
	if !d.Allowed || d.Remaining != 0 {
		t.Fatalf("second user: %+v", d)
	}
}

// OneUserBurstEach is OneUserBurst through TakeEachAt: the refusals name
// the user's part as the one that refused, with its own RetryAfter, and
// report the global part as it is, nothing spent.
func OneUserBurstEach(t *testing.T, take TakeEachAt, prefix string) {
	user := sluice.PerMinute(1)
	global := sluice.PerMinute(10)
	parts := []storelink.Request{req(prefix+"user:1", user, 1), req(prefix+"global", global, 1)}
	each := make([]algo.Decision, 2)
	for i := range 20 {
		d, err := take(t.Context(), parts, Base, each)
		if err != nil {
			t.Fatal(err)
		}
		for j := range each {
			each[j].FreshAt = 0
		}
		want := []algo.Decision{
			{Allowed: true, Remaining: 0, ResetAfter: 60_000_000},
			{Allowed: true, Remaining: 9, ResetAfter: 6_000_000},
		}
		if i > 0 {
			want[0] = algo.Decision{Allowed: false, Remaining: 0, RetryAfter: 60_000_000, ResetAfter: 60_000_000}
		}
		if d.Allowed != (i == 0) || each[0] != want[0] || each[1] != want[1] {
			t.Fatalf("request %d: %+v, parts %+v, want parts %+v", i, d, each, want)
		}
	}
}

// RandomComposites replays random composite traces (one to three parts of
// random algorithms, each with its own cost, over a small pool of keys so
// that a key is read under other limits too) and requires every decision
// equal to the model's, which applies SEMANTICS.md limit by limit.
//
// With each not nil, it replays every trace through each too, on keys of
// their own ("e:" and the key: a key's {hash tag} is kept), and requires,
// decision by decision, the summary equal to take's (TakeAll's) and each
// part's decision equal to the model's (model.TakeEach).
func RandomComposites(t *testing.T, take TakeAllAt, each TakeEachAt, prefix string, traces, n int) {
	seed := testenv.Seed(t)
	r := rand.New(rand.NewPCG(seed, 11))
	limits := []sluice.Limit{
		sluice.PerSecond(3).WithBurst(4),
		sluice.PerSecond(3).WithBurst(4).WithAlgorithm(sluice.GCRA),
		sluice.Per(7, 100*time.Millisecond).WithBurst(2).WithAlgorithm(sluice.GCRA),
		sluice.PerSecond(5).WithBurst(3).WithAlgorithm(sluice.LeakyBucket),
		sluice.PerSecond(6).WithAlgorithm(sluice.FixedWindow),
		sluice.Per(6, 2*time.Second).WithAlgorithm(sluice.FixedWindow),
		sluice.PerSecond(4).WithAlgorithm(sluice.AlignedWindow),
		sluice.PerSecond(5).WithAlgorithm(sluice.SlidingWindow),
		sluice.PerSecond(4).WithAlgorithm(sluice.SlidingLog),
	}
	decisions, refused := 0, 0
	for ti := 0; ti < traces; ti++ {
		ks, eks := model.NewKeys(), model.NewKeys()
		pool := 2 + r.IntN(3)
		now := Base
		for i := 0; i < n; i++ {
			now += r.Int64N(400_000) * int64(r.IntN(2))
			np := 1 + r.IntN(min(3, pool))
			perm := r.Perm(pool)
			var parts []storelink.Request
			var models, emodels []*model.Model
			var keys []string
			var costs []int64
			for j := 0; j < np; j++ {
				l := limits[r.IntN(len(limits))]
				p, _ := storelink.Params(l)
				key := fmt.Sprintf("%st%d:k%d", prefix, ti, perm[j])
				cost := r.Int64N(p.Capacity() + 1)
				if r.IntN(3) == 0 {
					cost = min(1, cost)
				}
				parts = append(parts, req(key, l, cost))
				models = append(models, ks.Model(ModelLimit(p)))
				emodels = append(emodels, eks.Model(ModelLimit(p)))
				keys = append(keys, key)
				costs = append(costs, cost)
			}
			got, err := take(t.Context(), parts, now)
			if err != nil {
				t.Fatal(err)
			}
			got.FreshAt = 0
			want := model.TakeAll(models, keys, costs, now)
			if got != want {
				t.Fatalf("seed %d trace %d request %d at +%dµs: %s\n got  %+v\n want %+v", seed, ti, i, now-Base, describe(parts), got, want)
			}
			if each != nil {
				checkEach(t, each, parts, emodels, keys, costs, now, got)
			}
			if !got.Allowed {
				refused++
			}
			decisions++
		}
	}
	if refused == 0 || refused == decisions {
		t.Errorf("%d of %d composites refused: a trace that tests little", refused, decisions)
	}
	t.Logf("%d composite decisions (%d refused) equal to the model (seed %d)", decisions, refused, seed)
}

// checkEach makes through each the composite decision parts, on keys of
// its own, and requires the summary equal to summary (TakeAll's) and each
// part's decision equal to model.TakeEach's.
func checkEach(t *testing.T, each TakeEachAt, parts []storelink.Request, models []*model.Model, keys []string, costs []int64, now int64, summary algo.Decision) {
	t.Helper()
	eparts := make([]storelink.Request, len(parts))
	for j, r := range parts {
		r.Key = "e:" + r.Key
		eparts[j] = r
	}
	got := make([]algo.Decision, len(parts))
	d, err := each(t.Context(), eparts, now, got)
	if err != nil {
		t.Fatal(err)
	}
	d.FreshAt = 0
	want := make([]algo.Decision, len(parts))
	wantD := model.TakeEach(models, keys, costs, now, want)
	if d != summary || d != wantD {
		t.Fatalf("at +%dµs: %s: TakeEach's summary %+v, TakeAll's %+v, the model's %+v", now-Base, describe(eparts), d, summary, wantD)
	}
	for j := range got {
		if got[j].FreshAt = 0; got[j] != want[j] {
			t.Fatalf("at +%dµs: %s: part %d: %+v, model %+v (all: %+v, model %+v)", now-Base, describe(eparts), j, got[j], want[j], got, want)
		}
	}
}

func describe(reqs []storelink.Request) string {
	s := ""
	for _, r := range reqs {
		s += fmt.Sprintf("[%s %v %d/%dµs burst %d cost %d] ", r.Key, r.Params.Kind, r.Params.Rate, r.Params.Period, r.Params.Burst, r.Cost)
	}
	return s
}

// Refund checks that a token bucket or GCRA gives units back, never past its
// burst, that a fixed or aligned window takes them off its count, never
// below 0, that a fresh key stays fresh, and that the other algorithms
// refuse to.
func Refund(t *testing.T, lim *sluice.Limiter, prefix string) {
	ctx := context.Background()
	for _, l := range []sluice.Limit{
		sluice.PerMinute(60).WithBurst(100),
		sluice.PerMinute(60).WithBurst(100).WithAlgorithm(sluice.GCRA),
		sluice.Per(100, time.Hour).WithAlgorithm(sluice.FixedWindow),
		sluice.Per(100, time.Hour).WithAlgorithm(sluice.AlignedWindow),
	} {
		a := l.Algorithm
		key := prefix + "llm:" + a.String()
		if r, err := lim.Refund(ctx, key, l, 30, sluice.Result{}); err != nil || r.Remaining != 100 {
			t.Fatalf("%s: refund on a fresh key: %+v %v", a, r, err)
		}
		// Take an estimate of 80 tokens, use 30: give 50 back.
		if r, _ := lim.Take(ctx, key, l, 80); !r.Allowed || r.Remaining != 20 {
			t.Fatalf("%s: take: %+v", a, r)
		}
		r, err := lim.Refund(ctx, key, l, 50, sluice.Result{})
		if err != nil || r.Remaining != 70 {
			t.Fatalf("%s: refund: %+v %v", a, r, err)
		}
		// A refund never creates capacity beyond the burst (the rate).
		if r, _ := lim.Refund(ctx, key, l, 1000, sluice.Result{}); r.Remaining != 100 {
			t.Fatalf("%s: refund past the burst: %+v", a, r)
		}
		if r, _ := lim.Take(ctx, key, l, 100); !r.Allowed {
			t.Fatalf("%s: full budget refused", a)
		}
		if r, _ := lim.Take(ctx, key, l, 1); r.Allowed {
			t.Fatalf("%s: refund created capacity", a)
		}
	}
	_, err := lim.Refund(ctx, prefix+"w", sluice.PerMinute(5).WithAlgorithm(sluice.SlidingWindow), 1, sluice.Result{})
	if !errors.Is(err, algo.ErrNoRefund) {
		t.Fatalf("refund on a sliding window: %v", err)
	}
}

// LateRefund checks that units a window spent are not given back to the
// next one: 10 of 10 taken in one window, 10 in the next, then a Refund
// naming the first take gives its 10 back to nothing (the next window
// still admits no more), where a Refund that names no take (the zero
// Result) gives them to the current one. A refund that brings the count to 0 leaves the key fresh.
func LateRefund(t *testing.T, newStore NewStore) {
	ctx := context.Background()
	clock := new(setClock)
	lim := sluice.New(newStore(t, clock))
	for _, l := range []sluice.Limit{
		sluice.PerMinute(10).WithAlgorithm(sluice.FixedWindow),
		sluice.PerMinute(10).WithAlgorithm(sluice.AlignedWindow),
	} {
		a := l.Algorithm
		key := "late:" + a.String()
		start := (Base/60_000_000 + 1) * 60_000_000 // on the minute, for both
		clock.us.Store(start)
		first, err := lim.Take(ctx, key, l, 10)
		if err != nil || !first.Allowed || first.Window != start+60_000_000 {
			t.Fatalf("%s: first take %+v %v", a, first, err)
		}
		clock.us.Store(start + 60_000_000)
		next, err := lim.Take(ctx, key, l, 10)
		if err != nil || !next.Allowed || next.Window != start+120_000_000 {
			t.Fatalf("%s: take in the next window %+v %v", a, next, err)
		}
		clock.us.Store(start + 61_000_000)
		if r, err := lim.Refund(ctx, key, l, 10, first); err != nil || r.Remaining != 0 {
			t.Fatalf("%s: late refund of the first window's units: %+v %v; want none given back", a, r, err)
		}
		if r, _ := lim.Take(ctx, key, l, 1); r.Allowed {
			t.Fatalf("%s: the next window admitted 11 of 10 after a late refund", a)
		}
		if r, err := lim.Refund(ctx, key, l, 4, next); err != nil || r.Remaining != 4 {
			t.Fatalf("%s: refund of 4 to the take's own window: %+v %v", a, r, err)
		}
		if r, err := lim.Refund(ctx, key, l, 6, sluice.Result{}); err != nil || r.Remaining != 10 || r.ResetAfter != 0 {
			t.Fatalf("%s: refund of the last 6: %+v %v; want the key fresh", a, r, err)
		}
	}
}

// A TraceReq is one request of a trace whose limits change (traces.Req).
type TraceReq = traces.Req

// ChangedTrace is traces.Changed.
func ChangedTrace(r *rand.Rand, n int) []TraceReq { return traces.Changed(r, n) }

// ModelLimit is p as the model states it.
func ModelLimit(p algo.Params) model.Limit {
	return model.Limit{Kind: p.Kind, Rate: p.Rate, Period: p.Period, Burst: p.Burst}
}

// ChangedLimits runs the cases of changed limits users meet through lim
// (whose store must decide at the real time): a rolling deploy alternating
// token bucket and GCRA on one key spends one budget; a raised burst keeps
// what was spent; a fixed window whose period shrinks ends a new period after
// its start; a window's units count when a token bucket takes the key over;
// a query or a refund under another algorithm changes nothing.
func ChangedLimits(t *testing.T, lim *sluice.Limiter, prefix string) {
	ctx := context.Background()
	tb := sluice.PerHour(10)
	admitted := 0
	for i := 0; i < 100; i++ {
		l := tb
		if i%2 == 1 {
			l = tb.WithAlgorithm(sluice.GCRA)
		}
		r, err := lim.Take(ctx, prefix+"deploy", l, 1)
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed {
			admitted++
		}
	}
	if admitted != 10 {
		t.Errorf("alternating token-bucket and gcra on a limit of 10/hour admitted %d of 100", admitted)
	}

	for _, a := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA} {
		key := prefix + "burst:" + a.String()
		l := sluice.PerHour(10).WithAlgorithm(a)
		if r, _ := lim.Take(ctx, key, l, 10); !r.Allowed {
			t.Fatalf("%v: a fresh bucket refused its burst", a)
		}
		r, err := lim.Take(ctx, key, l.WithBurst(100), 0)
		if err != nil || r.Remaining != 90 {
			t.Errorf("%v: burst 10 → 100 with 10 spent: %+v %v, want 90 remaining", a, r, err)
		}
	}

	hour := sluice.Per(1, time.Hour).WithAlgorithm(sluice.FixedWindow)
	if r, _ := lim.Take(ctx, prefix+"window", hour, 1); !r.Allowed {
		t.Fatal("a fresh fixed window refused")
	}
	r, err := lim.Take(ctx, prefix+"window", sluice.Per(1, time.Second).WithAlgorithm(sluice.FixedWindow), 1)
	if err != nil || r.Allowed || r.RetryAfter > time.Second {
		t.Errorf("fixed window shrunk from an hour to a second: %+v %v, want a refusal for at most a second", r, err)
	}

	key := prefix + "handover"
	if r, _ := lim.Take(ctx, key, sluice.PerHour(5).WithAlgorithm(sluice.SlidingLog), 3); !r.Allowed {
		t.Fatal("a fresh sliding log refused")
	}
	for _, a := range []sluice.Algorithm{sluice.GCRA, sluice.FixedWindow, sluice.AlignedWindow, sluice.LeakyBucket} {
		if r, _ := lim.Take(ctx, key, sluice.PerMinute(5).WithBurst(7).WithAlgorithm(a), 0); !r.Allowed {
			t.Errorf("a query under %v was refused", a)
		}
	}
	if _, err := lim.Refund(ctx, key+":other", tb, 5, sluice.Result{}); err != nil {
		t.Errorf("refund on a fresh key: %v", err)
	}
	r, err = lim.Take(ctx, key, sluice.PerHour(5), 0)
	if err != nil || r.Remaining != 2 {
		t.Errorf("a token bucket taking over a sliding log that spent 3 of 5: %+v %v, want 2 remaining", r, err)
	}
}

// Errors checks that every error a Limiter over a store, or the store's Run,
// return for a bad request wraps its sentinel, so that errors.Is works
// whichever store made it: an unknown algorithm, a bad cost or key, a
// refund under a sliding window, a composite that names a key twice, a
// time (an op's At, or the store's clock) outside the range a step
// accepts, and an op the store cannot do (errors.ErrUnsupported).
// newStore returns a store that decides by clock.
func Errors(t *testing.T, newStore func(clock store.Clock) store.Store, prefix string) {
	t.Helper()
	ctx := context.Background()
	good := sluice.PerMinute(5)
	unknown := sluice.Limit{Algorithm: 99, Rate: 1, Period: time.Second, Burst: 1}
	window := good.WithAlgorithm(sluice.SlidingWindow)
	st := newStore(nil)
	lim := sluice.New(st)
	is := func(what string, err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Errorf("%s: error %v, want one wrapping %v", what, err, want)
		}
	}
	_, err := sluice.ParseAlgorithm("nope")
	is("ParseAlgorithm", err, sluice.ErrInvalidLimit)
	_, err = sluice.ParseLimit("1/1s nope")
	is("ParseLimit", err, sluice.ErrInvalidLimit)
	_, err = lim.Take(ctx, prefix+"k", unknown, 1)
	is("Limiter.Take, unknown algorithm", err, sluice.ErrInvalidLimit)
	_, err = lim.Take(ctx, prefix+"k", good, -1)
	is("Limiter.Take, negative cost", err, sluice.ErrInvalidCost)
	_, err = lim.Take(ctx, prefix+"k", good, 6)
	is("Limiter.Take, cost over capacity", err, sluice.ErrCostExceedsCapacity)
	_, err = lim.Take(ctx, "", good, 1)
	is("Limiter.Take, empty key", err, sluice.ErrEmptyKey)
	_, err = lim.Refund(ctx, prefix+"w", window, 1, sluice.Result{})
	is("Limiter.Refund, window", err, sluice.ErrNoRefund)
	_, err = lim.Refund(ctx, prefix+"w", unknown, 1, sluice.Result{})
	is("Limiter.Refund, unknown algorithm", err, sluice.ErrInvalidLimit)
	_, err = lim.TakeAll(ctx, []sluice.Part{{Key: prefix + "d", Limit: good, Cost: 1}, {Key: prefix + "d", Limit: good, Cost: 1}}, nil)
	is("Limiter.TakeAll, a key twice", err, sluice.ErrDuplicateKey)
	_, err = lim.TakeAll(ctx, []sluice.Part{{Key: prefix + "a", Limit: good, Cost: 1}, {Key: prefix + "b", Limit: unknown, Cost: 1}}, nil)
	is("Limiter.TakeAll, unknown algorithm", err, sluice.ErrInvalidLimit)
	var zero sluice.Limiter
	_, err = zero.Take(ctx, prefix+"k", good, 1)
	is("zero Limiter", err, sluice.ErrStoreUnavailable)
	_, err = sluice.New(nil).TakeAll(ctx, []sluice.Part{{Key: prefix + "k", Limit: good, Cost: 1}}, nil)
	is("Limiter over no store", err, sluice.ErrStoreUnavailable)

	p, _ := storelink.Params(good)
	take := req(prefix+"t", good, 1)
	refund := TakeOp(take)
	refund.Kind = store.Refund
	acquire := HoldOp(store.Acquire, prefix+"h", algo.Concurrency{Limit: 2, Lifetime: 1_000_000}, 1, 1)
	ops := func(what string, s store.Store, at int64) {
		t.Helper()
		for _, c := range []struct {
			name string
			op   store.Op
		}{{"Take", TakeOp(take)}, {"composite Take", CompositeOp([]storelink.Request{take})}, {"Refund", refund}, {"Acquire", acquire}} {
			got := RunAt(ctx, s, at, c.op)
			is(fmt.Sprintf("Run, %s %s", c.name, what), got.Err, sluice.ErrInvalidTime)
			if got.Decision != (store.Decision{}) || got.Expiry != 0 {
				t.Errorf("Run, %s %s: %+v expiry %d beside its error", c.name, what, got.Decision, got.Expiry)
			}
		}
	}
	for _, now := range []int64{-1, algo.MaxTime + 1} {
		bad := newStore(stoppedClock(now))
		ops(fmt.Sprintf("by a clock at %dµs", now), bad, 0)
		ops(fmt.Sprintf("at %dµs", now), st, now)
		_, err = sluice.New(bad).Take(ctx, prefix+"t", good, 1)
		is(fmt.Sprintf("Limiter.Take at %dµs", now), err, sluice.ErrInvalidTime)
	}
	// Nothing of the above was spent.
	if d, err := TakeAt(ctx, st, req(prefix+"t", good, 0), Base); err != nil || d.Remaining != p.Capacity() {
		t.Errorf("after the errors, %q: %+v %v, want a fresh key", prefix+"t", d, err)
	}
	got := RunAt(ctx, st, Base, store.Op{Kind: 200, Key: prefix + "k"})
	is("Run, an unknown kind", got.Err, errors.ErrUnsupported)
}

// stoppedClock is a store.Clock that reads a fixed time, in µs since the
// epoch.
type stoppedClock int64

func (c stoppedClock) Now() time.Time { return time.UnixMicro(int64(c)) }

func (stoppedClock) Sleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

// NewStore returns an empty store, with its own key prefix where stores
// share state, that decides by clock (by its own clock when clock is nil)
// when an op's At is 0.
type NewStore func(t *testing.T, clock store.Clock) store.Store

// Run runs the checks every store must pass through a sluice.Limiter:
// random traces against the exact model (Trace), refunds, changed limits,
// the errors' sentinels, and concurrency limits (Leases).
func Run(t *testing.T, newStore NewStore) {
	// The traces' lengths: a third of them unless SLUICE_LONG asks for
	// the long runs (CI sets it); fresh seeds find what more requests would.
	n := 1000
	if testenv.Long() {
		n = 3000
	}
	t.Run("Trace", func(t *testing.T) { Trace(t, newStore, n) })
	t.Run("Each", func(t *testing.T) { Each(t, newStore, n/2) })
	t.Run("Refund", func(t *testing.T) { Refund(t, sluice.New(newStore(t, nil)), "") })
	t.Run("LateRefund", func(t *testing.T) { LateRefund(t, newStore) })
	t.Run("ChangedLimits", func(t *testing.T) { ChangedLimits(t, sluice.New(newStore(t, nil)), "") })
	t.Run("Errors", func(t *testing.T) {
		Errors(t, func(c store.Clock) store.Store { return newStore(t, c) }, "")
	})
	t.Run("Holds", func(t *testing.T) { Holds(t, newStore) })
	t.Run("Reserve", func(t *testing.T) { ReserveTrace(t, newStore, n/2) })
	t.Run("ReserveEach", func(t *testing.T) { ReserveEach(t, newStore, n/2) })
}

// Trace checks a random trace of n requests whose limits change (see
// ChangedTrace) through a Limiter over a store that decides by a clock the
// trace sets: every decision equals the exact model's. About one request in
// four under an algorithm that can give units back is a refund of its cost:
// half of them naming no take, half naming the key's last take (against
// Model.Refund).
func Trace(t *testing.T, newStore NewStore, n int) {
	seed := testenv.Seed(t)
	r := rand.New(rand.NewPCG(seed, 7))
	refunds := rand.New(rand.NewPCG(seed, 8))
	clock := new(setClock)
	lim := sluice.New(newStore(t, clock))
	ks := model.NewKeys()
	ctx := context.Background()
	gave := 0
	lastTake := map[string]sluice.Result{} // each key's last take of cost > 0
	for i, q := range ChangedTrace(r, n) {
		clock.us.Store(q.Now)
		l := sluice.Limit{Algorithm: sluice.Algorithm(q.Params.Kind), Rate: q.Params.Rate, Period: time.Duration(q.Params.Period) * time.Microsecond, Burst: q.Params.Burst}
		var got sluice.Result
		var err error
		var d algo.Decision
		op := "take"
		if canRefund(q.Params.Kind) && refunds.IntN(4) == 0 {
			gave++
			op = "refund"
			if refunds.IntN(2) == 0 {
				op = "refund of the last take"
				got, err = lim.Refund(ctx, q.Key, l, q.Cost, lastTake[q.Key])
			} else {
				got, err = lim.Refund(ctx, q.Key, l, q.Cost, sluice.Result{})
			}
			if err == nil {
				d = ks.Refund(q.Key, ModelLimit(q.Params), q.Now, q.Cost, windowOf(op, lastTake[q.Key]))
			}
		} else {
			got, err = lim.Take(ctx, q.Key, l, q.Cost)
			if err == nil {
				d = ks.Take(q.Key, ModelLimit(q.Params), q.Now, q.Cost)
			}
			if q.Cost > 0 {
				lastTake[q.Key] = got
			}
		}
		if err != nil {
			t.Fatalf("seed %d request %d (%s): %v", seed, i, op, err)
		}
		want := resultOf(d)
		if got != want {
			t.Fatalf("seed %d request %d (%s %s %v cost %d at +%dµs): %+v, model %+v", seed, i, op, q.Key, l, q.Cost, q.Now-Base, got, want)
		}
	}
	t.Logf("%d requests, %d of them refunds, equal to the model (seed %d)", n, gave, seed)
}

// windowOf is the window a refund op names: its take's, or none.
func windowOf(op string, take sluice.Result) int64 {
	if op == "refund" {
		return 0
	}
	return take.Window
}

// canRefund reports whether k's algorithm can give units back.
func canRefund(k algo.Kind) bool {
	return k == algo.TokenBucket || k == algo.GCRA || k == algo.FixedWindow || k == algo.AlignedWindow
}

// Each checks a random trace of n composites of one to five parts through
// a Limiter's TakeAll, each part's result asked for, over a store that decides by a clock the trace sets:
// every summary equals the model's TakeAll, and each part's result its
// model.TakeEach. The keys share a {hash tag}, so that a cluster decides
// each composite in one script.
func Each(t *testing.T, newStore NewStore, n int) { eachTrace(t, newStore, n, false) }

// ReserveEach is Each whose parts have, half of them, a random headroom
// (priority classes in composites), each composite made with or without
// its parts' results at random: every summary and every part's result equals
// model.TakeEachHeadroom's.
func ReserveEach(t *testing.T, newStore NewStore, n int) { eachTrace(t, newStore, n, true) }

// randomReserve is a random class's reserve, of at most left units: none
// half of the time.
func randomReserve(r *rand.Rand, left int64) int64 {
	if r.IntN(2) == 0 {
		return 0
	}
	return r.Int64N(left + 1)
}

// eachTrace is Each, or ReserveEach when reserves is set.
func eachTrace(t *testing.T, newStore NewStore, n int, reserves bool) {
	seed := testenv.Seed(t)
	r := rand.New(rand.NewPCG(seed, 13))
	clock := new(setClock)
	lim := sluice.New(newStore(t, clock))
	ks, ams := model.NewKeys(), model.NewKeys() // TakeEach's model, TakeAll's
	ctx := context.Background()
	now := Base
	seen := map[string]int{}
	for i := range n {
		now += r.Int64N(300_000) * int64(r.IntN(2))
		clock.us.Store(now)
		parts, models, amodels, keys, costs, res := eachParts(r, ks, ams, reserves)
		got := make([]sluice.Result, len(parts))
		var sum sluice.Result
		var err error
		byAll := reserves && r.IntN(2) == 0
		if byAll {
			sum, err = lim.TakeAll(ctx, parts, nil)
		} else {
			sum, err = lim.TakeAll(ctx, parts, got)
		}
		if err != nil {
			t.Fatalf("seed %d request %d: %v", seed, i, err)
		}
		want := make([]algo.Decision, len(parts))
		wantSum := model.TakeEachHeadroom(models, keys, costs, res, now, want)
		if reserves {
			if sum != resultOf(wantSum) {
				t.Fatalf("seed %d request %d at +%dµs %v: summary %+v, model %+v", seed, i, now-Base, parts, sum, wantSum)
			}
		} else if all := model.TakeAll(amodels, keys, costs, now); all != wantSum || sum != resultOf(all) {
			t.Fatalf("seed %d request %d at +%dµs %v: summary %+v, TakeAll's model %+v, TakeEach's %+v", seed, i, now-Base, parts, sum, all, wantSum)
		}
		for j := range got {
			if !byAll && got[j] != resultOf(want[j]) {
				t.Fatalf("seed %d request %d at +%dµs %v: part %d: %+v, model %+v", seed, i, now-Base, parts, j, got[j], resultOf(want[j]))
			}
		}
		switch {
		case sum.Allowed:
			seen["allowed"]++
		case len(parts) > 1 && slices.ContainsFunc(want, func(d algo.Decision) bool { return d.Allowed }):
			seen["refused, a part granting"]++
		default:
			seen["refused"]++
		}
	}
	if len(seen) < 3 {
		t.Errorf("a trace that tests little: %v", seen)
	}
	t.Logf("%v (seed %d)", seen, seed)
}

// eachParts draws one composite of eachTrace: its parts, their models in
// ks and ams (TakeEach's and TakeAll's), keys, costs and, when reserves is
// set, random reserves (else nil).
func eachParts(r *rand.Rand, ks, ams *model.Keys, reserves bool) (parts []sluice.Part, models, amodels []*model.Model, keys []string, costs, res []int64) {
	limits := []sluice.Limit{
		sluice.PerSecond(3).WithBurst(4),
		sluice.Per(7, 100*time.Millisecond).WithBurst(2).WithAlgorithm(sluice.GCRA),
		sluice.PerSecond(2).WithBurst(3).WithAlgorithm(sluice.LeakyBucket),
		sluice.PerSecond(6).WithAlgorithm(sluice.FixedWindow),
		sluice.PerSecond(4).WithAlgorithm(sluice.AlignedWindow),
		sluice.PerSecond(5).WithAlgorithm(sluice.SlidingWindow),
		sluice.PerSecond(4).WithAlgorithm(sluice.SlidingLog),
	}
	np := 1 + r.IntN(5)
	perm := r.Perm(6)
	parts = make([]sluice.Part, np)
	models, amodels = make([]*model.Model, np), make([]*model.Model, np)
	keys, costs = make([]string, np), make([]int64, np)
	if reserves {
		res = make([]int64, np)
	}
	for j := range parts {
		l := limits[r.IntN(len(limits))]
		p, _ := storelink.Params(l)
		cost := r.Int64N(p.Capacity() + 1)
		if r.IntN(3) == 0 {
			cost = min(1, cost)
		}
		keys[j], costs[j] = fmt.Sprintf("{each}k%d", perm[j]), cost
		parts[j] = sluice.Part{Key: keys[j], Limit: l, Cost: cost}
		if reserves {
			res[j] = randomReserve(r, p.Capacity()-cost)
			parts[j].Headroom = res[j]
		}
		models[j], amodels[j] = ks.Model(ModelLimit(p)), ams.Model(ModelLimit(p))
	}
	return parts, models, amodels, keys, costs, res
}

func resultOf(d algo.Decision) sluice.Result {
	return sluice.Result{Allowed: d.Allowed, Remaining: d.Remaining, RetryAfter: us(d.RetryAfter), ResetAfter: us(d.ResetAfter), Delay: us(d.Delay), Window: d.Window}
}

func us(v int64) time.Duration {
	if v == algo.Never {
		return math.MaxInt64
	}
	return time.Duration(v) * time.Microsecond
}

// setClock is a sluice.Clock that reads the time last stored, in µs since
// the epoch; Sleep returns at once.
type setClock struct{ us atomic.Int64 }

func (c *setClock) Now() time.Time { return time.UnixMicro(c.us.Load()) }

func (*setClock) Sleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }
