package storelink

import (
	"context"
	"time"
)

// Clock is the root package's Clock: a value of either is one of the other.
type Clock interface {
	Now() time.Time
	// Sleep waits for d or until ctx is done, whichever comes first, and
	// returns ctx's error in the second case.
	Sleep(ctx context.Context, d time.Duration) error
}

// SystemClock is the real clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Sleep waits for d or until ctx is done, whichever comes first, and returns
// ctx's error in the second case.
func (SystemClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// MicroClock is a Clock that reads microseconds since the epoch from a
// function and sleeps by returning at once (ctx's error, if any): for
// replays and tests whose time moves by hand. A store given one reads
// Micros, without a time.Time.
type MicroClock func() int64

// Now returns the clock's time.
func (c MicroClock) Now() time.Time { return time.UnixMicro(c()) }

// Sleep returns at once: ctx's error, if any.
func (MicroClock) Sleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

// Micros returns the clock's time in µs since the epoch.
func (c MicroClock) Micros() int64 { return c() }

// TimeClock is MicroClock for a function that reads a time.Time.
type TimeClock func() time.Time

// Now returns the clock's time.
func (c TimeClock) Now() time.Time { return c() }

// Sleep returns at once: ctx's error, if any.
func (TimeClock) Sleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }
