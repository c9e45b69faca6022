package main

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/queue"
)

// 40 payments pushed at once are all accepted and reach the provider at
// least 50ms apart, in about 2s.
func TestPayments(t *testing.T) {
	q, err := queue.NewMemory(provider)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var at []time.Time
	start := time.Now()
	refused, err := Run(context.Background(), q, 40, 4, func(_ string, when time.Time) {
		mu.Lock()
		at = append(at, when)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if refused != 0 || len(at) != 40 {
		t.Fatalf("refused %d, delivered %d of 40", refused, len(at))
	}
	mu.Lock()
	defer mu.Unlock()
	// The release instants, in order: workers report them in whatever order
	// they get the lock, not the order they were released in.
	slices.SortFunc(at, time.Time.Compare)
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap < 50*time.Millisecond {
			t.Fatalf("calls %d and %d only %v apart", i-1, i, gap)
		}
	}
	if d := time.Since(start); d < 1900*time.Millisecond || d > 8*time.Second && testenv.Timing(t, "40 calls within 8s") {
		t.Fatalf("40 calls at 20/s took %v", d)
	}
}

// A queue that is full refuses with the time after which a push would fit.
func TestPaymentsQueueFull(t *testing.T) {
	q, err := queue.NewMemory(sluice.PerSecond(20).WithBurst(3).WithAlgorithm(sluice.LeakyBucket))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		if r, _ := q.Push(ctx, nil); !r.Accepted {
			t.Fatalf("push %d refused with room", i)
		}
	}
	r, err := q.Push(ctx, nil)
	if err != nil || r.Accepted || r.RetryAfter <= 0 || r.RetryAfter > 50*time.Millisecond {
		t.Fatalf("push into a full queue: %+v %v", r, err)
	}
}
