package console

import (
	"testing"
	"time"
)

// The gate, on a clock the test moves: one run at a time, and each after a
// rest as long as the run before took, up to maxRest; a run turned away
// never waits.
func TestGate(t *testing.T) {
	now := t0
	var slept []time.Duration
	g := newGate()
	g.now = func() time.Time { return now }
	g.sleep = func(d time.Duration) { slept = append(slept, d); now = now.Add(d) }

	for i, step := range []struct {
		idle, took, wantSleep time.Duration
	}{
		{0, 80 * time.Millisecond, 0},                                 // the first run: no rest before it
		{0, 10 * time.Millisecond, 80 * time.Millisecond},             // at once after: rests as long as the first took
		{4 * time.Millisecond, 3 * time.Second, 6 * time.Millisecond}, // 4ms after: the rest's remainder
		{0, time.Millisecond, maxRest},                                // after a long run: maxRest
		{5 * time.Millisecond, time.Millisecond, 0},                   // after its rest: at once
	} {
		now = now.Add(step.idle)
		slept = nil
		leave, ok := g.enter()
		if !ok {
			t.Fatalf("run %d: turned away from a free gate", i)
		}
		if got := sum(slept); got != step.wantSleep {
			t.Errorf("run %d: rested %v, want %v", i, got, step.wantSleep)
		}
		rested := len(slept)
		if _, ok := g.enter(); ok || len(slept) != rested {
			t.Fatalf("run %d: a second run let in (%v), or made to wait (%v)", i, ok, slept[rested:])
		}
		now = now.Add(step.took)
		leave()
	}
}

func sum(ds []time.Duration) (s time.Duration) {
	for _, d := range ds {
		s += d
	}
	return s
}
