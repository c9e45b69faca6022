// Package gctune keeps the garbage collector from running on a small heap
// far more often than memory requires: a floor under the heap's goal.
//
// A service whose live heap is a few megabytes and whose garbage comes fast
// (every call allocates a little, nothing of it lives) collects many times
// a second under GOGC alone, though a goal of tens of megabytes would cost
// nothing. With a floor the goal is the larger of the floor and what the
// GOGC percentage gives over the live heap: once the live heap is large
// enough, GOGC alone sets it.
package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// maxPercent bounds the percentage the floor may ask for.
const maxPercent = 100_000

// minHeap is the runtime's smallest heap goal at GOGC=100; at GOGC=p it is
// minHeap × p/100.
const minHeap = 4 << 20

// Percent returns the smallest GOGC percentage, and never below percent, that
// sets the heap's goal to at least floor bytes after a collection that left
// live bytes of heap and scanned scan bytes in all (heap, stacks and
// globals; 0 before the first collection). The runtime's goal is the larger
// of live + scan × GOGC/100 and its minimum heap, 4 MiB × GOGC/100: on a
// small heap the minimum reaches the floor first, and the percentage that
// gets there is all it takes.
func Percent(percent int, floor, live, scan uint64) int {
	if floor <= live {
		return percent
	}
	p := (floor*100 + minHeap - 1) / minHeap // the minimum heap reaches the floor
	if scan > 0 {
		p = min(p, ((floor-live)*100+scan-1)/scan)
	}
	return max(percent, int(min(p, maxPercent)))
}

// A Tuner sets GOGC after each collection from the live heap it left.
type Tuner struct {
	percent int
	floor   uint64
	sample  []metrics.Sample

	mu      sync.Mutex
	stopped bool
	last    int // the percentage set last
}

// Start sets GOGC to percent and keeps the heap's goal at least floor bytes
// (see Percent) until Stop: after each collection it reads the live heap
// and the stacks and globals scanned (runtime/metrics) and sets the
// percentage again when it moved. A floor of 0 only sets percent.
func Start(percent int, floor uint64) *Tuner {
	t := &Tuner{percent: percent, floor: floor, sample: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"}}, last: percent}
	debug.SetGCPercent(percent)
	if floor > 0 {
		t.tune()
		arm(&sentinel{t: t})
	}
	return t
}

// Stop stops tuning and sets GOGC back to the percentage Start was given.
func (t *Tuner) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	debug.SetGCPercent(t.percent)
}

// Current returns the percentage set last.
func (t *Tuner) Current() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last
}

// tune sets the percentage for the live heap the last collection left, and
// reports whether the Tuner still runs.
func (t *Tuner) tune() bool {
	metrics.Read(t.sample)
	var v [3]uint64
	for i, s := range t.sample {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = s.Value.Uint64()
		}
	}
	p := Percent(t.percent, t.floor, v[0], v[0]+v[1]+v[2])
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	// A change under an eighth moves the goal too little to be worth it.
	if d := p - t.last; d > t.last/8 || -d > t.last/8 {
		debug.SetGCPercent(p)
		t.last = p
	}
	return true
}

// A sentinel is garbage whose finalizer runs once per collection: it tunes,
// then arms itself for the next one.
type sentinel struct {
	t *Tuner
	_ [16]byte // not a tiny allocation, whose finalizer may never run
}

func arm(s *sentinel) { runtime.SetFinalizer(s, finalize) }

func finalize(s *sentinel) {
	if s.t.tune() {
		arm(s)
	}
}
