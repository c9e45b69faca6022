package fastclock

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestWindow: a reading serves from the counter value after it was taken
// until, at the most a tick may take, its µs has surely ended.
func TestWindow(t *testing.T) {
	for _, c := range []struct {
		name       string
		t0, t1     uint64
		ns         int64
		tickNs     float64
		start, end uint64
		ok         bool
	}{
		{"start of a µs", 1000, 1010, 5_000_000, 0.5, 1010, 3000, true},
		{"mid µs", 1000, 1010, 5_000_400, 0.5, 1010, 2200, true},
		{"last ns of a µs", 1000, 1001, 5_000_999, 0.5, 1001, 1002, true},
		{"ended while nanotime ran", 1000, 1030, 5_000_990, 1, 1030, 1010, false},
		{"slower ticks, shorter window", 1000, 1010, 5_000_000, 2, 1010, 1500, true},
		{"counter went back", 1000, 900, 5_000_000, 1, 900, 2000, false},
	} {
		start, end, ok := window(c.t0, c.t1, c.ns, c.tickNs)
		if ok != c.ok || ok && (start != c.start || end != c.end) {
			t.Errorf("%s: [%d, %d) %v, want [%d, %d) %v", c.name, start, end, ok, c.start, c.end, c.ok)
		}
	}
}

// TestSourceOf: SLUICE_FASTCLOCK=monotonic keeps the counter out; otherwise
// the counter is the clock where the kernel keeps time with it, and the
// monotonic clock's cache where it is invariant only.
func TestSourceOf(t *testing.T) {
	if got := sourceOf("monotonic"); got != monotonicOnly {
		t.Errorf("SLUICE_FASTCLOCK=monotonic: source %d", got)
	}
	invariant, kernelClock := counterStatus()
	want := monotonicOnly
	switch {
	case !tscArch:
	case kernelClock:
		want = counterClock
	case invariant:
		want = counterCache
	}
	if got := sourceOf(""); got != want {
		t.Errorf("source %d, want %d (invariant %v, kernel clock %v)", got, want, invariant, kernelClock)
	}
	t.Logf("invariant counter %v, kernel keeps time with it %v: %s mode", invariant, kernelClock, settled(want))
}

// TestCachedIsTheMonotonicClock: in cached mode every reading is the µs the
// monotonic clock gives at that moment, exactly: never before the µs of a
// nanotime read just before it, never after that of one just after, from
// goroutines on every P at once.
func TestCachedIsTheMonotonicClock(t *testing.T) {
	if invariant, _ := counterStatus(); !tscArch || !invariant {
		t.Skip("no invariant counter")
	}
	c := newTestClock(counterCache, 50*time.Millisecond, 5*time.Millisecond)
	settle(t, c, true)
	var wg sync.WaitGroup
	end := time.Now().Add(300 * time.Millisecond)
	for g := range 2 * runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				n1 := nanotime()
				m := c.now()
				n2 := nanotime()
				if lo, hi := (c.off+n1)/1000, (c.off+n2)/1000; m < lo || m > hi {
					t.Errorf("goroutine %d, call %d: %d µs, the monotonic clock read [%d, %d] around it", g, i, m, lo, hi)
					return
				}
				if i%4096 == 0 && time.Now().After(end) {
					t.Logf("goroutine %d: %d calls", g, i)
					return
				}
			}
		}()
	}
	wg.Wait()
	if c.mode() != "cached" {
		t.Errorf("mode %s after 300 ms of recalibrations every 50 ms", c.mode())
	}
}
