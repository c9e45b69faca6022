package procs

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

// feed steps c once per Interval from *now with used, n times, and returns
// the Ps after the last step.
func feed(c *Controller, now *time.Time, used float64, n int) int {
	p := c.Procs()
	for range n {
		*now = now.Add(Interval)
		p = c.Step(*now, used)
	}
	return p
}

func TestStartsAtCeiling(t *testing.T) {
	for _, c := range []struct{ ceiling, want int }{{8, 8}, {1, 1}, {0, 1}, {-3, 1}} {
		if got := New(c.ceiling, t0); got.Procs() != c.want || got.Max() != c.want {
			t.Errorf("New(%d): Procs %d, Max %d; want %d", c.ceiling, got.Procs(), got.Max(), c.want)
		}
	}
}

// An idle process keeps its Ps for the hold, then tries the fewest its
// load needs: one.
func TestIdleGoesToOne(t *testing.T) {
	now := t0
	c := New(8, now)
	steps := int(MinHold/Interval) - 1
	if p := feed(c, &now, 0.01, steps); p != 8 {
		t.Fatalf("after %v idle: %d Ps, want 8 until the hold has passed", MinHold-Interval, p)
	}
	if p := feed(c, &now, 0.01, 1); p != 1 {
		t.Fatalf("after %v idle: %d Ps, want 1", MinHold, p)
	}
	if p := feed(c, &now, 0.5, 100); p != 1 {
		t.Fatalf("half a core busy on 1 P: %d Ps, want 1", p)
	}
}

// A try keeps a little more than the average load needs, and never the
// Ps it had.
func TestTryKeepsHeadroom(t *testing.T) {
	for _, c := range []struct {
		ceiling int
		used    float64
		want    int
	}{
		{8, 3, 4},      // ceil(3 × 1.25)
		{8, 6.3, 7},    // ceil(7.9), under 0.8 × 8
		{8, 6.39, 7},   // ceil(7.99)
		{2, 1.1, 1},    // ceil(1.375) = 2 is not fewer: one fewer
		{16, 0.2, 1},   // ceil(0.25)
		{16, 12.7, 15}, // ceil(15.9)
	} {
		now := t0
		ctl := New(c.ceiling, now)
		if p := feed(ctl, &now, c.used, int(MinHold/Interval)); p != c.want {
			t.Errorf("ceiling %d, %.2f cores used for the hold: %d Ps, want %d", c.ceiling, c.used, p, c.want)
		}
	}
}

// Ps busy at or above Room stay as they are.
func TestNoTryWithoutRoom(t *testing.T) {
	for _, used := range []float64{1.6, 1.75, 1.85} {
		now := t0
		c := New(2, now)
		if p := feed(c, &now, used, 1000); p != 2 {
			t.Errorf("%.2f of 2 cores used: %d Ps, want 2", used, p)
		}
	}
}

// Sustain saturating samples in a row double the Ps, up to the ceiling;
// fewer, or samples just under saturation, do not.
func TestSaturationDoubles(t *testing.T) {
	now := t0
	c := New(8, now)
	feed(c, &now, 0, int(MinHold/Interval))
	if c.Procs() != 1 {
		t.Fatalf("idle: %d Ps, want 1", c.Procs())
	}
	for _, want := range []int{2, 4, 8, 8} {
		if p := feed(c, &now, Saturated*float64(c.Procs()), Sustain-1); p != want/2 && want != 8 {
			t.Fatalf("%d saturated samples: %d Ps, want still %d", Sustain-1, p, want/2)
		}
		if p := feed(c, &now, Saturated*float64(c.Procs()), 1); p != want {
			t.Fatalf("saturated: %d Ps, want %d", p, want)
		}
	}
	// Saturated samples with one under them between are not in a row.
	now = t0
	c = New(4, now)
	feed(c, &now, 0, int(MinHold/Interval))
	for range 50 {
		feed(c, &now, 1, Sustain-1)
		feed(c, &now, 0.5, 1)
	}
	if c.Procs() != 1 {
		t.Fatalf("saturated samples, never %d in a row: %d Ps, want 1", Sustain, c.Procs())
	}
	// Just under saturation is not.
	if p := feed(c, &now, math.Nextafter(Saturated, 0), 50); p != 1 {
		t.Fatalf("just under saturation: %d Ps, want 1", p)
	}
}

// A try that saturates within Confirm is undone at once and doubles the
// hold before the next, up to MaxHold; one that stands resets it.
func TestFailedTryBacksOff(t *testing.T) {
	now := t0
	c := New(2, now)
	if p := feed(c, &now, 1.0, int(MinHold/Interval)); p != 1 {
		t.Fatalf("1 core of 2 for the hold: %d Ps, want a try at 1", p)
	}
	hold := MinHold
	for i := range 12 {
		if p := feed(c, &now, 1.0, Sustain); p != 2 {
			t.Fatalf("try %d saturated: %d Ps, want 2 again", i, p)
		}
		hold = min(2*hold, MaxHold)
		if c.Hold() != hold {
			t.Fatalf("after failed try %d: hold %v, want %v", i, c.Hold(), hold)
		}
		steps := int(hold / Interval)
		if p := feed(c, &now, 1.2, steps-1); p != 2 {
			t.Fatalf("within the hold %v: %d Ps, want 2", hold, p)
		}
		if p := feed(c, &now, 1.2, 1); p != 1 {
			t.Fatalf("after the hold %v: %d Ps, want a try at 1", hold, p)
		}
	}
	if c.Hold() != MaxHold {
		t.Fatalf("hold %v after many failed tries, want MaxHold %v", c.Hold(), MaxHold)
	}
	// This try stands: the hold is back to MinHold, and a later
	// saturation (not within Confirm) leaves it there.
	feed(c, &now, 0.7, int(Confirm/Interval))
	if c.Procs() != 1 || c.Hold() != MinHold {
		t.Fatalf("a try that stood: %d Ps, hold %v; want 1 and %v", c.Procs(), c.Hold(), MinHold)
	}
	feed(c, &now, 1.0, Sustain)
	if c.Procs() != 2 || c.Hold() != MinHold {
		t.Fatalf("saturated later: %d Ps, hold %v; want 2 and %v", c.Procs(), c.Hold(), MinHold)
	}
}

// A sample that is no number of cores (a clock that went back, an
// overflow) counts as saturated: the safe side.
func TestBadSamples(t *testing.T) {
	for _, used := range []float64{math.NaN(), -1, math.Inf(1), math.Inf(-1)} {
		now := t0
		c := New(4, now)
		feed(c, &now, 0, int(MinHold/Interval))
		if p := feed(c, &now, used, Sustain); p != 2 {
			t.Errorf("%d samples %v on 1 P: %d Ps, want 2", Sustain, used, p)
		}
	}
}

// On random loads the Controller keeps its bounds: Ps within [1, ceiling],
// never fewer right after a saturating sample, never lowered within the
// hold of the last change, and never lowered while the last Window samples
// averaged Room or more.
func TestRandomLoads(t *testing.T) {
	r := rand.New(rand.NewPCG(testenv.Seed(t), 1))
	for trace := range 200 {
		ceiling := 1 + r.IntN(16)
		now := t0
		c := New(ceiling, now)
		changed := now
		var window []float64
		load := r.Float64() * float64(ceiling)
		for step := range 2000 {
			if r.IntN(50) == 0 {
				load = r.Float64() * float64(ceiling) * 1.1
			}
			used := min(load*(0.9+0.2*r.Float64()), float64(c.Procs())*1.05)
			before := c.Procs()
			now = now.Add(Interval)
			p := c.Step(now, used)
			if p < 1 || p > ceiling {
				t.Fatalf("trace %d step %d: %d Ps, want 1 to %d", trace, step, p, ceiling)
			}
			if used >= Saturated*float64(before) && p < before {
				t.Fatalf("trace %d step %d: saturated (%.2f of %d) and lowered to %d", trace, step, used, before, p)
			}
			window = append(window, used)
			if p < before {
				if now.Sub(changed) < MinHold {
					t.Fatalf("trace %d step %d: lowered %v after the last change", trace, step, now.Sub(changed))
				}
				var sum float64
				for _, u := range window[len(window)-Window:] {
					sum += u
				}
				if sum/Window >= Room*float64(before) {
					t.Fatalf("trace %d step %d: lowered from %d at an average of %.2f", trace, step, before, sum/Window)
				}
			}
			if p != before {
				changed, window = now, nil
			}
		}
	}
}

// SetMax follows the CPUs the process may use: fewer Ps at once when the
// ceiling drops under them, and room to grow when it rises.
func TestSetMax(t *testing.T) {
	now := t0
	c := New(8, now)
	if p := c.SetMax(now, 2); p != 2 || c.Max() != 2 {
		t.Fatalf("SetMax 2 from 8 Ps: %d Ps, ceiling %d; want 2 and 2", p, c.Max())
	}
	if p := c.SetMax(now, 0); p != 1 || c.Max() != 1 {
		t.Fatalf("SetMax 0: %d Ps, ceiling %d; want 1 and 1", p, c.Max())
	}
	if p := c.SetMax(now, 16); p != 1 || c.Max() != 16 {
		t.Fatalf("SetMax 16 from 1 P: %d Ps, ceiling %d; want 1 and 16", p, c.Max())
	}
	if p := feed(c, &now, 1, Sustain); p != 2 {
		t.Fatalf("saturated under the new ceiling: %d Ps, want 2", p)
	}
}
