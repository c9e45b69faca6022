package fastclock

import (
	"math"
	"math/bits"
	"os"
	"runtime"
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

// procPin keeps the calling goroutine on its P (the scheduler's processor)
// and returns the P's id, until procUnpin: nothing else runs on that P
// meanwhile, so data kept per P needs no lock. sync.Pool is built on it; the
// runtime keeps it linkname-able (go.dev/issue/67401).
//
//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()

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

	// cacheMargin is what the cached mode adds to the measured ns per tick,
	// so that a reading is reused only while the µs it fell in has surely
	// not ended: twice NTP's slewing of the monotonic clock.
	cacheMargin = 2 * maxSlew
)

// A source is what a clock reads time from.
type source uint8

const (
	// monotonicOnly: nanotime on every call.
	monotonicOnly source = iota
	// counterCache: nanotime, read at most once a µs per P: a reading is
	// reused while the counter shows that its µs has not ended (cached
	// mode). For an invariant TSC the kernel does not keep time with.
	counterCache
	// counterClock: the TSC itself, anchored to nanotime (TSC mode).
	counterClock
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
	// tickNs is, in cached mode, the most ns a counter tick may take (the
	// measured rate plus cacheMargin); 0 in the other modes.
	tickNs float64
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

	src   source
	slots []slot // cached mode: the reading each P reuses, by P id

	off    int64         // wall-clock ns since the epoch minus nanotime, fixed at start
	period time.Duration // reanchorPeriod
	minCal time.Duration // minCalibration

	mu      sync.Mutex // serializes calibration and re-anchoring
	calTick uint64     // the last calibration sample: the counter,
	calMono int64      // nanotime,
	calWin  uint64     // and the width of the window they were read in, in ticks
	rate    float64    // ns per tick measured at the last calibration
}

// A slot is the reading a P reuses in cached mode: us, the monotonic
// clock's µs, while the counter is in [start, end).
type slot struct {
	start, end atomic.Uint64
	us         atomic.Int64
	_          [40]byte // a cache line each: only its P writes it
}

var std clock

func init() {
	std.init(sourceOf(os.Getenv("SLUICE_FASTCLOCK")), reanchorPeriod, minCalibration)
}

// sourceOf returns the source this machine allows, given the environment
// variable SLUICE_FASTCLOCK (env).
func sourceOf(env string) source {
	if !tscArch || env == "monotonic" {
		return monotonicOnly
	}
	switch invariant, kernelClock := counterStatus(); {
	case kernelClock:
		return counterClock
	case invariant:
		return counterCache
	}
	return monotonicOnly
}

// init anchors c to the wall clock now, in monotonic mode. With a counter
// source it also takes the first calibration sample, and calibration is
// tried on the first call minCal or more after it.
func (c *clock) init(src source, period, minCal time.Duration) {
	n1 := nanotime()
	wall := time.Now().UnixNano()
	n2 := nanotime()
	c.off = wall - (n1 + (n2-n1)/2)
	c.period, c.minCal, c.src = period, minCal, src
	a := new(anchor)
	if src != monotonicOnly {
		c.calTick, c.calMono, c.calWin = sample()
		a.calibAt = c.calMono + int64(minCal)
	}
	if src == counterCache {
		// Ps are numbered below GOMAXPROCS, which follows the CPUs the
		// process may use; a P beyond (GOMAXPROCS raised later) reads
		// nanotime every time.
		c.slots = make([]slot, max(runtime.GOMAXPROCS(0), runtime.NumCPU()))
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
// time-stamp counter, "cached" when it reads the runtime's monotonic clock at
// most once a µs on each P (the counter telling when the µs ends), and
// "monotonic" when it reads the monotonic clock every time. A machine that
// can use the TSC starts in "monotonic" and switches to "tsc" (or "cached")
// at the first call to Micros once the counter's rate has been measured,
// about 20 ms after the package was initialized. It switches back, for good,
// only if the counter misbehaves.
func Mode() string { return std.cur.Load().mode() }

func (a *anchor) mode() string {
	switch {
	case a.tsc:
		return "tsc"
	case a.tickNs > 0:
		return "cached"
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

// slow is now for the monotonic and cached modes, and for TSC mode once the
// anchor's span has passed.
func (c *clock) slow(a *anchor) int64 {
	if !a.tsc {
		if a.tickNs > 0 {
			if v, ok := c.reuse(); ok {
				return v
			}
			return c.fill(a)
		}
		return c.monotonic(a, nanotime())
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

// monotonic is the time at nanotime n in the monotonic and cached modes,
// and the point where they calibrate when a's time for it has come.
func (c *clock) monotonic(a *anchor, n int64) int64 {
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

// reuse returns, in cached mode, the reading of the caller's P if the
// counter shows that its µs has not ended.
func (c *clock) reuse() (int64, bool) {
	p := procPin()
	if p < len(c.slots) {
		s := &c.slots[p]
		t := rdtsc()
		if st := s.start.Load(); t-st < s.end.Load()-st {
			v := s.us.Load()
			procUnpin()
			return v, true
		}
	}
	procUnpin()
	return 0, false
}

// fill reads the time in cached mode and leaves the reading for the
// caller's P to reuse. The reading is not held while nanotime runs, so no
// other goroutine waits on the P; it is stored for whichever P the caller is
// on by then, which is as good: the monotonic clock is the same on every P.
func (c *clock) fill(a *anchor) int64 {
	// t0 needs no fence: read early it only shortens the window, and
	// nanotime's own fence keeps it before nanotime's read. t1 must come
	// after that read.
	t0 := rdtsc()
	n := nanotime()
	t1 := rdtscOrdered()
	v := c.monotonic(a, n)
	if ns := c.off + n; v == ns/1000 { // not held at a floor
		if start, end, ok := window(t0, t1, ns, a.tickNs); ok {
			p := procPin()
			if p < len(c.slots) {
				s := &c.slots[p]
				s.start.Store(start)
				s.end.Store(end)
				s.us.Store(v)
			}
			procUnpin()
		}
	}
	return v
}

// window returns the counter values [start, end) over which the µs of ns
// (since the epoch), read by nanotime between the counter readings t0 and
// t1, is the monotonic clock's µs: from t1, when ns had surely been read,
// until t0 plus the µs's remaining ns at tickNs, the most a tick may take,
// when it has surely not ended. So a reading is never reused after its µs
// (which would put the clock behind) nor before nanotime returned it (which
// would put it ahead). ok is false when no counter value qualifies.
func window(t0, t1 uint64, ns int64, tickNs float64) (start, end uint64, ok bool) {
	left := 1000 - ns%1000
	end = t0 + uint64(float64(left)/tickNs)
	return t1, end, end > t1 && t1 >= t0
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
// since the first sample, and switches c to TSC mode (or cached mode) if the
// measurement is good to maxCalibrationError. In cached mode it is called
// again every period, to measure the rate anew: a rate that changed by more
// than maxRateChange ends cached mode for good. c.mu is held and a is
// current.
func (c *clock) calibrate(a *anchor) {
	t, n, win := sample()
	dt, dn := t-c.calTick, n-c.calMono
	if int64(dt) <= 0 || dn <= 0 {
		c.cur.Store(&anchor{floor: a.floor}) // the counter does not advance
		return
	}
	if a.tickNs > 0 {
		r := float64(dn) / float64(dt)
		if math.Abs(r/c.rate-1) > maxRateChange {
			c.cur.Store(&anchor{floor: a.floor})
			return
		}
		c.cur.Store(&anchor{floor: a.floor, tickNs: r * (1 + cacheMargin), calibAt: n + int64(c.period)})
		c.calTick, c.calMono, c.calWin, c.rate = t, n, win, r
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
	if c.src == counterCache {
		c.cur.Store(&anchor{floor: a.floor, tickNs: r * (1 + cacheMargin), calibAt: n + int64(c.period)})
	} else {
		c.cur.Store(newTSCAnchor(t, max(c.off+n, a.floor*1000), r, c.period))
	}
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
