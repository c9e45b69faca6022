package store

import (
	"errors"

	"github.com/sluice-go/sluice/internal/algo"
)

// The errors a store puts in an Op's Err (wrapped, with its reason), which
// the sluice package re-exports under the same names.
var (
	// ErrStoreUnavailable is a store that could not be reached or did
	// not answer: the op changed nothing (or, a take's reply lost,
	// nothing the store will keep; see redisstore).
	ErrStoreUnavailable = errors.New("sluice: store unavailable")
	// ErrInvalidTime is an At (or a store's clock) outside the range the
	// steps keep exact.
	ErrInvalidTime = algo.ErrInvalidTime
	// ErrNoRefund is a Refund or a Charge under an algorithm that cannot
	// give units back or carry a debt (leaky bucket, sliding window,
	// sliding log).
	ErrNoRefund = algo.ErrNoRefund
	// ErrIDInUse is an Acquire whose ID names a hold the key has already.
	ErrIDInUse = algo.ErrHoldID
)
