package main

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/memstore"
)

// simClock is a clock that moves when someone sleeps on it.
type simClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *simClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *simClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	return ctx.Err()
}

func TestClient(t *testing.T) {
	clock := &simClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	start := clock.Now()
	lim := sluice.New(memstore.New(memstore.WithClock(clock)))
	var at []time.Duration
	c := &Client{lim: lim, call: func(string) { at = append(at, clock.Now().Sub(start)) }}
	ctx := context.Background()
	for i := 0; i < 40; i++ {
		if err := c.Do(ctx, "get", costGet); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		if err := c.Do(ctx, "export", costExport); err != nil {
			t.Fatal(err)
		}
	}
	// The burst covers the 40 gets and the first export; each next export
	// waits for 10 units at 10/s: one second.
	want := []time.Duration{0, 0, time.Second, 2 * time.Second}
	got := []time.Duration{at[0], at[40], at[41], at[42]}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("call times %v, want %v", got, want)
		}
	}
	// A caller who cannot wait a second is told at once, spending nothing.
	short, cancel := context.WithDeadline(ctx, clock.Now().Add(500*time.Millisecond))
	defer cancel()
	if err := c.Do(short, "export", costExport); !errors.Is(err, sluice.ErrDeadline) {
		t.Fatalf("export with a short deadline: %v", err)
	}
	if clock.Now().Sub(start) != 2*time.Second {
		t.Fatal("a refused Wait slept")
	}
}
