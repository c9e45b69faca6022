package testenv

import (
	"context"
	"sync"
	"time"
)

// Clock is a clock a test moves by hand (Add), safe for concurrent use: a
// store or a Limiter given it decides at the instants the test chooses.
// Sleep does not wait and moves nothing: a leaky bucket's delay passes at
// once, the clock unmoved. It has a sluice.Clock's methods.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock standing at 2026-01-01 00:00 UTC.
func NewClock() *Clock { return &Clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Add moves the clock on by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Sleep returns at once: ctx's error, or nil.
func (c *Clock) Sleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }
