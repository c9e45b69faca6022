// Package storelink is the link between the root package's Limiter and the
// stores of this module: the checked Request a store decides and the Result
// it answers, the checks that make a Request and the errors they wrap, and
// the interfaces a store implements to be reached without going through the
// root's Store interface (Engine, and memstore's fast path, Local).
//
// A store of this module hands its engine out through a method whose
// signature names this package's Engine (Linked), which no package outside
// the module can implement or name: the Limiter finds it with a type
// assertion the compiler checks, and users see only the root's Store,
// Request and Result. This package cannot import the root (the root imports
// it), so where the root's types must cross, they do so by their fields
// (Result, Clock, Checked).
package storelink

import (
	"context"

	"github.com/sluice-go/sluice/internal/algo"
)

// Linked is a store of this module: a Limiter made over one (sluice.New)
// decides through its Engine, and so do the module's tools.
type Linked interface {
	// Engine returns the store's engine, or nil for a nil store.
	Engine() Engine
}

// Decider is what a Limiter calls, on requests it has checked. The root
// package adapts a Store from outside this module to it.
type Decider interface {
	// Take makes one decision at the store's time.
	Take(ctx context.Context, req Request) (Result, error)
	// TakeAll makes one decision for a composite, atomically.
	TakeAll(ctx context.Context, reqs []Request) (Result, error)
	// TakeEach is TakeAll that also writes part i's result into each[i]
	// (len(each) == len(reqs)); see Limiter.TakeEach.
	TakeEach(ctx context.Context, reqs []Request, each []Result) (Result, error)
	// Refund gives req.Cost units back, a window's only to the window that
	// ends at window (0: the key's current one).
	Refund(ctx context.Context, req Request, window int64) (Result, error)
	// Reset returns key to its fresh state.
	Reset(ctx context.Context, key string) error
	// Clock is the clock the store decides by, or nil for the system's (a
	// Limiter waits by it).
	Clock() Clock
}

// Engine is a store's side of the link: what a Limiter calls (Decider), and
// the decisions at a time the caller gives (µs since the epoch), for
// replays, simulations and tests. Those apply no failure policy, and a
// time a step does not accept is an error wrapping ErrInvalidTime.
type Engine interface {
	Decider
	// Store returns the store the engine decides for. A Limiter decides
	// through the engine only over that very value: a type that embeds the
	// store has its Engine method too, and may have its own Take.
	Store() any
	// TakeAt makes one decision at now.
	TakeAt(ctx context.Context, req Request, now int64) (algo.Decision, error)
	// TakeAllAt makes one decision for a composite at now.
	TakeAllAt(ctx context.Context, reqs []Request, now int64) (algo.Decision, error)
	// TakeEachAt is TakeAllAt that also writes each part's decision into
	// each[i] (each as long as reqs; see model.TakeEach).
	TakeEachAt(ctx context.Context, reqs []Request, now int64, each []algo.Decision) (algo.Decision, error)
}

// MaxLocalParts is the most parts a composite may have to take Local's
// path.
const MaxLocalParts = 4

// Local is the fast path of an Engine that decides in process and needs no
// context (memstore's). Its arguments and results pass by value, in
// registers where they fit: a slice or a pointer passed through an interface
// escapes to the heap, and a Result is too wide for registers (copying one
// costs more than the decision's arithmetic).
//
// TakeLocal is Take with MaxDelay algo.Never; allowed is retryAfter == 0.
// TakeAllLocal decides the composite reqs[:n] (n ≤ MaxLocalParts).
// TakeEachLocal is TakeAllLocal that also returns each part's result
// (reqs[i]'s at [i]).
type Local interface {
	TakeLocal(key string, p algo.Params, cost int64) (remaining, retryAfter, resetAfter, delay, window int64, err error)
	TakeAllLocal(reqs [MaxLocalParts]Request, n int) (Result, error)
	TakeEachLocal(reqs [MaxLocalParts]Request, n int) (Result, [MaxLocalParts]Result, error)
}
