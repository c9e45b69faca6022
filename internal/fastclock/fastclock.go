package fastclock

import (
	"math"
	"math/bits"
	"os"
	"sync"
	"sync/atomic"
	"time"
	_ "unsafe" // for go:linkname
)

// nanotime is the runtime's monotonic clock, the one behind time.Since and
// the monotonic reading in time.Time: ns since an arbitrary start, slewed by
// NTP but never stepped. The runtime keeps it linkname-able on purpose
// (go.dev/issue/67401). It is a little cheaper than time.Since on a
// monotonic base (see BenchmarkNanotime and BenchmarkTimeSince).
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

const (
	// reanchorPeriod is how long, in counter ticks, an anchor serves the
	// hot path before the next call re-anchors to nanotime.
	reanchorPeriod = time.Second

	// minCalibration is the least nanotime baseline the TSC rate is
	// measured over before TSC mode starts.
	minCalibration = 20 * time.Millisecond

	// maxCalibrationError bounds the rate error the sampling windows at the
	// two ends of the baseline can cause (their widths over its length).
	// While it is exceeded calibration waits, doubling the baseline.
	maxCalibrationError = 10e-6

	// maxCalibrationWait is how long calibration keeps trying before it
	// settles for monotonic mode.
	maxCalibrationWait = 10 * time.Second

	// maxSlew is the most the rate is lowered to work off a lead over
	// nanotime (NTP's own limit on slewing, 500 ppm).
	maxSlew = 500e-6

	// maxRateChange is the change in the measured rate between two anchors
	// that is taken as a TSC fault (NTP slews by at most 500 ppm): the clock
	// then falls back to monotonic mode for good.
	maxRateChange = 0.01

	// Plausible ns per tick: a 20 GHz to a 100 MHz counter.
	minNsPerTick, maxNsPerTick = 0.05, 10
)

// anchor maps counter ticks to time. It is immutable once published; the hot
// path reads one with a single atomic load.
type anchor struct {
	// Read by the hot path (the first cache line).
	tsc   bool   // TSC mode; otherwise monotonic mode
	tick  uint64 // the counter at the anchor
	soft  uint64 // ticks after tick the hot path may use this anchor for
	mult  uint64 // µs per tick, scaled by 2^shift
	frac  uint64 // the anchor time's fraction of a µs, scaled by 2^shift
	us    int64  // the anchor time in whole µs since the epoch
	shift uint   // below 63

	// Read by the slow path only.
	ns        int64   // the anchor time in ns since the epoch
	nsPerTick float64 // the slope of the hot-path formula, mult*1000/2^shift
	floor     int64   // monotonic mode: the least value to return (µs)
	calibAt   int64   // monotonic mode: nanotime to try TSC calibration at; 0 never
}

// at is the hot-path formula: the time, in µs since the epoch, d ticks after
// the anchor. It does not overflow for d < 2*soft (see newTSCAnchor).
func (a *anchor) at(d uint64) int64 {
	return a.us + int64((a.frac+d*a.mult)>>(a.shift&63))
}

// newTSCAnchor returns the TSC-mode anchor that puts time ns (since the
// epoch) at counter value tick and advances nsPerTick per tick, for period.
//
// The multiplier is µs per tick in fixed point, with the largest shift for
// which frac + d*mult fits in 64 bits for every d below twice the span the
// hot path uses it for (soft ticks): a 1 s span leaves a 41-bit shift, so the
// rounding of mult is well below one part per billion.
func newTSCAnchor(tick uint64, ns int64, nsPerTick float64, period time.Duration) *anchor {
	soft := max(uint64(float64(period)/nsPerTick), 1)
	a := &anchor{tsc: true, tick: tick, soft: soft}
	for shift := uint(62); shift > 0; shift-- {
		mult := uint64(math.Round(math.Ldexp(nsPerTick/1000, int(shift))))
		hi, lo := bits.Mul64(2*soft, mult)
		if _, carry := bits.Add64(lo, 1<<shift, 0); hi == 0 && carry == 0 {
			a.mult, a.shift = mult, shift
			break
		}
	}
	us, rem := ns/1000, ns%1000
	if rem < 0 {
		us, rem = us-1, rem+1000
	}
	a.us, a.ns = us, ns
	a.frac = uint64(rem) << a.shift / 1000
	a.nsPerTick = math.Ldexp(float64(a.mult)*1000, -int(a.shift))
	return a
}

// clock is the state behind Micros. Tests make their own, with other
// periods or with TSC mode off.
type clock struct {
	cur atomic.Pointer[anchor]

	off    int64         // wall-clock ns since the epoch minus nanotime, fixed at start
	period time.Duration // reanchorPeriod
	minCal time.Duration // minCalibration

	mu      sync.Mutex // serializes calibration and re-anchoring
	calTick uint64     // the last calibration sample: the counter,
	calMono int64      // nanotime,
	calWin  uint64     // and the width of the window they were read in, in ticks
	rate    float64    // ns per tick measured at the last calibration
}

var std clock

func init() {
	useTSC := tscArch && os.Getenv("SLUICE_FASTCLOCK") != "monotonic" && tscTrusted()
	std.init(useTSC, reanchorPeriod, minCalibration)
}

// init anchors c to the wall clock now, in monotonic mode. With useTSC it
// also takes the first calibration sample, and calibration is tried on the
// first call minCal or more after it.
func (c *clock) init(useTSC bool, period, minCal time.Duration) {
	n1 := nanotime()
	wall := time.Now().UnixNano()
	n2 := nanotime()
	c.off = wall - (n1 + (n2-n1)/2)
	c.period, c.minCal = period, minCal
	a := new(anchor)
	if useTSC {
		c.calTick, c.calMono, c.calWin = sample()
		a.calibAt = c.calMono + int64(minCal)
	}
	c.cur.Store(a)
}

// Micros returns the current time in microseconds since the Unix epoch.
//
// It is the wall clock (time.Now) as read when the package was initialized,
// advanced since by the monotonic clock: it never goes backwards and does not
// follow steps of the wall clock (settimeofday, NTP steps), so over a long
// run it may drift from time.Now by as much as such steps add up to. On a CPU
// with an invariant TSC it reads the counter instead of asking the kernel
// (see the package documentation); the result then tracks the monotonic
// clock to within a few µs.
//
// Micros is safe for concurrent use and does not allocate. Successive calls in
// one goroutine return non-decreasing values; calls in different goroutines
// are ordered as closely as the CPUs' counters are synchronized.
func Micros() int64 { return std.now() }

// Mode reports how Micros currently reads time: "tsc" when it reads the CPU's
// time-stamp counter, "monotonic" when it reads the runtime's monotonic clock.
// A machine that can use the TSC starts in "monotonic" and switches to "tsc"
// at the first call to Micros once the counter's rate has been measured,
// about 20 ms after the package was initialized. It switches back, for good,
// only if the counter misbehaves.
func Mode() string {
	if std.cur.Load().tsc {
		return "tsc"
	}
	return "monotonic"
}

// now is Micros for c. The hot path: one atomic load, a test of the mode,
// RDTSC, a subtraction, a bounds check, a multiply, a shift and an add. The
// anchor is loaded before the counter is read, so the counter is normally at
// or after the anchor's; when RDTSC runs early it is just before, and the
// bounds check sends it to the slow path.
func (c *clock) now() int64 {
	a := c.cur.Load()
	if a.tsc {
		if d := rdtsc() - a.tick; d < a.soft {
			return a.us + int64((a.frac+d*a.mult)>>(a.shift&63))
		}
	}
	return c.slow(a)
}

// slow is now for monotonic mode, and for TSC mode once the anchor's span
// has passed.
func (c *clock) slow(a *anchor) int64 {
	if !a.tsc {
		n := nanotime()
		v := (c.off + n) / 1000
		if v < a.floor {
			v = a.floor
		}
		if a.calibAt != 0 && n >= a.calibAt && c.mu.TryLock() {
			if c.cur.Load() == a {
				c.calibrate(a)
			}
			c.mu.Unlock()
		}
		return v
	}
	d := rdtsc() - a.tick
	if d < a.soft {
		return a.at(d)
	}
	if int64(d) < 0 && uint64(-int64(d)) < a.soft {
		// The counter was read just before the anchor's: RDTSC ran ahead of
		// the load of a freshly published anchor, or this CPU's counter
		// lags a little.
		return a.us
	}
	c.mu.Lock()
	if c.cur.Load() == a {
		c.reanchor(a)
	}
	c.mu.Unlock()
	return c.now()
}

// sample reads the counter and nanotime together, a few times, and returns
// the pair read in the narrowest window: the counter just before nanotime,
// and the window's width in ticks. nanotime's instant lies within the window,
// so putting it at the window's start makes TSC time lead by at most the
// width, never lag.
func sample() (tick uint64, mono int64, win uint64) {
	for i := range 6 {
		t1 := rdtscOrdered()
		n := nanotime()
		t2 := rdtscOrdered()
		if i == 0 || t2-t1 < win {
			tick, mono, win = t1, n, t2-t1
		}
	}
	return tick, mono, win
}

// calibrate measures the counter's rate against nanotime, over the baseline
// since the first sample, and switches c to TSC mode if the measurement is
// good to maxCalibrationError. c.mu is held and a is current.
func (c *clock) calibrate(a *anchor) {
	t, n, win := sample()
	dt, dn := t-c.calTick, n-c.calMono
	if int64(dt) <= 0 || dn <= 0 {
		c.cur.Store(&anchor{floor: a.floor}) // the counter does not advance
		return
	}
	if float64(win)+float64(c.calWin) > maxCalibrationError*float64(dt) {
		if dn > int64(maxCalibrationWait) {
			c.cur.Store(&anchor{floor: a.floor})
		} else {
			c.cur.Store(&anchor{floor: a.floor, calibAt: n + dn})
		}
		return
	}
	r := float64(dn) / float64(dt)
	if r < minNsPerTick || r > maxNsPerTick {
		c.cur.Store(&anchor{floor: a.floor})
		return
	}
	c.cur.Store(newTSCAnchor(t, max(c.off+n, a.floor*1000), r, c.period))
	c.calTick, c.calMono, c.calWin, c.rate = t, n, win, r
}

// reanchor replaces a, whose span has passed, with an anchor at the counter
// now, re-measuring the rate over the span. c.mu is held and a is current.
//
// The new anchor starts at nanotime's time unless a had got ahead of it; then
// it starts where a got to, so that the output never goes back, and runs slow
// (by at most maxSlew) to work the lead off over the coming span. If the
// counter misbehaves the clock falls back to monotonic mode, holding at what
// it last returned until nanotime catches up.
func (c *clock) reanchor(a *anchor) {
	t, n, win := sample()
	d := t - a.tick
	// The most a's users can have been given, and where a got to in ns: the
	// hot path uses a for d < a.soft only.
	last := a.at(min(d, a.soft-1))
	if int64(d) < 0 {
		c.cur.Store(&anchor{floor: last}) // the counter went back
		return
	}
	reached := a.ns + int64(float64(min(d, a.soft))*a.nsPerTick)

	r := c.rate
	dt, dn := t-c.calTick, n-c.calMono
	if int64(dt) <= 0 || dn <= 0 {
		c.cur.Store(&anchor{floor: last})
		return
	}
	if dn >= int64(c.minCal) {
		r = float64(dn) / float64(dt)
		if math.Abs(r/c.rate-1) > maxRateChange {
			c.cur.Store(&anchor{floor: last})
			return
		}
		c.calTick, c.calMono, c.calWin, c.rate = t, n, win, r
	}

	ns, slope := c.off+n, r
	if reached > ns {
		lead := float64(reached-ns) / float64(c.period)
		ns, slope = reached, r*(1-min(lead, maxSlew))
	}
	c.cur.Store(newTSCAnchor(t, max(ns, last*1000), slope, c.period))
}
