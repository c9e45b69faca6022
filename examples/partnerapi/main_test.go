package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
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

// partnerAt is a stand-in partner on a loopback port that records when (on
// the clock) it was called, and refuses the calls in refuse with 429 and a
// Retry-After of 3s.
func partnerAt(t *testing.T, clock *simClock, refuse ...int) (*httptest.Server, func() []time.Duration) {
	var mu sync.Mutex
	var at []time.Duration
	start := clock.Now()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, clock.Now().Sub(start))
		for _, n := range refuse {
			if n == len(at) {
				w.Header().Set("Retry-After", "3")
				w.WriteHeader(http.StatusTooManyRequests)
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv, func() []time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Duration(nil), at...)
	}
}

func TestClient(t *testing.T) {
	clock := &simClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	lim := sluice.New(memstore.New(memstore.WithClock(clock)))
	srv, times := partnerAt(t, clock, 42)
	c, err := NewClient(lim, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < 40; i++ {
		if s, err := c.Call(ctx, "/get"); err != nil || s != 200 {
			t.Fatalf("get %d: %d %v", i, s, err)
		}
	}
	for i := 0; i < 3; i++ {
		if s, err := c.Call(ctx, "/export"); err != nil || s != 200 {
			t.Fatalf("export %d: %d %v", i, s, err)
		}
	}
	// The burst covers the 40 gets and the first export; the next waits
	// for 10 units at 10/s (1s), and the partner refuses it with
	// Retry-After 3: it goes again at 4s, and the third export with it
	// (the budget has refilled meanwhile).
	at := times()
	if len(at) != 44 {
		t.Fatalf("the partner saw %d calls, want 44", len(at))
	}
	if got, want := fmt.Sprint(at[0], at[39:]), "0s [0s 0s 1s 4s 4s]"; got != want {
		t.Fatalf("call times %s, want %s", got, want)
	}
	// A caller who cannot wait 3 seconds is told at once, spending
	// nothing and sending nothing.
	for i := 0; i < 3; i++ { // spend the budget
		if _, err := c.Call(ctx, "/export"); err != nil {
			t.Fatal(err)
		}
	}
	before := clock.Now()
	short, cancel := context.WithDeadline(ctx, clock.Now().Add(500*time.Millisecond)) // read on the limiter's clock
	defer cancel()
	if _, err := c.Call(short, "/export"); !errors.Is(err, sluice.ErrDeadline) {
		t.Fatalf("export with a short deadline: %v", err)
	}
	if clock.Now() != before || len(times()) != 47 {
		t.Fatal("a refused wait slept or called")
	}
}
