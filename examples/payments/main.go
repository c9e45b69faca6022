// Command payments feeds an outbound payment provider that allows 20 calls a
// second through the leaky queue: callers push payments and are never
// refused while the queue has room; workers pop them as their turns come, so
// the provider sees one call every 50ms however bursty the callers are. With
// Redis the same queue is shared by every worker of every process
// (queue.NewRedis); here it runs in memory.
//
//	go run ./examples/payments
package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/queue"
)

// provider is the payment provider's limit; up to 200 payments may wait.
var provider = sluice.PerSecond(20).WithBurst(200).WithAlgorithm(sluice.LeakyBucket)

// Run pushes n payments at once, drains them with workers goroutines calling
// call for each, and returns when all are acknowledged.
func Run(ctx context.Context, q queue.Queue, n, workers int, call func(payment string, at time.Time)) (refused int, err error) {
	for i := 0; i < n; i++ {
		r, err := q.Push(ctx, []byte(fmt.Sprintf("payment %d", i)))
		if err != nil {
			return refused, err
		}
		if !r.Accepted {
			refused++
		}
	}
	left := n - refused
	var mu sync.Mutex
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				job, err := q.Pop(ctx)
				if err != nil {
					return // canceled: all done
				}
				call(string(job.Payload), job.DeliveredAt)
				if err := q.Ack(ctx, job); err != nil {
					return
				}
				mu.Lock()
				left--
				if left == 0 {
					cancel()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return refused, nil
}

func main() {
	q, err := queue.NewMemory(provider)
	if err != nil {
		panic(err)
	}
	start := time.Now()
	refused, err := Run(context.Background(), q, 30, 4, func(p string, at time.Time) {
		fmt.Printf("%6.3fs  %s\n", at.Sub(start).Seconds(), p)
	})
	if err != nil {
		panic(err)
	}
	fmt.Printf("30 payments, %d refused, in %.2fs\n", refused, time.Since(start).Seconds())
}
