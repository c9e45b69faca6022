package algo_test

import (
	"math/rand/v2"
	"testing"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

const (
	base = int64(1_764_000_000_000_000) // µs, late 2025
	sec  = int64(1_000_000)
)

// row is one row of a step table: a request at base+at of cost units, and the
// decision expected.
type row struct {
	at, cost                       int64
	allowed                        bool
	remaining, retry, reset, delay int64
}

func run(t *testing.T, p algo.Params, steps []row) {
	t.Helper()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	var s algo.State
	for i, st := range steps {
		d := algo.Step(&p, &s, base+st.at, st.cost, algo.Never)
		got := row{st.at, st.cost, d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter, d.Delay}
		if got != st {
			t.Errorf("step %d: got  %+v\n                 want %+v", i, got, st)
		}
	}
}

// Capacity 5, refill 1/s: ten requests at once pass five, then one a second
// all pass.
func TestTokenBucketTenAtOnce(t *testing.T) {
	for _, k := range []algo.Kind{algo.TokenBucket, algo.GCRA} {
		t.Run(k.String(), func(t *testing.T) {
			p := algo.Params{Kind: k, Rate: 1, Period: sec, Burst: 5}
			steps := []row{}
			for i := int64(0); i < 5; i++ {
				steps = append(steps, row{0, 1, true, 4 - i, 0, (i + 1) * sec, 0})
			}
			for i := 0; i < 5; i++ {
				steps = append(steps, row{0, 1, false, 0, sec, 5 * sec, 0})
			}
			for i := int64(1); i <= 5; i++ {
				steps = append(steps, row{i * sec, 1, true, 0, 0, 5 * sec, 0})
			}
			run(t, p, steps)
		})
	}
}

func TestTokenBucketFractionalRefill(t *testing.T) {
	// 3/s: T = 333333⅓ µs. Burst 2.
	p := algo.Params{Kind: algo.TokenBucket, Rate: 3, Period: sec, Burst: 2}
	run(t, p, []row{
		{0, 2, true, 0, 0, 666667, 0},
		{0, 1, false, 0, 333334, 666667, 0},
		{333333, 1, false, 0, 1, 333334, 0}, // x = 0.999999: one µs short
		{333334, 1, true, 0, 0, 666666, 0},  // x = 1 + 2/3·10⁻⁶... spent
		{333334, 0, true, 0, 0, 666666, 0},  // a query changes nothing
		{2 * sec, 2, true, 0, 0, 666667, 0},
	})
}

func TestTokenBucketClockBack(t *testing.T) {
	p := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: sec, Burst: 2}
	run(t, p, []row{
		{10 * sec, 2, true, 0, 0, 2 * sec, 0},
		{5 * sec, 1, false, 0, sec, 2 * sec, 0},   // read at the stored time: no refill, no penalty
		{10*sec + sec, 1, true, 0, 0, 2 * sec, 0}, // one refilled, as if nothing happened
	})
}

// A changed limit keeps the level (the units spent), capped at the new
// capacity; a changed period rounds it up to whole units.
func TestTokenBucketChangedLimit(t *testing.T) {
	for _, k := range []algo.Kind{algo.TokenBucket, algo.GCRA} {
		var s algo.State
		a := algo.Params{Kind: k, Rate: 10, Period: sec, Burst: 10}
		for i := 0; i < 7; i++ {
			algo.Step(&a, &s, base, 1, algo.Never)
		}
		// A bigger burst and another period: the 7 spent stay spent.
		b := algo.Params{Kind: k, Rate: 100, Period: 60 * sec, Burst: 50}
		if d := algo.Step(&b, &s, base, 0, algo.Never); d.Remaining != 43 {
			t.Fatalf("%v after a changed limit: remaining %d, want 43", k, d.Remaining)
		}
		// A smaller burst is empty: a bucket is at most empty.
		c := algo.Params{Kind: k, Rate: 10, Period: sec, Burst: 2}
		if d := algo.Step(&c, &s, base, 0, algo.Never); d.Remaining != 0 || d.ResetAfter != 200_000 {
			t.Fatalf("%v after a smaller burst: %+v, want remaining 0, reset after 200ms", k, d)
		}
	}
}

// The cases of the issue that asked for "Changed limits": each algorithm
// reads another's state, or an older limit's, keeping what was spent.
func TestChangedLimitCases(t *testing.T) {
	tb := algo.Params{Kind: algo.TokenBucket, Rate: 10, Period: 3600 * sec, Burst: 10}
	gc := tb
	gc.Kind = algo.GCRA
	// Alternating token bucket and GCRA on one key: one budget.
	var s algo.State
	admitted := 0
	for i := 0; i < 100; i++ {
		p := &tb
		if i%2 == 1 {
			p = &gc
		}
		if algo.Step(p, &s, base, 1, algo.Never).Allowed {
			admitted++
		}
	}
	if admitted != 10 {
		t.Fatalf("alternating token-bucket and gcra admitted %d of 100, want 10", admitted)
	}
	// Burst 10 → 100 with 10 spent: 90 more, in both.
	for _, k := range []algo.Kind{algo.TokenBucket, algo.GCRA} {
		var s algo.State
		p := algo.Params{Kind: k, Rate: 1, Period: sec, Burst: 10}
		algo.Step(&p, &s, base, 10, algo.Never)
		p.Burst = 100
		if d := algo.Step(&p, &s, base, 0, algo.Never); d.Remaining != 90 {
			t.Fatalf("%v: burst 10 → 100 with 10 spent: remaining %d, want 90", k, d.Remaining)
		}
		// A higher rate refills what is left faster; both agree.
		q := algo.Params{Kind: k, Rate: 2, Period: sec, Burst: 10}
		var s2 algo.State
		p.Burst = 10
		algo.Step(&p, &s2, base, 10, algo.Never)
		if d := algo.Step(&q, &s2, base+5*sec, 0, algo.Never); d.Remaining != 5 {
			t.Fatalf("%v: rate 1/s → 2/s, 5s after 10 spent: remaining %d, want 5", k, d.Remaining)
		}
	}
	// A fixed window whose period shrinks from an hour to a second ends a
	// second after its start, not an hour after.
	fw := algo.Params{Kind: algo.FixedWindow, Rate: 1, Period: 3600 * sec}
	var w algo.State
	algo.Step(&fw, &w, base, 1, algo.Never)
	short := algo.Params{Kind: algo.FixedWindow, Rate: 1, Period: sec}
	if d := algo.Step(&short, &w, base+sec/2, 1, algo.Never); d.Allowed || d.RetryAfter != sec/2 {
		t.Fatalf("shrunk window: %+v, want a refusal retrying after 500ms", d)
	}
	if d := algo.Step(&short, &w, base+sec, 1, algo.Never); !d.Allowed {
		t.Fatalf("shrunk window: a second after its start: %+v, want a new window", d)
	}
	// A window, then a token bucket: the units spent in the window count.
	var x algo.State
	algo.Step(&fw, &x, base, 1, algo.Never)
	if d := algo.Step(&tb, &x, base, 0, algo.Never); d.Remaining != 9 {
		t.Fatalf("window read by a token bucket: remaining %d, want 9", d.Remaining)
	}
}

// A query of another algorithm changes nothing.
func TestQueryOfAnotherKindStoresNothing(t *testing.T) {
	var s algo.State
	a := algo.Params{Kind: algo.SlidingLog, Rate: 2, Period: sec}
	algo.Step(&a, &s, base, 1, algo.Never)
	before := s
	for _, k := range algo.Kinds() {
		p := algo.Params{Kind: k, Rate: 5, Period: 2 * sec, Burst: 5}
		algo.Step(&p, &s, base+10, 0, algo.Never)
	}
	if s.Kind != before.Kind || len(s.Log) != 1 || s.Log[0] != before.Log[0] {
		t.Fatalf("queries changed the state: %+v, was %+v", s, before)
	}
}

// Ten instant requests with Q = 4 give delays 0, T, 2T, 3T, 4T and five drops.
func TestLeakyBucketQueue(t *testing.T) {
	p := algo.Params{Kind: algo.LeakyBucket, Rate: 10, Period: sec, Burst: 4} // T = 100ms
	T := sec / 10
	steps := []row{}
	for i := int64(0); i < 5; i++ {
		steps = append(steps, row{0, 1, true, 4 - i, 0, (i + 1) * T, i * T})
	}
	for i := 0; i < 5; i++ {
		steps = append(steps, row{0, 1, false, 0, T, 5 * T, 0})
	}
	steps = append(steps,
		row{T, 1, true, 0, 0, 5 * T, 4 * T},      // one left: its turn comes after the four queued
		row{10 * T, 2, true, 3, 0, 2 * T, 0},     // drained: a cost of 2 leaves now and at T
		row{10 * T, 0, true, 3, 0, 2 * T, 2 * T}, // a query reports the queue's wait
	)
	run(t, p, steps)
}

func TestLeakyBucketNoQueue(t *testing.T) {
	// Q = 0: a meter at exactly one per T, nothing waits.
	p := algo.Params{Kind: algo.LeakyBucket, Rate: 3, Period: sec, Burst: 0}
	run(t, p, []row{
		{0, 1, true, 0, 0, 333334, 0},
		{1, 1, false, 0, 333333, 333333, 0},
		{333334, 1, true, 0, 0, 333334, 0}, // D was base+333333⅓: passes at 333334, D ← 666667⅓
	})
}

func TestLeakyBucketMaxDelay(t *testing.T) {
	p := algo.Params{Kind: algo.LeakyBucket, Rate: 10, Period: sec, Burst: 4}
	var s algo.State
	for i := 0; i < 3; i++ {
		algo.Step(&p, &s, base, 1, algo.Never)
	}
	before := s
	// The next turn is 300ms away: a caller who can wait 250ms is refused
	// without spending, and told waiting will not help.
	d := algo.Step(&p, &s, base, 1, 250_000)
	if d.Allowed || d.RetryAfter != algo.Never || s.A != before.A || s.B != before.B {
		t.Fatalf("got %+v, state %+v, before %+v", d, s, before)
	}
	if d := algo.Step(&p, &s, base, 1, 300_000); !d.Allowed || d.Delay != 300_000 {
		t.Fatalf("got %+v, want admitted with delay 300ms", d)
	}
}

func TestFixedWindow(t *testing.T) {
	p := algo.Params{Kind: algo.FixedWindow, Rate: 3, Period: sec}
	run(t, p, []row{
		{0, 0, true, 3, 0, 0, 0}, // a query opens no window
		{100, 2, true, 1, 0, sec, 0},
		{200, 2, false, 1, sec - 100, sec - 100, 0}, // denied requests do not count
		{300, 1, true, 0, 0, sec - 200, 0},
		{sec + 99, 1, false, 0, 1, 1, 0},
		{sec + 100, 3, true, 0, 0, sec, 0}, // a new window opens at the first request
		{2*sec + 99, 1, false, 0, 1, 1, 0},
	})
}

func TestSlidingWindow(t *testing.T) {
	// 4 per second over epoch-aligned windows; base is a whole second.
	p := algo.Params{Kind: algo.SlidingWindow, Rate: 4, Period: sec}
	q := sec / 4
	run(t, p, []row{
		{0, 4, true, 0, 0, 2 * sec, 0},
		// Same window: estimate 4. Next window at offset x: 4·(1−x)+0 ≤ 3
		// from x = 1/4.
		{q, 1, false, 0, sec - q + q, 2*sec - q, 0},
		// At 1.25s: prev 4 weighs 3, cur 0: one passes.
		{sec + q, 1, true, 0, 0, 2*sec - q, 0},
		// At 1.5s: prev weighs 2, cur 1: estimate 3, one passes.
		{sec + 2*q, 1, true, 0, 0, sec - 2*q + sec, 0},
		// At 1.5s again: estimate 4, cost 2 needs 4·(1−x)+2 ≤ 2 → x = 1 → the
		// next window, where prev = 2: 2·(1−x2) + 2 ≤ 4 → now.
		{sec + 2*q, 2, false, 0, sec - 2*q, sec - 2*q + sec, 0},
		{2 * sec, 2, true, 0, 0, 2 * sec, 0},
	})
}

func TestSlidingLog(t *testing.T) {
	p := algo.Params{Kind: algo.SlidingLog, Rate: 3, Period: sec}
	run(t, p, []row{
		{0, 1, true, 2, 0, sec, 0},
		{0, 1, true, 1, 0, sec, 0}, // the same µs: one entry of cost 2
		{500, 1, true, 0, 0, sec, 0},
		{600, 2, false, 0, sec - 600, sec - 100, 0}, // the entry of cost 2 at 0 must leave
		{600, 1, false, 0, sec - 600, sec - 100, 0},
		{sec, 1, true, 1, 0, sec, 0},                  // (t−W, t]: the entry at 0 has left
		{sec + 499, 2, false, 1, 1, 1 + sec - 500, 0}, // the entry at 500 must leave
	})
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		p  algo.Params
		ok bool
	}{
		{algo.Params{Kind: algo.TokenBucket, Rate: 10, Period: sec, Burst: 50}, true},
		{algo.Params{Kind: algo.TokenBucket, Rate: 0, Period: sec, Burst: 5}, false},
		{algo.Params{Kind: algo.TokenBucket, Rate: -1, Period: sec, Burst: 5}, false},
		{algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: 0, Burst: 5}, false},
		{algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: sec, Burst: 0}, false},
		{algo.Params{Kind: algo.LeakyBucket, Rate: 1, Period: sec, Burst: 0}, true},
		{algo.Params{Kind: algo.SlidingWindow, Rate: 1 << 40, Period: 1 << 20}, false}, // (rate+1)·period over 2^50
		{algo.Params{Kind: algo.SlidingLog, Rate: 1 << 40, Period: 1 << 20}, false},
		{algo.Params{Kind: algo.FixedWindow, Rate: 1 << 40, Period: 1 << 20}, true}, // a fixed window only counts
		{algo.Params{Kind: algo.AlignedWindow, Rate: 100000, Period: 86400 * sec}, true},
		{algo.Params{Kind: algo.AlignedWindow, Rate: 1 << 50, Period: 1 << 50}, true},
		{algo.Params{Kind: algo.AlignedWindow, Rate: 1<<50 + 1, Period: sec}, false},
		{algo.Params{Kind: algo.FixedWindow, Rate: 1, Period: 1<<50 + 1}, false},
		{algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: 1 << 30, Burst: 1 << 20}, false},
		{algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: 1 << 29, Burst: 1<<20 - 2}, true},
		{algo.Params{Kind: 0, Rate: 1, Period: sec}, false},
		{algo.Params{Kind: algo.SlidingLog, Rate: 1 << 62, Period: 1 << 62}, false},
	} {
		if err := c.p.Validate(); (err == nil) != c.ok {
			t.Errorf("%+v: Validate() = %v, want ok=%v", c.p, err, c.ok)
		}
	}
}

// A clock that steps back gives no refill and no penalty: gcra reads the state
// at the latest time it saw, as the token bucket does, so the two agree on
// traces whose time jumps back and forth.
func TestClockBackGCRAEqualsTokenBucket(t *testing.T) {
	r := rand.New(rand.NewPCG(testenv.SeedOr(t, 3), 4))
	for trace := 0; trace < 300; trace++ {
		rate, period, burst := 1+r.Int64N(20), 1+r.Int64N(2*sec), 1+r.Int64N(10)
		tb := algo.Params{Kind: algo.TokenBucket, Rate: rate, Period: period, Burst: burst}
		gc := algo.Params{Kind: algo.GCRA, Rate: rate, Period: period, Burst: burst}
		var st, sg algo.State
		now := base
		for i := 0; i < 100; i++ {
			now += r.Int64N(period) - period/2 // back as often as forward
			cost := r.Int64N(burst + 1)
			a := algo.Step(&tb, &st, now, cost, algo.Never)
			b := algo.Step(&gc, &sg, now, cost, algo.Never)
			if a != b {
				t.Fatalf("trace %d request %d (%d/%dµs burst %d, cost %d): token-bucket %+v, gcra %+v", trace, i, rate, period, burst, cost, a, b)
			}
		}
	}
}

func TestClockBackLeakyBucket(t *testing.T) {
	p := algo.Params{Kind: algo.LeakyBucket, Rate: 10, Period: sec, Burst: 2} // T = 100ms
	run(t, p, []row{
		{sec, 1, true, 2, 0, 100_000, 0},
		{sec, 1, true, 1, 0, 200_000, 100_000},
		// 400ms back: read at the latest time seen, as if no time had passed.
		{sec - 400_000, 1, true, 0, 0, 300_000, 200_000},
		{sec - 400_000, 1, false, 0, 100_000, 300_000, 0},
	})
}

// A sliding window keeps its counts under a changed rate; under a changed
// period, whose windows do not line up with the old ones, it carries the
// estimate, rounded up, into the current window.
func TestSlidingWindowChangedLimit(t *testing.T) {
	var s algo.State
	a := algo.Params{Kind: algo.SlidingWindow, Rate: 4, Period: sec}
	algo.Step(&a, &s, base, 4, algo.Never)
	b := algo.Params{Kind: algo.SlidingWindow, Rate: 8, Period: sec}
	if d := algo.Step(&b, &s, base, 0, algo.Never); d.Remaining != 4 {
		t.Fatalf("changed rate: remaining %d, want 4 (counts kept)", d.Remaining)
	}
	c := algo.Params{Kind: algo.SlidingWindow, Rate: 6, Period: 2 * sec}
	if d := algo.Step(&c, &s, base, 0, algo.Never); d.Remaining != 2 {
		t.Fatalf("changed period: remaining %d, want 2 (the 4 spent carried)", d.Remaining)
	}
}

// gcra and the leaky bucket keep their timestamps across a changed rate,
// rounded up to the next whole µs: never earlier.
func TestTimestampChangedRate(t *testing.T) {
	for _, k := range []algo.Kind{algo.GCRA, algo.LeakyBucket} {
		var s algo.State
		a := algo.Params{Kind: k, Rate: 3, Period: sec, Burst: 1}
		algo.Step(&a, &s, base, 1, algo.Never) // timestamp at base + 333333⅓ µs
		b := algo.Params{Kind: k, Rate: 7, Period: 7 * sec / 3, Burst: 1}
		d := algo.Step(&b, &s, base, 0, algo.Never)
		if d.ResetAfter != 333334 {
			t.Errorf("%s: reset after %dµs, want the old timestamp rounded up: 333334", k, d.ResetAfter)
		}
	}
}

// Refill: a bucket's capacity at one unit per Period/Rate, rounded up; a
// window's period.
func TestRefill(t *testing.T) {
	for _, c := range []struct {
		p    algo.Params
		want int64
	}{
		{algo.Params{Kind: algo.TokenBucket, Rate: 10, Period: sec, Burst: 50}, 5 * sec},
		{algo.Params{Kind: algo.GCRA, Rate: 3, Period: sec, Burst: 1}, 333_334},
		{algo.Params{Kind: algo.LeakyBucket, Rate: 20, Period: sec, Burst: 19}, sec},
		{algo.Params{Kind: algo.FixedWindow, Rate: 100_000, Period: 86_400 * sec}, 86_400 * sec},
		{algo.Params{Kind: algo.SlidingLog, Rate: 5, Period: 60 * sec}, 60 * sec},
	} {
		if got := c.p.Refill(); got != c.want {
			t.Errorf("%+v: Refill() = %d, want %d", c.p, got, c.want)
		}
	}
}
