package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/memstore"
)

// manualClock is a clock that moves only when told to or slept on, so that
// the examples' output does not depend on when they run. A Limiter waits by
// its store's clock.
type manualClock struct{ now time.Time }

func (c *manualClock) Now() time.Time { return c.now }

func (c *manualClock) Sleep(ctx context.Context, d time.Duration) error {
	c.now = c.now.Add(d)
	return ctx.Err()
}

// Capacity 5, refill 1/s: ten requests at once pass five; the rest are told
// when to come back.
func Example() {
	clock := &manualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	store := memstore.New(memstore.WithClock(clock))
	lim := sluice.New(store)
	ctx := context.Background()
	l := sluice.PerSecond(1).WithBurst(5)

	for i := 1; i <= 10; i++ {
		r, err := lim.Take(ctx, "user:42", l, 1)
		if err != nil {
			panic(err)
		}
		fmt.Printf("request %2d: allowed=%v remaining=%d retry_after=%v\n", i, r.Allowed, r.Remaining, r.RetryAfter)
	}
	clock.now = clock.now.Add(time.Second)
	r, _ := lim.Take(ctx, "user:42", l, 1)
	fmt.Println("one second later:", r.Allowed)
	// Output:
	// request  1: allowed=true remaining=4 retry_after=0s
	// request  2: allowed=true remaining=3 retry_after=0s
	// request  3: allowed=true remaining=2 retry_after=0s
	// request  4: allowed=true remaining=1 retry_after=0s
	// request  5: allowed=true remaining=0 retry_after=0s
	// request  6: allowed=false remaining=0 retry_after=1s
	// request  7: allowed=false remaining=0 retry_after=1s
	// request  8: allowed=false remaining=0 retry_after=1s
	// request  9: allowed=false remaining=0 retry_after=1s
	// request 10: allowed=false remaining=0 retry_after=1s
	// one second later: true
}

// A partner API allows 10 requests a second with bursts of 50; an export
// costs 10.
func ExampleLimiter_Take() {
	clock := &manualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	lim := sluice.New(memstore.New(memstore.WithClock(clock)))
	ctx := context.Background()
	partner := sluice.PerSecond(10).WithBurst(50)

	for i := 0; i < 6; i++ {
		r, _ := lim.Take(ctx, "partner", partner, 10)
		fmt.Printf("export %d: allowed=%v remaining=%d retry_after=%v\n", i+1, r.Allowed, r.Remaining, r.RetryAfter)
	}
	// Output:
	// export 1: allowed=true remaining=40 retry_after=0s
	// export 2: allowed=true remaining=30 retry_after=0s
	// export 3: allowed=true remaining=20 retry_after=0s
	// export 4: allowed=true remaining=10 retry_after=0s
	// export 5: allowed=true remaining=0 retry_after=0s
	// export 6: allowed=false remaining=0 retry_after=1s
}

// A payment provider allows 20 calls a second: the leaky bucket delays calls
// instead of refusing them, so they leave 50ms apart.
func ExampleLeakyBucket() {
	clock := &manualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	lim := sluice.New(memstore.New(memstore.WithClock(clock)))
	ctx := context.Background()
	provider := sluice.PerSecond(20).WithBurst(3).WithAlgorithm(sluice.LeakyBucket)

	for i := 0; i < 5; i++ {
		r, _ := lim.Take(ctx, "provider", provider, 1)
		fmt.Printf("call %d: allowed=%v delay=%v\n", i+1, r.Allowed, r.Delay)
	}
	// Output:
	// call 1: allowed=true delay=0s
	// call 2: allowed=true delay=50ms
	// call 3: allowed=true delay=100ms
	// call 4: allowed=true delay=150ms
	// call 5: allowed=false delay=0s
}

// An LLM API allows 60 requests and 100,000 tokens a minute: each call
// spends one request and its tokens, atomically; Remaining is the smallest
// of the parts'. A refusal spends nothing and reports the parts as they are.
func ExampleLimiter_TakeAll() {
	clock := &manualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	lim := sluice.New(memstore.New(memstore.WithClock(clock)))
	ctx := context.Background()
	requests, tokens := sluice.PerMinute(60), sluice.PerMinute(100_000)

	for _, n := range []int64{40_000, 50_000, 20_000, 9_000} {
		r, err := lim.TakeAll(ctx, []sluice.Part{
			{Key: "req:acme", Limit: requests, Cost: 1},
			{Key: "tok:acme", Limit: tokens, Cost: n},
		}, nil)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%6d tokens: allowed=%v remaining=%d retry_after=%v\n", n, r.Allowed, r.Remaining, r.RetryAfter)
	}
	// Output:
	//  40000 tokens: allowed=true remaining=59 retry_after=0s
	//  50000 tokens: allowed=true remaining=58 retry_after=0s
	//  20000 tokens: allowed=false remaining=58 retry_after=6s
	//   9000 tokens: allowed=true remaining=57 retry_after=0s
}

// The same LLM API, each part's result asked for: the same decisions, and
// each part's own figures at the decision's instant, from the same store call: what a
// RateLimit header per policy needs, and which policy refused.
func ExampleLimiter_TakeAll_each() {
	clock := &manualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	lim := sluice.New(memstore.New(memstore.WithClock(clock)))
	ctx := context.Background()
	parts := []sluice.Part{
		{Key: "req:acme", Limit: sluice.PerMinute(60)},
		{Key: "tok:acme", Limit: sluice.PerMinute(100_000)},
	}
	var each [2]sluice.Result
	for _, n := range []int64{40_000, 50_000, 20_000} {
		parts[0].Cost, parts[1].Cost = 1, n
		r, err := lim.TakeAll(ctx, parts, each[:])
		if err != nil {
			panic(err)
		}
		fmt.Printf("%6d tokens: allowed=%v\n", n, r.Allowed)
		for i, e := range each {
			fmt.Printf("  %s: allowed=%v remaining=%d retry_after=%v\n", parts[i].Key, e.Allowed, e.Remaining, e.RetryAfter)
		}
	}
	// Output:
	//  40000 tokens: allowed=true
	//   req:acme: allowed=true remaining=59 retry_after=0s
	//   tok:acme: allowed=true remaining=60000 retry_after=0s
	//  50000 tokens: allowed=true
	//   req:acme: allowed=true remaining=58 retry_after=0s
	//   tok:acme: allowed=true remaining=10000 retry_after=0s
	//  20000 tokens: allowed=false
	//   req:acme: allowed=true remaining=58 retry_after=0s
	//   tok:acme: allowed=false remaining=10000 retry_after=6s
}

// A rolling deploy moves a key from the token bucket to GCRA: the units
// spent under one are spent under the other.
func ExampleLimit_changed() {
	clock := &manualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	lim := sluice.New(memstore.New(memstore.WithClock(clock)))
	ctx := context.Background()
	old := sluice.PerHour(10)
	lim.Take(ctx, "user:42", old, 7)
	r, _ := lim.Take(ctx, "user:42", old.WithAlgorithm(sluice.GCRA), 0)
	fmt.Println("gcra sees", r.Remaining, "left")
	r, _ = lim.Take(ctx, "user:42", old.WithBurst(20), 0)
	fmt.Println("a burst of 20 leaves", r.Remaining)
	// Output:
	// gcra sees 3 left
	// a burst of 20 leaves 13
}

// A job may call a provider 2 times a second: Wait blocks until each call
// may go (here on a clock that moves only when slept on), and gives up at
// once, spending nothing, when that would be after the context's deadline.
func ExampleLimiter_Wait() {
	clock := &manualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	lim := sluice.New(memstore.New(memstore.WithClock(clock)))
	start := clock.now
	provider := sluice.PerSecond(2)

	for i := 1; i <= 4; i++ {
		if _, err := lim.Wait(context.Background(), "provider", provider, 1); err != nil {
			panic(err)
		}
		fmt.Printf("call %d at +%v\n", i, clock.now.Sub(start))
	}
	ctx, cancel := context.WithDeadline(context.Background(), clock.now.Add(100*time.Millisecond))
	defer cancel()
	_, err := lim.Wait(ctx, "provider", provider, 1)
	fmt.Println(errors.Is(err, sluice.ErrDeadline))
	// Output:
	// call 1 at +0s
	// call 2 at +0s
	// call 3 at +500ms
	// call 4 at +1s
	// true
}

func ExampleParseLimit() {
	l, err := sluice.ParseLimit("20/100ms")
	if err != nil {
		panic(err)
	}
	fmt.Println(l.WithBurst(5).WithAlgorithm(sluice.GCRA))
	_, err = sluice.ParseLimit("10/0s")
	fmt.Println(err)
	// Output:
	// 20/100ms gcra burst 5
	// sluice: invalid limit: period "0s" in "10/0s" must be positive (like 1s, 100ms, 1m, 250us)
}

// A job takes an estimate of 10 units from a window of 10 a minute and
// turns out to need 4: Refund, given the take's Result, gives 6 back to
// the window the take counted in. A job that ran past the window's end has nothing to give back
// there: its units were spent in a window that has ended, and the next one
// is not given room it never had.
func ExampleLimiter_Refund() {
	clock := &manualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	lim := sluice.New(memstore.New(memstore.WithClock(clock)))
	ctx := context.Background()
	l := sluice.PerMinute(10).WithAlgorithm(sluice.AlignedWindow)

	take, _ := lim.Take(ctx, "export", l, 10)
	r, _ := lim.Refund(ctx, "export", l, 6, take)
	fmt.Println("same window:", r.Remaining, "left")

	take, _ = lim.Take(ctx, "export", l, 6)
	clock.now = clock.now.Add(time.Minute) // the job ran past the minute
	next, _ := lim.Take(ctx, "export", l, 10)
	r, _ = lim.Refund(ctx, "export", l, 6, take)
	fmt.Println("next window:", next.Allowed, r.Remaining, "left")
	// Output:
	// same window: 6 left
	// next window: true 0 left
}

// An API key may spend 1000 LLM tokens a minute, and owe up to 5000 more:
// a call's tokens are known only from its response, so they are charged
// after it, whatever the key has left.
func ExampleLimiter_Charge() {
	clock := &manualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	lim := sluice.New(memstore.New(memstore.WithClock(clock)))
	ctx := context.Background()
	tokens, _ := sluice.ParseLimit("1000/1m debt 5000")

	r, _ := lim.Charge(ctx, "key:7", tokens, 4000)
	fmt.Println("4000 charged:", r.Allowed, "remaining", r.Remaining)
	r, _ = lim.Take(ctx, "key:7", tokens, 100)
	fmt.Println("the next call:", r.Allowed, "retry after", r.RetryAfter)
	r, _ = lim.Charge(ctx, "key:7", tokens, 9000)
	fmt.Println("past the allowance:", r.Allowed, "remaining", r.Remaining)
	// Output:
	// 4000 charged: true remaining -3000
	// the next call: false retry after 3m6s
	// past the allowance: false remaining -5000
}

// Take an estimate of a call's tokens before it, settle what it used
// after: the difference comes back, or is charged.
func ExampleLimiter_Settle() {
	clock := &manualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	lim := sluice.New(memstore.New(memstore.WithClock(clock)))
	ctx := context.Background()
	tokens, _ := sluice.ParseLimit("1000/1m debt 5000")

	take, _ := lim.Take(ctx, "key:7", tokens, 500)
	r, _ := lim.Settle(ctx, "key:7", tokens, 500, 300, take)
	fmt.Println("estimated 500, used 300:", r.Remaining, "left")

	take, _ = lim.Take(ctx, "key:7", tokens, 500)
	r, _ = lim.Settle(ctx, "key:7", tokens, 500, 2000, take)
	fmt.Println("estimated 500, used 2000:", r.Remaining, "left")
	// Output:
	// estimated 500, used 300: 700 left
	// estimated 500, used 2000: -1300 left
}
