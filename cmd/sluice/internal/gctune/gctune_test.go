package gctune

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		percent           int
		floor, live, scan uint64
		want              int
	}{
		{percent: 400, floor: 0, live: 4 * mib, scan: 4 * mib, want: 400},
		{percent: 400, floor: 32 * mib, want: 800},                                 // before the first collection: the minimum heap
		{percent: 400, floor: 32 * mib, live: 1 * mib, scan: 1 * mib, want: 800},   // the minimum heap gets there first
		{percent: 400, floor: 32 * mib, live: 6 * mib, scan: 6 * mib, want: 434},   // 6 + 6 × 4.34 ≥ 32
		{percent: 400, floor: 32 * mib, live: 6 * mib, scan: 7 * mib, want: 400},   // 6 + 7 × 4 ≥ 32: GOGC alone
		{percent: 400, floor: 32 * mib, live: 32 * mib, scan: 32 * mib, want: 400}, // at the floor
		{percent: 400, floor: 64 * mib, live: 200 * mib, scan: 201 * mib, want: 400},
		{percent: 100, floor: 64 * mib, live: 16 * mib, scan: 16 * mib, want: 300},
		{percent: 100, floor: 1 << 40, live: 3, scan: 3, want: maxPercent},
	} {
		got := Percent(c.percent, c.floor, c.live, c.scan)
		if got != c.want {
			t.Errorf("Percent(%d, %d, %d, %d) = %d, want %d", c.percent, c.floor, c.live, c.scan, got, c.want)
		}
		if got > c.percent && got < maxPercent {
			if goal := max(c.live+c.scan*uint64(got)/100, minHeap*uint64(got)/100); goal < c.floor {
				t.Errorf("Percent(%d, %d, %d, %d) = %d: goal %d under the floor", c.percent, c.floor, c.live, c.scan, got, goal)
			}
		}
	}
}

// TestTuner: a floor far above this test's live heap raises GOGC after a
// collection; Stop sets it back.
func TestTuner(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	tu := Start(150, 1<<30)
	t.Cleanup(tu.Stop)
	// The finalizer runs after the collection, on its own goroutine.
	for end := time.Now().Add(5 * time.Second); tu.Current() <= 150 && time.Now().Before(end); time.Sleep(time.Millisecond) {
		runtime.GC()
	}
	if got := tu.Current(); got <= 150 {
		t.Fatalf("after a collection with a 1 GiB floor: GOGC %d, want more than 150", got)
	}
	set := debug.SetGCPercent(-1)
	debug.SetGCPercent(set)
	if set != tu.Current() {
		t.Errorf("the runtime's GOGC is %d, the tuner says it set %d", set, tu.Current())
	}
	// After collections the finalizer runs again and keeps it raised.
	for range 3 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if got := tu.Current(); got <= 150 {
		t.Errorf("after collections: GOGC %d, want more than 150", got)
	}
	tu.Stop()
	if got := debug.SetGCPercent(100); got != 150 {
		t.Errorf("after Stop: GOGC %d, want 150", got)
	}
}

// TestTunerNoFloor: a floor of 0 only sets the percentage.
func TestTunerNoFloor(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	tu := Start(250, 0)
	t.Cleanup(tu.Stop)
	runtime.GC()
	if got := tu.Current(); got != 250 {
		t.Errorf("GOGC %d, want 250", got)
	}
	if got := debug.SetGCPercent(250); got != 250 {
		t.Errorf("the runtime's GOGC is %d, want 250", got)
	}
	tu.Stop()
}
