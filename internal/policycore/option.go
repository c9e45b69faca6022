package policycore

import (
	"fmt"
	"time"
)

// Set is what the doors' options that take a handler, a clock or a round
// tripper do: it sets *dst to v, and refuses a nil v as the option named
// name, so that the mistake shows when the middleware is made rather than
// on a request. T is an interface type.
func Set[T any](name string, dst *T, v T) error {
	if any(v) == nil {
		return fmt.Errorf("%s(nil)", name)
	}
	*dst = v
	return nil
}

// SetUnavailableRetryAfter is what both doors' WithUnavailableRetryAfter
// do: it sets *dst to d, the wait a client is told when the store fails
// closed, which must be positive.
func SetUnavailableRetryAfter(dst *time.Duration, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("WithUnavailableRetryAfter(%v): not positive", d)
	}
	*dst = d
	return nil
}
