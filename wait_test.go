package sluice_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/memstore"
)

// A LeakyBucket Wait whose turn would come after its deadline says so, with
// the delay it would need, not "next chance in 2562047h47m16s" (RetryAfter
// Never); it still matches ErrDeadline and context.DeadlineExceeded and
// spends nothing.
func TestWaitLeakyPastDeadlineMessage(t *testing.T) {
	lim, clock := newLimiter()
	ctx := context.Background()
	l := sluice.Per(10, time.Second).WithBurst(8).WithAlgorithm(sluice.LeakyBucket) // T = 100ms
	for i := 0; i < 5; i++ {
		if r, err := lim.Take(ctx, "payments", l, 1); err != nil || !r.Allowed {
			t.Fatalf("Take %d: %+v, %v", i, r, err)
		}
	}
	before, _ := lim.Take(ctx, "payments", l, 0)
	dctx, cancel := context.WithDeadline(ctx, clock.Now().Add(250*time.Millisecond))
	defer cancel()
	_, err := lim.Wait(dctx, "payments", l, 1)
	if !errors.Is(err, sluice.ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait = %v, want ErrDeadline and context.DeadlineExceeded", err)
	}
	msg := err.Error()
	if strings.Contains(msg, "2562047h") || !strings.Contains(msg, "turn would come in 500ms, after the deadline") {
		t.Fatalf("Wait's error %q: want its turn (in 500ms) after the deadline", msg)
	}
	if after, _ := lim.Take(ctx, "payments", l, 0); after != before {
		t.Fatalf("a refused Wait spent: before %+v after %+v", before, after)
	}
	// A composite does not know which part's turn it waits for: no duration.
	parts := []sluice.Part{{Key: "payments", Limit: l, Cost: 1}, {Key: "global", Limit: sluice.PerSecond(100), Cost: 1}}
	_, err = lim.WaitAll(dctx, parts, nil)
	if !errors.Is(err, sluice.ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitAll = %v, want ErrDeadline and context.DeadlineExceeded", err)
	}
	if msg := err.Error(); strings.Contains(msg, "2562047h") || !strings.Contains(msg, "turn would come after the deadline") {
		t.Fatalf("WaitAll's error %q: want its turn after the deadline", msg)
	}
	if len(clock.slept) != 0 {
		t.Fatalf("slept %v before giving up", clock.slept)
	}
}

// Wait and WaitAll on a context that is already canceled or past its
// deadline return its error at once and spend nothing, even when the
// request would pass.
func TestWaitDoneContextSpendsNothing(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, c := range []struct {
		ctx  context.Context
		want error
	}{{canceled, context.Canceled}, {expired, context.DeadlineExceeded}} {
		for _, l := range []sluice.Limit{
			sluice.PerSecond(10),
			sluice.PerSecond(10).WithBurst(3).WithAlgorithm(sluice.LeakyBucket),
			sluice.PerSecond(10).WithAlgorithm(sluice.SlidingLog),
		} {
			lim, clock := newLimiter()
			if c.want == context.DeadlineExceeded {
				// A deadline is read on the Limiter's clock: the fake one
				// is in the past of the real one.
				lim = sluice.New(memstore.New(), sluice.WithClock(clock))
				clock.us = time.Now().UnixMicro()
			}
			ctx := context.Background()
			before, _ := lim.Take(ctx, "k", l, 0)
			r, err := lim.Wait(c.ctx, "k", l, 1)
			if !errors.Is(err, c.want) || r != (sluice.Result{}) {
				t.Errorf("%s: Wait on a done context = %+v, %v; want the zero Result and %v", l.Algorithm, r, err, c.want)
			}
			r, err = lim.WaitAll(c.ctx, []sluice.Part{{Key: "k", Limit: l, Cost: 1}}, nil)
			if !errors.Is(err, c.want) || r != (sluice.Result{}) {
				t.Errorf("%s: WaitAll on a done context = %+v, %v; want the zero Result and %v", l.Algorithm, r, err, c.want)
			}
			if after, _ := lim.Take(ctx, "k", l, 0); after != before {
				t.Errorf("%s: Wait on a done context spent: before %+v after %+v", l.Algorithm, before, after)
			}
			if len(clock.slept) != 0 {
				t.Errorf("%s: slept %v", l.Algorithm, clock.slept)
			}
		}
	}
}

// WaitAll gives each part's figures from the last decision: the admitting
// one, or after ErrDeadline the last refusal, where the part that refused
// has Allowed false and the other true (and spent nothing); no decision
// leaves each zeroed. The same over a store from outside the module.
func TestWaitAllEach(t *testing.T) {
	for name, mk := range map[string]func() (*sluice.Limiter, *fakeClock){
		"memstore": newLimiter,
		"outside": func() (*sluice.Limiter, *fakeClock) {
			c := newFakeClock()
			return sluice.New(newMapStore(c)), c
		},
	} {
		t.Run(name, func(t *testing.T) {
			lim, clock := mk()
			clock.us = time.Now().UnixMicro() // deadlines are read on it, and the context's timer on the real one
			bg := context.Background()
			parts := []sluice.Part{{Key: "tight", Limit: sluice.PerHour(1), Cost: 1}, {Key: "loose", Limit: sluice.PerSecond(10).WithBurst(5), Cost: 1}}
			each := make([]sluice.Result, 2)
			r, err := lim.WaitAll(bg, parts, each)
			if err != nil || !r.Allowed || !each[0].Allowed || !each[1].Allowed || each[0].Remaining != 0 || each[1].Remaining != 4 {
				t.Fatalf("admitted: %+v, %v; each %+v", r, err, each)
			}
			ctx, cancel := context.WithDeadline(bg, clock.Now().Add(time.Minute))
			defer cancel()
			r, err = lim.WaitAll(ctx, parts, each)
			if !errors.Is(err, sluice.ErrDeadline) || r.Allowed {
				t.Fatalf("past the deadline: %+v, %v", r, err)
			}
			if each[0].Allowed || each[0].RetryAfter <= 0 || !each[1].Allowed || each[1].Remaining != 4 {
				t.Errorf("the refusal's parts: %+v; want the tight one refusing, the loose one with 4 left", each)
			}
			if left, _ := lim.Take(bg, "loose", parts[1].Limit, 0); left.Remaining != 4 {
				t.Errorf("the refused wait spent: %d left of the loose part, want 4", left.Remaining)
			}
			past, cancel2 := context.WithDeadline(bg, clock.Now().Add(-time.Second))
			defer cancel2()
			if _, err := lim.WaitAll(past, parts, each); !errors.Is(err, sluice.ErrDeadline) || each[0] != (sluice.Result{}) || each[1] != (sluice.Result{}) {
				t.Errorf("a deadline already passed: %v, each %+v; want ErrDeadline and each zeroed", err, each)
			}
			if _, err := lim.WaitAll(bg, parts, each[:1]); !errors.Is(err, sluice.ErrInvalidLimit) {
				t.Errorf("one result for two parts: %v, want ErrInvalidLimit", err)
			}
		})
	}
}
