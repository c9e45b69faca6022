// Package runat decides operations at a time the caller gives — a trace's,
// a simulation's — through the one store contract: an Op with its At set,
// handed to store.Store.Run, on memory and Redis alike.
//
// The contract reads At 0 as "now, by the store's clock". A memory store
// made by Memory has a clock stopped at the epoch, so time 0 is the epoch
// there as any other time is itself; on a store with a clock of its own
// (Redis's), time 0 cannot be given, and Run says so.
package runat

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/store"
)

// Run decides op on st at the time at (µs since the Unix epoch) and
// returns its decision, or its error. op must be checked as a Limiter
// checks it (see store.Op).
func Run(ctx context.Context, st store.Store, op store.Op, at int64) (store.Decision, error) {
	if at == 0 && !atEpoch(st) {
		return store.Decision{}, fmt.Errorf("%w: time 0 on a store that reads it as its own clock's now", sluice.ErrInvalidTime)
	}
	op.At = at
	ops := [1]store.Op{op}
	st.Run(ctx, ops[:])
	return ops[0].Decision, ops[0].Err
}

// Memory returns a memory store for decisions at given times: its clock
// stands at the epoch, so that Run at 0 decides at 0.
func Memory(opts ...memstore.Option) *memstore.Store {
	return memstore.New(append(opts, memstore.WithClock(epoch{}))...)
}

// atEpoch reports whether st's clock stands at the epoch (Memory's).
func atEpoch(st store.Store) bool {
	c, ok := st.(interface{ Clock() store.Clock })
	return ok && c.Clock() != nil && c.Clock().Now().UnixMicro() == 0
}

// epoch is a clock stopped at the Unix epoch.
type epoch struct{}

func (epoch) Now() time.Time { return time.UnixMicro(0) }

// Sleep fails: no time passes on the clock (the tools decide, never wait).
func (epoch) Sleep(context.Context, time.Duration) error { return errStopped }

var errStopped = errors.New("runat: no time passes on a clock stopped at the epoch")
