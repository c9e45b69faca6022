package storelink

import (
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/store"
)

// FastTake decides a Take of cost units of key under p at the store's
// clock, as the store's Run would decide the op: the one path by which a
// Limiter skips the op for the commonest decision (one key, now, no
// headroom). It returns the decision's figures (algo.Decision's, but
// FreshAt) one by one, in registers: through a func value, a pointer to
// the caller's stack would move what it points to to the heap, and a
// struct returned whole is spilled and copied, which stalls the hot path.
type FastTake func(key string, p *algo.Params, cost, maxDelay int64) (allowed bool, remaining, retryAfter, resetAfter, delay, window int64, err error)

// FastTakeOf returns st's FastTake, or nil for a store without one. memstore
// sets it when it is loaded.
var FastTakeOf = func(store.Store) FastTake { return nil }
