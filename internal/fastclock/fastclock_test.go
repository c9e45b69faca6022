package fastclock

import (
	"math"
	"math/bits"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// expected is the source this machine gives the package's clock.
func expected() source { return sourceOf(os.Getenv("SLUICE_FASTCLOCK")) }

// tscExpected reports whether this machine should end up in TSC mode.
func tscExpected() bool { return expected() == counterClock }

func newTestClock(src source, period, minCal time.Duration) *clock {
	c := new(clock)
	c.init(src, period, minCal)
	return c
}

func (c *clock) mode() string { return c.cur.Load().mode() }

// settled is the mode a clock of source src ends up in.
func settled(src source) string {
	switch src {
	case counterClock:
		return "tsc"
	case counterCache:
		return "cached"
	}
	return "monotonic"
}

// settle calls c.now until c is in the mode its source leads to, if c
// should get there (it was made with the counter allowed, on a machine
// whose counter can serve), failing the test if it does not within two
// seconds.
func settle(tb testing.TB, c *clock, counter bool) {
	tb.Helper()
	want := settled(c.src)
	if !counter || want == "monotonic" {
		return
	}
	deadline := time.Now().Add(2 * time.Second)
	for c.mode() != want {
		if time.Now().After(deadline) {
			tb.Fatalf("still in %s mode 2s after start, want %s", c.mode(), want)
		}
		c.now()
		time.Sleep(100 * time.Microsecond)
	}
}

// nearNow fails unless m is within tol µs of the wall clock read around it.
func nearNow(t *testing.T, what string, read func() int64, tol int64) int64 {
	t.Helper()
	before := time.Now().UnixMicro()
	m := read()
	after := time.Now().UnixMicro()
	if m < before-tol || m > after+tol {
		t.Errorf("%s: Micros = %d, time.Now = [%d, %d]: off by more than %d µs", what, m, before, after, tol)
	}
	return m
}

func TestMicrosNearWallClockAtStart(t *testing.T) {
	// The package's own clock, probably still before calibration, and a
	// fresh one.
	nearNow(t, "package clock", Micros, 2000)
	c := newTestClock(expected(), reanchorPeriod, minCalibration)
	nearNow(t, "fresh clock", c.now, 2000)
	t.Logf("mode %s, %s expected", Mode(), settled(expected()))
}

func TestMicrosTracksWallClock(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    *clock
		tsc  bool
	}{
		{"package", &std, true},
		{"reanchor-every-5ms", newTestClock(expected(), 5*time.Millisecond, 2*time.Millisecond), true},
		{"monotonic", newTestClock(monotonicOnly, reanchorPeriod, minCalibration), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			var worst int64
			start := time.Now()
			prev := c.now()
			for i := 0; time.Since(start) < 200*time.Millisecond; i++ {
				if i%2 == 0 {
					// Busy: call back to back for 5 ms.
					for end := time.Now().Add(5 * time.Millisecond); time.Now().Before(end); {
						m := c.now()
						if m < prev {
							t.Fatalf("went back from %d to %d", prev, m)
						}
						prev = m
					}
				} else {
					time.Sleep(3 * time.Millisecond)
				}
				before := time.Now().UnixMicro()
				m := c.now()
				after := time.Now().UnixMicro()
				if m < prev {
					t.Fatalf("went back from %d to %d", prev, m)
				}
				prev = m
				off := max(before-m, m-after, 0)
				worst = max(worst, off)
				if off > 2000 {
					t.Fatalf("after %v: Micros = %d, time.Now = [%d, %d]", time.Since(start), m, before, after)
				}
			}
			t.Logf("mode %s; worst distance from time.Now over 200 ms: %d µs", c.mode(), worst)
			if want := settled(c.src); tc.tsc && c.mode() != want {
				t.Errorf("mode %s after 200 ms, want %s", c.mode(), want)
			}
		})
	}
}

func TestModeSwitchesToTSC(t *testing.T) {
	settle(t, &std, true)
	t.Logf("Mode() = %q (%s expected)", Mode(), settled(expected()))
	if want := settled(expected()); Mode() != want {
		t.Errorf("Mode() = %q, want %q", Mode(), want)
	}
}

func TestMonotonic(t *testing.T) {
	settle(t, &std, true)
	prev := Micros()
	for i := range 1_000_000 {
		m := Micros()
		if m < prev {
			t.Fatalf("call %d: went back from %d to %d", i, prev, m)
		}
		prev = m
	}
}

func TestConcurrent(t *testing.T) {
	// The package clock, and a clock that calibrates and re-anchors many
	// times while the goroutines run.
	for _, c := range []*clock{&std, newTestClock(expected(), time.Millisecond, time.Millisecond)} {
		var wg sync.WaitGroup
		end := time.Now().Add(100 * time.Millisecond)
		for g := range 4 * runtime.GOMAXPROCS(0) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				prev := c.now()
				for i := 0; ; i++ {
					m := c.now()
					if m < prev {
						t.Errorf("goroutine %d, call %d: went back from %d to %d", g, i, prev, m)
						return
					}
					prev = m
					if i%1024 == 0 {
						_ = c.mode()
						if time.Now().After(end) {
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		nearNow(t, "after concurrent use", c.now, 2000)
	}
}

func TestElapsedAgreesWithTimeSince(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    *clock
		tsc  bool
	}{
		{"package", &std, true},
		{"reanchor-every-10ms", newTestClock(expected(), 10*time.Millisecond, 5*time.Millisecond), true},
		{"monotonic", newTestClock(monotonicOnly, reanchorPeriod, minCalibration), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			settle(t, c, tc.tsc)
			t0 := time.Now()
			m0 := c.now()
			for time.Since(t0) < 300*time.Millisecond {
				for range 10000 {
					c.now()
				}
				time.Sleep(time.Millisecond)
			}
			m1 := c.now()
			el := time.Since(t0)
			got, want := m1-m0, el.Microseconds()
			diff := got - want
			tol := want/1000 + 200
			t.Logf("mode %s: Micros elapsed %d µs, time.Since %d µs, difference %d µs (%.1f ppm)",
				c.mode(), got, want, diff, float64(diff)/float64(want)*1e6)
			if (diff < -tol || diff > tol) && testenv.Timing(t, "elapsed agrees with time.Since (unbracketed reads)") {
				t.Errorf("Micros elapsed %d µs, time.Since %d µs: differ by more than %d µs", got, want, tol)
			}
		})
	}
}

func TestZeroAllocs(t *testing.T) {
	settle(t, &std, true)
	if n := testing.AllocsPerRun(10000, func() { Micros() }); n != 0 {
		t.Errorf("Micros allocates %v times per call", n)
	}
	c := newTestClock(monotonicOnly, reanchorPeriod, minCalibration)
	if n := testing.AllocsPerRun(10000, func() { c.now() }); n != 0 {
		t.Errorf("monotonic mode allocates %v times per call", n)
	}
}

func TestNewTSCAnchor(t *testing.T) {
	const ns = int64(1_750_000_000_123_456_789)
	for _, ghz := range []float64{0.1, 1, 2.1, 2.8953, 3.5, 5, 20} {
		for _, period := range []time.Duration{time.Millisecond, time.Second, 10 * time.Second} {
			nsPerTick := 1 / ghz
			a := newTSCAnchor(12345, ns, nsPerTick, period)
			if a.shift < 20 || a.shift >= 63 {
				t.Errorf("%v GHz, %v: shift %d", ghz, period, a.shift)
			}
			if rel := math.Abs(a.nsPerTick/nsPerTick - 1); rel > 1e-7 {
				t.Errorf("%v GHz, %v: multiplier off by %.2g", ghz, period, rel)
			}
			// No overflow below twice the span.
			hi, lo := bits.Mul64(2*a.soft, a.mult)
			if _, carry := bits.Add64(lo, a.frac, 0); hi != 0 || carry != 0 {
				t.Errorf("%v GHz, %v: frac + 2*soft*mult overflows", ghz, period)
			}
			if got := a.at(0); got != ns/1000 {
				t.Errorf("%v GHz, %v: at(0) = %d, want %d", ghz, period, got, ns/1000)
			}
			prev := a.at(0)
			for _, d := range []uint64{1, 1000, a.soft / 3, a.soft / 2, a.soft - 1, a.soft, 2*a.soft - 1} {
				got := a.at(d)
				want := float64(ns)/1000 + float64(d)*nsPerTick/1000
				if math.Abs(float64(got)-want) > 1 {
					t.Errorf("%v GHz, %v: at(%d) = %d, want %.1f", ghz, period, d, got, want)
				}
				if got < prev {
					t.Errorf("%v GHz, %v: at(%d) = %d < %d", ghz, period, d, got, prev)
				}
				prev = got
			}
			if span := float64(a.soft) * nsPerTick; math.Abs(span/float64(period)-1) > 1e-6 {
				t.Errorf("%v GHz, %v: span %v ns", ghz, period, span)
			}
		}
	}
}

// TestReanchorWorksOffLead puts a clock 300 µs ahead of the monotonic clock
// and checks that re-anchoring never steps it back but slews the lead away.
func TestReanchorWorksOffLead(t *testing.T) {
	if !tscExpected() {
		t.Skip("no trusted TSC")
	}
	const period = 20 * time.Millisecond
	c := newTestClock(counterClock, period, 5*time.Millisecond)
	settle(t, c, true)
	c.mu.Lock()
	a := c.cur.Load()
	tick, n, _ := sample()
	c.cur.Store(newTSCAnchor(tick, c.off+n+300_000, a.nsPerTick, period))
	c.mu.Unlock()

	lead := func() int64 { return c.now() - (c.off+nanotime())/1000 }
	if l := lead(); l < 290 || l > 310 {
		t.Fatalf("lead %d µs, want 300", l)
	}
	// 500 ppm of 20 ms is 10 µs a period: 30 periods, 600 ms.
	start := time.Now()
	prev := c.now()
	for time.Since(start) < 800*time.Millisecond {
		m := c.now()
		if m < prev {
			t.Fatalf("went back from %d to %d", prev, m)
		}
		prev = m
	}
	if l := lead(); l < -2 || l > 2 {
		t.Errorf("lead %d µs after 800 ms, want about 0", l)
	}
}

func TestFallbackHoldsFloor(t *testing.T) {
	c := newTestClock(monotonicOnly, reanchorPeriod, minCalibration)
	now := c.now()
	c.cur.Store(&anchor{floor: now + 5000})
	if got := c.now(); got != now+5000 {
		t.Errorf("now = %d, want the floor %d", got, now+5000)
	}
	time.Sleep(10 * time.Millisecond)
	if got := c.now(); got <= now+5000 {
		t.Errorf("now = %d, still at the floor after it passed", got)
	}
	if c.mode() != "monotonic" {
		t.Errorf("mode %s", c.mode())
	}
}

func TestMonotonicModeNeverCalibrates(t *testing.T) {
	c := newTestClock(monotonicOnly, time.Millisecond, time.Millisecond)
	for end := time.Now().Add(20 * time.Millisecond); time.Now().Before(end); {
		c.now()
	}
	if c.mode() != "monotonic" {
		t.Errorf("mode %s", c.mode())
	}
}

// TestTracksMonotonicClock follows a clock with the package's settings
// through calibration and a few re-anchors, checking that it stays within
// 5 µs of the monotonic clock it is built on.
func TestTracksMonotonicClock(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 2.5 s")
	}
	c := newTestClock(expected(), reanchorPeriod, minCalibration)
	const tol = 5000 // ns
	var worst, anchors int64
	var last *anchor
	start := time.Now()
	for time.Since(start) < 2500*time.Millisecond {
		// Read the clock between two nanotime readings, retrying while the
		// pair is too far apart to judge by (the goroutine was preempted).
		var lo, hi, m int64
		for range 10 {
			n1 := nanotime()
			m = c.now()
			n2 := nanotime()
			lo, hi = c.off+n1, c.off+n2
			if n2-n1 < 1000 {
				break
			}
		}
		// m is the floor of a ns time that should lie in [lo, hi].
		off := max(m*1000-hi, lo-(m*1000+999), 0)
		worst = max(worst, off)
		if off > tol {
			t.Errorf("after %v (%s mode): Micros %d µs, monotonic clock [%d, %d] ns", time.Since(start), c.mode(), m, lo, hi)
		}
		if a := c.cur.Load(); a != last {
			anchors++
			last = a
		}
		time.Sleep(100 * time.Microsecond)
	}
	t.Logf("mode %s, %d anchors, rate %.6f ticks/ns: worst distance from the monotonic clock %d ns", c.mode(), anchors, 1/c.rate, worst)
	if tscExpected() && anchors < 3 {
		t.Errorf("only %d anchors in 2.5 s", anchors)
	}
}
