package queue_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/queue"
)

// Two jobs a second, at most two waiting behind the next: a burst of five
// pushes takes three, and they leave half a second apart, however late the
// worker comes.
func ExampleMemory() {
	clock := &stepClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	start := clock.now
	q, err := queue.NewMemory(sluice.PerSecond(2).WithBurst(2).WithAlgorithm(sluice.LeakyBucket),
		queue.WithClock(clock))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, job := range []string{"a", "b", "c", "d", "e"} {
		r, _ := q.Push(ctx, []byte(job))
		if r.Accepted {
			fmt.Printf("push %s: release at +%v\n", job, r.ReleaseAt.Sub(start))
		} else {
			fmt.Printf("push %s: full, retry after %v\n", job, r.RetryAfter)
		}
	}
	clock.now = clock.now.Add(700 * time.Millisecond) // the worker comes late
	for n, _ := q.Len(ctx); n > 0; n, _ = q.Len(ctx) {
		job, _ := q.Pop(ctx) // waits by clock.Sleep
		fmt.Printf("+%v: %s (slot +%v)\n", job.DeliveredAt.Sub(start), job.Payload, job.ReleaseAt.Sub(start))
		q.Ack(ctx, job)
	}
	// Output:
	// push a: release at +0s
	// push b: release at +500ms
	// push c: release at +1s
	// push d: full, retry after 500ms
	// push e: full, retry after 500ms
	// +700ms: a (slot +0s)
	// +1.2s: b (slot +500ms)
	// +1.7s: c (slot +1s)
}

// Workers in every process of a fleet share one rate: 20 calls a second to
// a payment provider, with up to 1000 calls waiting.
//
// Compiled, not run: it needs a Redis at 127.0.0.1:6379, and its workers
// never stop (TestRedisMatchesMemory and TestDrainAcrossProcesses check
// the queue on a Redis of their own).
func ExampleRedis() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	q, err := queue.NewRedis(client, "payments", sluice.PerSecond(20).WithBurst(1000).WithAlgorithm(sluice.LeakyBucket),
		queue.WithVisibilityTimeout(time.Minute), queue.WithPrefix("myapp:queue:"))
	if err != nil {
		panic(err)
	}
	defer q.Close()
	ctx := context.Background()

	// Producers:
	if r, err := q.Push(ctx, []byte(`{"charge":42}`)); err == nil && !r.Accepted {
		fmt.Println("queue full, retry after", r.RetryAfter)
	}

	// Workers, as many as you like, in as many processes:
	for {
		job, err := q.Pop(ctx)
		if err != nil {
			return
		}
		// call the provider with job.Payload, then:
		_ = q.Ack(ctx, job)
	}
}

// stepClock is a sluice.Clock whose time moves only when Sleep moves it, so
// that the example runs at once and prints the same times on every run.
type stepClock struct{ now time.Time }

func (c *stepClock) Now() time.Time { return c.now }

func (c *stepClock) Sleep(ctx context.Context, d time.Duration) error {
	c.now = c.now.Add(d)
	return ctx.Err()
}
