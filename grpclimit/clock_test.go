package grpclimit_test

import (
	"context"
	"time"
)

// frozenClock is a sluice.Clock that stands still, so outputs are stable.
type frozenClock time.Time

func (c frozenClock) Now() time.Time { return time.Time(c) }

func (frozenClock) Sleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

// realClock is the system's clock, for tests whose store time stands still
// while deadlines and waits run in real time.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
