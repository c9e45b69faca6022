// Package procs runs a process on as few Ps (GOMAXPROCS) as its load needs.
//
// A Go server whose work comes as many short pieces handed from goroutine
// to goroutine (read a request, wait for a store, write the answer) pays for
// every P it is given but does not use: each hand-off wakes an idle P, whose
// thread looks for work, finds little, and sleeps again. While the load
// fits in fewer Ps, running on fewer costs less CPU per call and, where the
// process shares its cores with others, serves more calls.
//
// A Controller decides from the CPU the process used: Sustain samples in a
// row that keep its Ps busy (Saturated of them) double them, up to the
// ceiling;
// after a hold with room to spare it tries fewer, and a try that saturates
// within Confirm is undone at once and makes the next hold twice as long.
package procs

import (
	"math"
	"time"
)

// The policy's figures.
const (
	// Saturated is the share of its Ps a process keeps busy over a sample
	// when they are too few; Sustain samples in a row that saturated give it
	// twice as many. (A P busy 80–95% of the time still has idle moments:
	// on a machine whose other cores are busy too, a second P buys more
	// wake-ups, not more work done.)
	Saturated = 0.97
	Sustain   = 2
	// Room is the share of its Ps, averaged over the last Window of
	// samples, under which a process tries fewer.
	Room = 0.8
	// Headroom is how many Ps a try gives per core the process used: the
	// try keeps the Ps a little more than busy enough.
	Headroom = 1.25
	// Window is how many samples the average that starts a try spans.
	Window = 10
	// Confirm is how long a try must go unsaturated to stand.
	Confirm = time.Second
	// MinHold is how long the Ps stay as they are before a try, after a
	// change that stood; MaxHold bounds the doubling after failed tries.
	MinHold = 3 * time.Second
	MaxHold = 2 * time.Minute
)

// A Controller turns samples of the CPU a process used into the number of
// Ps it should run. Its zero value is not usable: see New. It is not safe
// for concurrent use.
type Controller struct {
	max     int
	p       int
	since   time.Time // when p last changed
	hold    time.Duration
	trying  bool // p was lowered by a try that has not yet stood for Confirm
	samples [Window]float64
	n       int // samples since p last changed, up to Window
	hot     int // saturated samples in a row
}

// New returns a Controller that starts at now on ceiling Ps (at least 1),
// the most it will ever set.
func New(ceiling int, now time.Time) *Controller {
	ceiling = max(ceiling, 1)
	return &Controller{max: ceiling, p: ceiling, since: now, hold: MinHold}
}

// Procs returns the number of Ps the Controller set last.
func (c *Controller) Procs() int { return c.p }

// Max returns the Controller's ceiling.
func (c *Controller) Max() int { return c.max }

// Hold returns how long the Ps now stay as they are before a try.
func (c *Controller) Hold() time.Duration { return c.hold }

// Step takes the CPU the process used over the sample that ended at now,
// in cores (CPU time over wall time), and returns the number of Ps to run
// from now on. A used that is not a number counts as saturated.
func (c *Controller) Step(now time.Time, used float64) int {
	if !(used >= 0) || math.IsInf(used, 0) {
		used = math.Inf(1)
	}
	saturated := used >= Saturated*float64(c.p)
	if saturated {
		c.hot++
	} else {
		c.hot = 0
	}
	if saturated && c.hot >= Sustain && c.p < c.max {
		if c.trying {
			c.hold = min(2*c.hold, MaxHold)
		}
		c.set(now, min(2*c.p, c.max), false)
		return c.p
	}
	if c.trying && now.Sub(c.since) >= Confirm {
		c.trying = false
		c.hold = MinHold
	}
	c.samples[c.n%Window] = used
	c.n++
	if saturated || c.p == 1 || c.n < Window || now.Sub(c.since) < c.hold {
		return c.p
	}
	var sum float64
	for _, u := range c.samples {
		sum += u
	}
	avg := sum / Window
	if avg >= Room*float64(c.p) {
		return c.p
	}
	want := int(math.Ceil(avg * Headroom))
	c.set(now, min(max(want, 1), c.p-1), true)
	return c.p
}

// SetMax changes the ceiling to ceiling (at least 1), as when the CPUs the
// process may use change, and returns the Ps to run: fewer at once if they
// were more than the new ceiling.
func (c *Controller) SetMax(now time.Time, ceiling int) int {
	c.max = max(ceiling, 1)
	if c.p > c.max {
		c.set(now, c.max, false)
	}
	return c.p
}

// set moves to p Ps at now.
func (c *Controller) set(now time.Time, p int, trying bool) {
	c.p, c.since, c.trying, c.n, c.hot = p, now, trying, 0, 0
}
