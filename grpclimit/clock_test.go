package grpclimit_test

import (
	"context"
	"time"
)

// frozenClock is a sluice.Clock that stands still, so outputs are stable.
type frozenClock time.Time

func (c frozenClock) Now() time.Time { return time.Time(c) }

func (frozenClock) Sleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }
