// Package store is the contract between a sluice.Limiter and the store that
// keeps its state: one interface, Store, whose one method decides
// operations, each a value the Limiter hands over already checked.
//
// The stores of this module, memstore (in process) and redisstore (Redis,
// Valkey and their clusters), implement it; so can a store written
// anywhere else. Such a store need not know the algorithms: it loads the
// State of every key an Op names (Keys), calls Apply, and saves the states
// it changed, all in one transaction — see docs/stores.md, "Writing a
// store", and package storetest, which checks a Store against the exact
// model of SEMANTICS.md decision by decision.
//
// Times and durations are whole microseconds, in int64, as in SEMANTICS.md.
package store

import (
	"context"
	"time"
)

// Store keeps limiter state and decides operations atomically.
type Store interface {
	// Run decides every op of ops, each atomically and in the order
	// given, and writes each one's answer into it: its Decision (and a
	// composite's parts' Decisions, a hold's Expiry), or its Err. The ops
	// of one call are independent decisions, not one transaction: a batch
	// lets a store send them together. An op the store cannot do has an
	// Err wrapping errors.ErrUnsupported; an op that failed changed
	// nothing. Run must not keep ops, or any part of one, after it
	// returns.
	Run(ctx context.Context, ops []Op)
}

// Clock is the time a Limiter and the stores of this module read and wait
// by. A store that has one (memstore.WithClock) lends it to the Limiter
// over it by a method Clock() Clock, so that a test sets its fake clock
// once, on the store.
type Clock interface {
	Now() time.Time
	// Sleep waits for d or until ctx is done, whichever comes first, and
	// returns ctx's error in the second case.
	Sleep(ctx context.Context, d time.Duration) error
}

// Kind names what an Op does.
type Kind uint8

// The operations.
const (
	// Take spends Cost units of Key's budget under Limit if they may pass
	// now (Cost 0 only looks); with Parts, it spends each part's cost
	// only if every part grants (Key and Limit unused).
	Take Kind = iota + 1
	// Refund gives Cost units back to Key under Limit, to the window
	// named by Window (0: the window the key is in).
	Refund
	// Reset returns Key to its fresh state: its budget and its holds.
	Reset
	// Acquire holds Cost units of Key's concurrency limit under the id
	// ID for Concurrency.Lifetime; with Parts, only if every part also
	// grants its cost, spent with the hold or not at all.
	Acquire
	// Release gives back the hold ID of Key.
	Release
	// Extend renews the hold ID of Key for Concurrency.Lifetime from now.
	Extend
	// Charge spends Cost units of Key's budget under Limit whatever it
	// has, for work already done: never refused, it leaves the key in debt,
	// up to Limit.Debt units past empty, and forgives the rest
	// (SEMANTICS.md, "Charges and debt"). With Parts, it charges each
	// part's cost (Key and Limit unused). Its Decision is a look's after
	// it, but for Allowed: whether every unit was charged. Under an
	// algorithm that cannot carry a debt its Err wraps ErrNoRefund.
	Charge
)

// Never is the MaxDelay of no bound, and the RetryAfter of a leaky-bucket
// request whose turn would come after its MaxDelay.
const Never = int64(1<<63 - 1)

// Limit is a checked rate limit: Rate units per Period µs, Burst, the
// algorithm (a sluice.Algorithm's value, never 0: the token bucket is 1),
// and Debt, how many units past empty a Charge may leave the key.
type Limit struct {
	Algorithm uint8
	Rate      int64
	Period    int64
	Burst     int64
	Debt      int64
}

// Concurrency is a checked concurrency limit: at most Limit units held at
// once, each hold coming back by itself Lifetime µs after it was acquired
// or last extended.
type Concurrency struct {
	Limit    int64
	Lifetime int64
}

// Op is one operation, checked by the Limiter before a store sees it, and
// its answer, written by the store. A field an operation does not use is
// zero.
type Op struct {
	Kind Kind
	// At is when the op is decided, in µs since the Unix epoch; 0 is now
	// by the store's clock. Tools that replay a trace set it.
	At    int64
	Key   string
	Limit Limit
	// Cost is the units a Take spends, a Refund gives back, a Charge
	// charges or an Acquire holds: from 0 to the limit's capacity (a
	// Refund's and a Charge's: any, from 0).
	Cost int64
	// Headroom makes a Take a lower class's: it passes only if Cost +
	// Headroom units could, and spends Cost (SEMANTICS.md, "Headroom").
	Headroom int64
	// MaxDelay bounds a leaky-bucket admission's Delay (Never: none); a
	// request whose turn would come later is refused with RetryAfter
	// Never, spending nothing. It applies to every part.
	MaxDelay int64
	// Window is, for a Refund, the Decision.Window of the take whose units
	// come back (0: the window the key is in now).
	Window      int64
	Concurrency Concurrency
	// ID names a hold (1 to 2^53-1). A Limiter draws it for Acquire, and
	// draws again when the Err wraps ErrIDInUse.
	ID int64
	// Degraded says, for Release and Extend, that the hold was granted by
	// a failure policy while the store was unavailable.
	Degraded bool
	// Parts make a Take or an Acquire a composite: all grant or nothing
	// is spent; or a Charge one: every part is charged. Their keys are
	// distinct.
	Parts []Part
	// SummaryOnly says the caller of a composite Take reads only its
	// summary: a store may leave the parts' Decisions unset where
	// writing them costs more (redisstore's composites across Cluster
	// slots, whose refusal would look at the parts it never reached).
	SummaryOnly bool

	// Decision is the answer; for a composite, the summary of the parts'
	// (an Acquire's: the hold's folded with its parts').
	Decision Decision
	// Expiry is when an Acquire's or an Extend's hold comes back by
	// itself (µs since the epoch); 0 when nothing is held.
	Expiry int64
	// Err is why the op could not be decided; it changed nothing then.
	Err error
}

// Part is one limit of a composite Op, and its own answer.
type Part struct {
	Key      string
	Limit    Limit
	Cost     int64
	Headroom int64
	Decision Decision
}

// Decision is an answer, as SEMANTICS.md defines its fields (durations in
// µs).
type Decision struct {
	Allowed bool
	// Remaining is negative for a key in debt: −Remaining is the debt,
	// rounded up to whole units.
	Remaining  int64
	RetryAfter int64
	ResetAfter int64
	Delay      int64
	// Window is, under the fixed and aligned windows, the end (µs since
	// the epoch) of the window the decision counted in; 0 otherwise.
	Window int64
	// Degraded says the store's failure policy answered while the store
	// was unavailable.
	Degraded bool
}
