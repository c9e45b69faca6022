package testenv

import (
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"time"
)

// Cost is what one call cost: its time, the bytes it allocated in all
// (TotalAlloc's growth, which is at least its peak), the peak of the
// heap's live objects above where they stood before (sampled every 200µs)
// and what the heap holds after the call and a collection, above where it
// stood (negative: less).
type Cost struct {
	Took  time.Duration
	Alloc uint64
	Peak  uint64
	Kept  int64
}

// Measure runs f and reports its Cost. The counts are the process's: a
// test that measures runs alone (no t.Parallel), and skips under the race
// detector, which allocates on its own.
func Measure(f func()) Cost {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	heap := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	base := heap()
	var peak uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(200 * time.Microsecond)
		defer t.Stop()
		for {
			peak = max(peak, heap())
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	})
	start := time.Now()
	f()
	took := time.Since(start)
	close(stop)
	wg.Wait()
	peak = max(peak, heap())
	runtime.ReadMemStats(&after)
	runtime.GC()
	return Cost{Took: took, Alloc: after.TotalAlloc - before.TotalAlloc, Peak: peak - min(peak, base), Kept: int64(heap()) - int64(base)}
}

// String says the time and the memory in MB.
func (c Cost) String() string {
	return fmt.Sprintf("%v, %.1f MB allocated, heap peak +%.1f MB, kept %+.1f MB", c.Took.Round(10*time.Microsecond), float64(c.Alloc)/1e6, float64(c.Peak)/1e6, float64(c.Kept)/1e6)
}
