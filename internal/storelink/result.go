package storelink

import (
	"time"

	"github.com/sluice-go/sluice/internal/algo"
)

// Result is the root package's Result, field for field, so that each
// converts to the other (sluice.Result(r)) at no cost: a field added to one
// and not to the other stops the conversions from compiling.
type Result struct {
	Allowed    bool
	Remaining  int64
	RetryAfter time.Duration
	ResetAfter time.Duration
	Delay      time.Duration
	Degraded   bool
	Window     int64
}

// ResultOf returns a step's decision as a Result.
func ResultOf(d *algo.Decision) Result {
	return Result{
		Allowed:    d.Allowed,
		Remaining:  d.Remaining,
		RetryAfter: Duration(d.RetryAfter),
		ResetAfter: Duration(d.ResetAfter),
		Delay:      Duration(d.Delay),
		Window:     d.Window,
	}
}
