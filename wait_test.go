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
	l := sluice.Per(10, time.Second).WithBurst(8).Using(sluice.LeakyBucket) // T = 100ms
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
	_, err = lim.WaitAll(dctx, parts)
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
			sluice.PerSecond(10).WithBurst(3).Using(sluice.LeakyBucket),
			sluice.PerSecond(10).Using(sluice.SlidingLog),
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
			r, err = lim.WaitAll(c.ctx, []sluice.Part{{Key: "k", Limit: l, Cost: 1}})
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
