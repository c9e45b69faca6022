package serve

import (
	"context"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
)

// The units every instance holds on the keys the console's slots view
// shows: a look at the store (an acquire of 0 units) per key, at most
// once a second whatever the number of pages polling, bounded in keys and
// time (HeldKey.HeldAll).
const (
	// allEvery is how long a look's answers serve (µs, by the holds
	// table's clock): the pages polling within it read them.
	allEvery = int64(time.Second / time.Microsecond)
	// allTimeout bounds a round of looks: a key whose look has not
	// answered by then is left out.
	allTimeout = 200 * time.Millisecond
	// maxAllLooks bounds the keys looked at in a round: the first of the
	// view's, those holding the most.
	maxAllLooks = 20
)

// allLimit is the limit a look names: the largest there is, so that its
// Remaining, allLimit less the units held (SEMANTICS.md, "Concurrency
// limits"), is exact whatever limits the acquires named. A look changes
// nothing (units 0), so the limit it names is not kept.
var allLimit = sluice.Concurrency{Limit: algo.MaxScaled}

// allHolds keeps the answers of the last round of looks. Its methods are
// safe for concurrent use.
type allHolds struct {
	mu      sync.Mutex // held through a round: the callers meanwhile wait for it
	at      int64      // when the last round began, µs by the holds table's clock
	answers map[string]int64
}

// held returns the units held on each store key the last round answered
// for, first running a round on keys (look) if the last is allEvery old,
// or there was none. The map returned is not changed afterwards.
func (a *allHolds) held(now func() int64, keys []string, look func([]string) map[string]int64) map[string]int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := now()
	if a.answers == nil || t-a.at >= allEvery || t < a.at {
		a.answers, a.at = look(keys[:min(len(keys), maxAllLooks)]), t
	}
	return a.answers
}

// lookAll looks at the units held on each of keys (store keys) in the
// store, all at once (a Redis store batches them), and returns those
// answered within allTimeout; a key whose look failed, or that a failure
// policy answered (Degraded: not the store's figure), is left out.
func (s *service) lookAll(keys []string) map[string]int64 {
	out := make(map[string]int64, len(keys))
	if len(keys) == 0 {
		return out
	}
	ctx, cancel := context.WithTimeout(context.Background(), allTimeout)
	defer cancel()
	type answer struct {
		key  string
		held int64
		ok   bool
	}
	answers := make(chan answer, len(keys)) // a look that answers late never blocks
	for _, key := range keys {
		go func() {
			ls, err := s.lim.Acquire(ctx, key, allLimit, 0)
			answers <- answer{key, allLimit.Limit - ls.Remaining, err == nil && !ls.Degraded}
		}()
	}
	for range keys {
		select {
		case a := <-answers:
			if a.ok {
				out[a.key] = a.held
			}
		case <-ctx.Done():
			return out
		}
	}
	return out
}
