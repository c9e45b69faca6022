package httplimit

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-go/sluice/internal/policycore"
)

// ErrNoDecision is returned by Refund and Charge for a context that did not
// pass through a Middleware, or whose request spent nothing (Refund) or
// has no policy with a Used (Charge).
var ErrNoDecision = errors.New("httplimit: no admitted request in this context")

// Refund gives up to units back to every policy the request spent on
// (enforced and shadow), never more than it spent there: for a handler that
// learns the real cost afterwards (taken 100, used 30: Refund 70). Only
// TokenBucket, GCRA, FixedWindow and AlignedWindow policies can give units
// back (Limiter.Refund); the others are left as they are and named in
// the error (wrapping algo.ErrNoRefund). A window policy gives back only
// while its key is still in the window the request spent in: a handler that
// ran across the window's end has nothing to give back there.
func Refund(ctx context.Context, units int64) error {
	return refund(ctx, "", units)
}

// RefundPolicy is Refund for the one policy named name.
func RefundPolicy(ctx context.Context, name string, units int64) error {
	if name == "" {
		return errors.New("httplimit: RefundPolicy: empty policy name")
	}
	return refund(ctx, name, units)
}

func refund(ctx context.Context, name string, units int64) error {
	if units < 0 {
		return fmt.Errorf("httplimit: refund of %d units", units)
	}
	st := stateOf(ctx)
	if st == nil {
		return ErrNoDecision
	}
	found, err := policycore.Refund(ctx, st.m.lim, st.decision().spent, name, units)
	switch {
	case !found && name != "":
		return fmt.Errorf("%w: no spend on policy %q", ErrNoDecision, name)
	case !found:
		return ErrNoDecision
	case err != nil:
		return fmt.Errorf("httplimit: refund: %w", err)
	}
	return nil
}
