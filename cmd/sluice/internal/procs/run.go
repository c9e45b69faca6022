package procs

import (
	"runtime"
	"sync"
	"time"
)

// Interval is how often a Runner samples the process's CPU.
const Interval = 100 * time.Millisecond

// Recheck is how often a Runner asks the runtime for its default
// GOMAXPROCS again (runtime.SetDefaultGOMAXPROCS): the CPUs the process may
// use, which a container's CPU limit can change while it runs.
const Recheck = 30 * time.Second

// env is what a Runner's loop reads and sets: the process's CPU time, its
// GOMAXPROCS, the time, the ticks that sample, the CPUs it may use, and the
// ticks that ask for them.
type env struct {
	cpu     func() (time.Duration, bool)
	set     func(int) int
	now     func() time.Time
	tick    <-chan time.Time
	ceiling func() int
	recheck <-chan time.Time
}

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
	_, ok := ProcessCPU()
	return ok
}

// Start runs a Controller until Stop, setting GOMAXPROCS to what it
// decides; its ceiling is the current GOMAXPROCS, then every Recheck the
// runtime's default (the CPUs the process may use now). changed, when not
// nil, is told each change and the CPU the process used over the last
// sample, in cores. Where the process's CPU time cannot be read (see
// Supported) it does nothing until Stop.
func Start(changed func(from, to int, used float64)) *Runner {
	r := &Runner{stop: make(chan struct{}), done: make(chan struct{}), max: runtime.GOMAXPROCS(0)}
	t, re := time.NewTicker(Interval), time.NewTicker(Recheck)
	go func() {
		defer t.Stop()
		defer re.Stop()
		r.run(env{cpu: ProcessCPU, set: runtime.GOMAXPROCS, now: time.Now, tick: t.C, ceiling: defaultProcs, recheck: re.C}, changed)
	}()
	return r
}

// defaultProcs sets GOMAXPROCS to the runtime's default and returns it.
func defaultProcs() int {
	runtime.SetDefaultGOMAXPROCS()
	return runtime.GOMAXPROCS(0)
}

// Stop stops the Runner and sets GOMAXPROCS back to what it was at Start.
func (r *Runner) Stop() {
	r.once.Do(func() {
		close(r.stop)
		<-r.done
		runtime.GOMAXPROCS(r.max)
	})
}

// run samples e.cpu at each e.tick, at the time e.now gives, and calls
// e.set with each change; at each e.recheck it takes e.ceiling as the new
// ceiling and sets the Ps again (e.ceiling may have changed them).
func (r *Runner) run(e env, changed func(from, to int, used float64)) {
	defer close(r.done)
	last, ok := e.cpu()
	if !ok {
		<-r.stop
		return
	}
	lastAt := e.now()
	c := New(r.max, lastAt)
	var cores float64 // the last sample's
	for {
		select {
		case <-r.stop:
			return
		case <-e.recheck:
			from := c.Procs()
			to := c.SetMax(e.now(), e.ceiling())
			e.set(to)
			if to != from && changed != nil {
				changed(from, to, cores)
			}
		case <-e.tick:
			used, ok := e.cpu()
			at := e.now()
			wall := at.Sub(lastAt)
			if !ok || wall <= 0 {
				continue
			}
			cores = float64(used-last) / float64(wall)
			last, lastAt = used, at
			from := c.Procs()
			if to := c.Step(at, cores); to != from {
				e.set(to)
				if changed != nil {
					changed(from, to, cores)
				}
			}
		}
	}
}
