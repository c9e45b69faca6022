package policycore

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/observe"
)

// Hold is a concurrency policy as both doors keep it: a request (a call, a
// stream) holds a lease of Units on its key for as long as it runs, and
// gives it back however it ends. The doors only find the key and answer a
// refusal; Acquire, Release and the events are here.
type Hold struct {
	Name string
	// Limit's Headroom is kept for critical requests: the others hold a
	// slot only while it stays free after them.
	Limit     sluice.Concurrency
	Units     int64  // at least 1
	KeyPrefix string // KeyPrefix(the door's prefix, Name)
	Lim       *sluice.Limiter
	Obs       observe.Observer // nil: none
	Source    string           // the door's, for the Events
}

// Check checks h as its door's New read it (Name, Limit, Units, Lim) and
// fills in the rest: Units 0 is 1, KeyPrefix from prefix.
func (h *Hold) Check(prefix string) error {
	if err := CheckName(h.Name); err != nil {
		return err
	}
	if h.Lim == nil {
		return fmt.Errorf("concurrency policy %q: nil Limiter", h.Name)
	}
	if err := h.Limit.Validate(); err != nil {
		return fmt.Errorf("concurrency policy %q: %w", h.Name, err)
	}
	switch {
	case h.Units < 0:
		return fmt.Errorf("concurrency policy %q: negative units %d", h.Name, h.Units)
	case h.Units == 0:
		h.Units = 1
	}
	if h.Units > h.Limit.Limit-h.Limit.Headroom {
		return fmt.Errorf("concurrency policy %q: %d units exceed what a request may hold (%d, less a headroom of %d): nothing could pass", h.Name, h.Units, h.Limit.Limit, h.Limit.Headroom)
	}
	h.KeyPrefix = KeyPrefix(prefix, h.Name)
	return nil
}

// Acquire asks for the lease of the request whose key is key (critical: it
// may use the headroom), and reports the outcome: held (Allowed), refused
// (Denied), a failure policy's grant (Degraded) or an error.
func (h *Hold) Acquire(ctx context.Context, key string, critical bool) (sluice.Lease, error) {
	start := time.Now()
	c := h.Limit
	if critical {
		c.Headroom = 0
	}
	ls, err := h.Lim.Acquire(ctx, h.KeyPrefix+key, c, h.Units)
	o := observe.Allowed
	switch {
	case err != nil:
		o = observe.Error
	case ls.Degraded && ls.Allowed:
		o = observe.Degraded
	case !ls.Allowed:
		o = observe.Denied
	}
	h.record(o, time.Since(start))
	return ls, err
}

// Release gives ls back once the work has ended, whatever ended it: a
// context that was cancelled (a client gone, a stream reset) must still
// release, so the release runs without its cancellation. A lease that had
// come back by itself before (the work outlived its lifetime) is reported
// as observe.Expired.
func (h *Hold) Release(ctx context.Context, ls sluice.Lease) {
	r, err := h.Lim.Release(context.WithoutCancel(ctx), ls)
	if err == nil && !r.Allowed && ls.ID != 0 {
		h.record(observe.Expired, 0)
	}
}

// Run runs work holding a lease for key (critical: it may use the
// headroom), released however work ends (it
// returns or panics; the panic goes on once the lease is given back). It
// returns the refused lease when no slot is free (work did not run), and
// the Limiter's error.
func (h *Hold) Run(ctx context.Context, key string, critical bool, work func()) (refused *sluice.Lease, err error) {
	ls, err := h.Acquire(ctx, key, critical)
	if err != nil {
		return nil, err
	}
	if !ls.Allowed {
		return &ls, nil
	}
	defer h.Release(ctx, ls)
	work()
	return nil, nil
}

// RetryAfter is the wait a refusal tells the client, in whole seconds
// (at least 1): the refused lease's RetryAfter, an upper bound were no
// lease extended, rounded up.
func RetryAfter(ls *sluice.Lease) int64 { return max(Seconds(ls.RetryAfter), 1) }

func (h *Hold) record(o observe.Outcome, lat time.Duration) {
	if h.Obs != nil {
		h.Obs.Observe(observe.Event{Source: h.Source, Policy: h.Name, Outcome: o, Latency: lat})
	}
}
