package serve

import (
	"context"
	"time"
)

// sweepEvery is how often the service sweeps its memory stores.
const sweepEvery = 10 * time.Second

// A memory store forgets a key once its state is fresh again, but only
// when it sweeps, and it sweeps a shard when the shard has doubled since
// its last sweep (memstore): a burst of keys that ends leaves them in
// memory until as many new ones come. A service's callers choose its keys
// (every value of a descriptor, every limit override), so such a burst is
// theirs to make: the service sweeps its memory stores on a timer too, so
// that what the keys hold leaves within sweepEvery of their windows' end
// whatever comes after.

// sweeper is a store that can drop its fresh keys on demand (a memstore).
type sweeper interface{ Sweep() }

// sweepStores sweeps the service's memory stores every period until ctx
// ends.
func (s *Server) sweepStores(ctx context.Context, period time.Duration) {
	var stores []sweeper
	for _, st := range []any{s.opts.Store, s.opts.PerSecondStore} {
		if sw, ok := st.(sweeper); ok {
			stores = append(stores, sw)
		}
	}
	if len(stores) == 0 {
		return
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			for _, sw := range stores {
				sw.Sweep()
			}
		}
	}
}
