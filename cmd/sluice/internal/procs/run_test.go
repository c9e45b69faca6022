package procs

import (
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// A Runner driven tick by tick: the CPU it reads turns into the GOMAXPROCS
// it sets, and each change is reported.
func TestRunnerSets(t *testing.T) {
	// The load, in cores, over each sample: idle for the hold, then more
	// than one P can do, then more than two (each for Sustain samples);
	// then, after a recheck that finds 3 CPUs, 3 Ps saturated (no more to
	// give), and after one that finds 8, saturated twice more.
	var load []float64
	for range MinHold / Interval {
		load = append(load, 0.2)
	}
	load = append(load, 2, 2, 2.5, 2.5, 2.95, 2.99, 2.99)
	var (
		cpuCalls int
		cpu      time.Duration
		set      []int
		changes  []string
	)
	tick, recheck := make(chan time.Time), make(chan time.Time)
	ceiling := 4
	r := &Runner{stop: make(chan struct{}), done: make(chan struct{}), max: 4}
	// The runner reads the CPU, then the time, once to start and once a
	// tick; the k-th reading is the load's first k samples, at k samples.
	e := env{
		cpu: func() (time.Duration, bool) {
			if cpuCalls > 0 {
				cpu += time.Duration(load[cpuCalls-1] * float64(Interval))
			}
			cpuCalls++
			return cpu, true
		},
		set: func(n int) int {
			set = append(set, n)
			return 0
		},
		now:     func() time.Time { return t0.Add(time.Duration(cpuCalls-1) * Interval) },
		tick:    tick,
		ceiling: func() int { return ceiling },
		recheck: recheck,
	}
	go r.run(e, func(from, to int, used float64) {
		changes = append(changes, fmt.Sprintf("%d→%d at %.2f", from, to, used))
	})
	for i, l := range load {
		switch {
		case l == 2.95:
			ceiling = 3
			recheck <- time.Time{}
		case l == 2.99 && load[i-1] == 2.95:
			ceiling = 8
			recheck <- time.Time{}
		}
		tick <- time.Time{}
	}
	close(r.stop)
	<-r.done
	if want := []int{1, 2, 4, 3, 3, 6}; !slices.Equal(set, want) {
		t.Fatalf("set %v, want %v (changes %v)", set, want, changes)
	}
	if want := []string{"4→1 at 0.20", "1→2 at 2.00", "2→4 at 2.50", "4→3 at 2.50", "3→6 at 2.99"}; !slices.Equal(changes, want) {
		t.Fatalf("changes %q, want %q", changes, want)
	}
}

// Start and Stop on this machine: Stop puts GOMAXPROCS back. With
// SLUICE_TIMING=1, an idle process goes down to one P after the hold and
// back up when a goroutine keeps that P busy.
func TestStartStop(t *testing.T) {
	if !Supported() {
		t.Skipf("the process's CPU time cannot be read on %s", runtime.GOOS)
	}
	before := runtime.GOMAXPROCS(0)
	r := Start(nil)
	if testenv.Timing(t, "GOMAXPROCS follows the load") && before > 1 {
		deadline := time.Now().Add(MinHold + 3*time.Second)
		for runtime.GOMAXPROCS(0) != 1 && time.Now().Before(deadline) {
			time.Sleep(Interval)
		}
		if n := runtime.GOMAXPROCS(0); n != 1 {
			t.Errorf("idle for %v: GOMAXPROCS %d, want 1", MinHold+3*time.Second, n)
		}
		var stop atomic.Bool
		go func() { // keeps a P busy
			for !stop.Load() {
			}
		}()
		deadline = time.Now().Add(2 * time.Second)
		for runtime.GOMAXPROCS(0) == 1 && time.Now().Before(deadline) {
			time.Sleep(Interval / 4)
		}
		stop.Store(true)
		if n := runtime.GOMAXPROCS(0); n < 2 {
			t.Errorf("one P kept busy for 2s: GOMAXPROCS %d, want 2 or more", n)
		}
	}
	r.Stop()
	r.Stop()
	if n := runtime.GOMAXPROCS(0); n != before {
		t.Fatalf("after Stop: GOMAXPROCS %d, want %d as before", n, before)
	}
}
