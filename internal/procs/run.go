package procs

import (
	"runtime"
	"sync"
	"time"
)

// Interval is how often a Runner samples the process's CPU.
const Interval = 100 * time.Millisecond

// A Runner sets GOMAXPROCS from a Controller every Interval.
type Runner struct {
	stop chan struct{}
	done chan struct{}
	once sync.Once
	max  int
}

// Supported reports whether Start can read the process's CPU time here
// (Unix systems); where it cannot, Start leaves GOMAXPROCS alone.
func Supported() bool {
	_, ok := processCPU()
	return ok
}

// Start runs a Controller whose ceiling is the current GOMAXPROCS until Stop,
// setting GOMAXPROCS to what it decides; changed, when not nil, is told
// each change and the CPU the process used over the last sample, in cores.
// Where the process's CPU time cannot be read (see Supported) it does
// nothing until Stop.
func Start(changed func(from, to int, used float64)) *Runner {
	r := &Runner{stop: make(chan struct{}), done: make(chan struct{}), max: runtime.GOMAXPROCS(0)}
	t := time.NewTicker(Interval)
	go func() {
		defer t.Stop()
		r.run(processCPU, runtime.GOMAXPROCS, time.Now, t.C, changed)
	}()
	return r
}

// Stop stops the Runner and sets GOMAXPROCS back to its ceiling.
func (r *Runner) Stop() {
	r.once.Do(func() {
		close(r.stop)
		<-r.done
		runtime.GOMAXPROCS(r.max)
	})
}

// run samples cpu at each tick, at the time now gives, and calls set with
// each change.
func (r *Runner) run(cpu func() (time.Duration, bool), set func(int) int, now func() time.Time, tick <-chan time.Time, changed func(from, to int, used float64)) {
	defer close(r.done)
	last, ok := cpu()
	if !ok {
		<-r.stop
		return
	}
	lastAt := now()
	c := New(r.max, lastAt)
	for {
		select {
		case <-r.stop:
			return
		case <-tick:
			used, ok := cpu()
			at := now()
			wall := at.Sub(lastAt)
			if !ok || wall <= 0 {
				continue
			}
			cores := float64(used-last) / float64(wall)
			last, lastAt = used, at
			from := c.Procs()
			if to := c.Step(at, cores); to != from {
				set(to)
				if changed != nil {
					changed(from, to, cores)
				}
			}
		}
	}
}
