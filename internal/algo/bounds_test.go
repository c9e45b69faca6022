package algo_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// admission is one admitted request: when it was decided, its cost and the
// delay it was given (leaky-bucket).
type admission struct{ t, cost, delay int64 }

// greedy runs one key through Step with a client that asks as hard as the
// limit lets it: requests at the same instant or a fraction of T apart, and,
// after a denial, usually exactly retry_after later (the earliest instant
// the limit promises). Now and then it pauses a few T, so a bucket refills
// and a queue drains. It returns the admissions.
func greedy(rng *rand.Rand, p algo.Params, n int, maxCost int64) []admission {
	var s algo.State
	t := max(1, p.Period/p.Rate)
	now := t0 + rng.Int64N(p.Period)
	retry := int64(0)
	var out []admission
	for range n {
		switch r := rng.IntN(100); {
		case r < 50 && retry > 0:
			now += retry
		case r < 65:
		case r < 95:
			now += rng.Int64N(t/2 + 2)
		default:
			now += rng.Int64N(4*t + 1)
		}
		cost := 1 + rng.Int64N(maxCost)
		d := algo.Step(&p, &s, now, cost, algo.Never)
		if d.Allowed {
			out = append(out, admission{now, cost, d.Delay})
			retry = 0
		} else {
			retry = d.RetryAfter
		}
	}
	return out
}

// spanMax is the most units in any closed span [a, a+d] over events at the
// given nondecreasing times with the given weights, and where such a span
// starts. A busiest span may be taken to start at an event.
func spanMax(times, units []int64, d int64) (most, at int64) {
	sum, j := int64(0), 0
	for i := range times {
		for j < len(times) && times[j] <= times[i]+d {
			sum += units[j]
			j++
		}
		if sum > most {
			most, at = sum, times[i]
		}
		sum -= units[i]
	}
	return most, at
}

// spans are the span lengths checked for a limit: around T and around the
// period, and a few more.
func spans(p algo.Params) []int64 {
	t := p.Period / p.Rate
	ds := []int64{0, 1, 2, p.Period - 1, p.Period, p.Period + 1, 2 * p.Period, 5*p.Period + 3}
	for _, k := range []int64{1, 2, 3, 10} {
		ds = append(ds, k*t-1, k*t, k*t+1, (k*p.Period+p.Rate-1)/p.Rate) // ⌈kT⌉
	}
	var out []int64
	for _, d := range ds {
		if d >= 0 {
			out = append(out, d)
		}
	}
	return out
}

func split(adm []admission, at func(admission) int64) (times, units []int64) {
	for _, a := range adm {
		times = append(times, at(a))
		units = append(units, a.cost)
	}
	return times, units
}

func decidedAt(a admission) int64 { return a.t }

// boundsRuns is how many random traces each bound is checked on.
func boundsRuns() (runs, length int) {
	if !testenv.Long() || raceEnabled {
		return 60, 400
	}
	return 300, 600
}

// TestBucketBurstBound: token-bucket and gcra admit at most burst + ⌊d/T⌋
// units in any span of length d.
func TestBucketBurstBound(t *testing.T) {
	runs, length := boundsRuns()
	for _, k := range []algo.Kind{algo.TokenBucket, algo.GCRA} {
		for _, seed := range seeds(t) {
			rng := rand.New(rand.NewPCG(seed, 17))
			for range runs {
				p := randomParams(rng, k)
				times, units := split(greedy(rng, p, length, 1+rng.Int64N(p.Burst)), decidedAt)
				for _, d := range spans(p) {
					// units ≤ burst + ⌊d/T⌋  ⇔  units ≤ burst + ⌊d·rate/period⌋
					bound := p.Burst + d*p.Rate/p.Period
					if most, at := spanMax(times, units, d); most > bound {
						t.Fatalf("seed %d: %v rate=%d period=%d burst=%d: %d units in [%d, %d+%d], bound %d",
							seed, k, p.Rate, p.Period, p.Burst, most, at-t0, at-t0, d, bound)
					}
				}
			}
		}
	}
}

// TestBucketBurstBoundIsReached: a client taking one unit as soon as it may
// gets exactly burst + ⌊d/T⌋ units into the span that starts with its burst.
func TestBucketBurstBoundIsReached(t *testing.T) {
	for _, k := range []algo.Kind{algo.TokenBucket, algo.GCRA} {
		for _, r := range rates {
			p := algo.Params{Kind: k, Rate: r.rate, Period: r.period, Burst: 4}
			var s algo.State
			now := t0
			var times []int64
			for len(times) < 200 {
				if d := algo.Step(&p, &s, now, 1, algo.Never); d.Allowed {
					times = append(times, now)
				} else {
					now += d.RetryAfter
				}
			}
			units := make([]int64, len(times))
			for i := range units {
				units[i] = 1
			}
			for _, d := range spans(p) {
				if d > times[len(times)-1]-t0 {
					continue
				}
				if most, _ := spanMax(times, units, d); most != p.Burst+d*p.Rate/p.Period {
					t.Errorf("%v %d/%dµs burst %d: %d units in a span of %dµs, want %d",
						k, p.Rate, p.Period, p.Burst, most, d, p.Burst+d*p.Rate/p.Period)
				}
			}
		}
	}
}

// TestLeakyBucketSpacing: admitted units proceed (at t + delay) in arrival
// order and spaced by T. The contract's bound, at most 1 + ⌊d/T⌋ departures in
// any span of length d, holds for the exact departure times; the reported
// delay is rounded up to a whole µs, so when T is not whole two proceed times
// can be ⌊T⌋ apart. What holds for them: k+1 departures span more than kT − 1,
// i.e. k·period < (d+1)·rate. For a whole T that is the contract's bound.
func TestLeakyBucketSpacing(t *testing.T) {
	runs, length := boundsRuns()
	for _, seed := range seeds(t) {
		rng := rand.New(rand.NewPCG(seed, 23))
		for range runs {
			p := randomParams(rng, algo.LeakyBucket)
			adm := greedy(rng, p, length, 1)
			times, units := split(adm, func(a admission) int64 { return a.t + a.delay })
			for i := 1; i < len(times); i++ {
				if times[i] < times[i-1] {
					t.Fatalf("seed %d: %d/%dµs Q=%d: admission %d proceeds at %d, before the one before it (%d)",
						seed, p.Rate, p.Period, p.Burst, i, times[i]-t0, times[i-1]-t0)
				}
			}
			for _, d := range spans(p) {
				most, at := spanMax(times, units, d)
				whole := p.Period%p.Rate == 0
				if k := most - 1; k*p.Period >= (d+1)*p.Rate || whole && most > 1+d*p.Rate/p.Period {
					t.Fatalf("seed %d: %d/%dµs Q=%d: %d departures in [%d, %d+%d]",
						seed, p.Rate, p.Period, p.Burst, most, at-t0, at-t0, d)
				}
			}
		}
	}
}

// TestLeakyBucketRoundedSpacing pins the rounding the spacing test allows
// for: at 3/s the third queued unit proceeds ⌈2T⌉ − ⌈T⌉ = 333333µs < T after
// the second.
func TestLeakyBucketRoundedSpacing(t *testing.T) {
	p := algo.Params{Kind: algo.LeakyBucket, Rate: 3, Period: 1_000_000, Burst: 2}
	var s algo.State
	var got []int64
	for range 3 {
		got = append(got, algo.Step(&p, &s, t0, 1, algo.Never).Delay)
	}
	if fmt.Sprint(got) != "[0 333334 666667]" {
		t.Fatalf("delays %v, want [0 333334 666667]", got)
	}
}

// TestWindowBounds: in any span of length period, fixed-window admits at most
// 2·rate (across a seam), sliding-window fewer than 2·rate, and sliding-log at
// most rate in any trailing period (t − W, t].
func TestWindowBounds(t *testing.T) {
	runs, length := boundsRuns()
	for _, k := range []algo.Kind{algo.FixedWindow, algo.SlidingWindow, algo.SlidingLog} {
		for _, seed := range seeds(t) {
			rng := rand.New(rand.NewPCG(seed, 29))
			for range runs {
				p := randomParams(rng, k)
				times, units := split(greedy(rng, p, length, 1+rng.Int64N(p.Rate)), decidedAt)
				var most, at, bound int64
				switch k {
				case algo.FixedWindow:
					most, at = spanMax(times, units, p.Period)
					bound = 2 * p.Rate
				case algo.SlidingWindow:
					most, at = spanMax(times, units, p.Period)
					bound = 2*p.Rate - 1
				case algo.SlidingLog:
					most, at = spanMax(times, units, p.Period-1) // (t − W, t] in whole µs
					bound = p.Rate
				}
				if most > bound {
					t.Fatalf("seed %d: %v rate=%d period=%d: %d units in the span from %d, bound %d",
						seed, k, p.Rate, p.Period, most, at-t0, bound)
				}
			}
		}
	}
}

// TestFixedWindowSeam: the fixed window's worst case is reached: rate units
// at the end of one window and rate more at the start of the next, period
// apart.
func TestFixedWindowSeam(t *testing.T) {
	p := algo.Params{Kind: algo.FixedWindow, Rate: 5, Period: 1_000_000}
	var s algo.State
	for i, now := range []int64{t0, t0 + p.Period} {
		if d := algo.Step(&p, &s, now, p.Rate, algo.Never); !d.Allowed {
			t.Fatalf("request %d denied: %+v", i, d)
		}
	}
}

// TestNoDrift: at 3/s (T = 333333⅓µs), a client that asks for one unit
// at a time and retries exactly at retry_after gets its i-th unit (from 1,
// after draining the bucket at t0) at exactly t0 + ⌈i·10⁶/3⌉, for a million
// units: the fractions of T add up and never drift. The leaky bucket's unit
// then proceeds at t0 + ⌈(i+1)·10⁶/3⌉, one T behind the queued unit.
//
// The bucket is left room for 2 units so that it never fills while the client
// waits; see TestBurstOneRoundsEachInterval for what a burst of 1 does.
func TestNoDrift(t *testing.T) {
	const n = 1_000_000
	at := func(p algo.Params, i int64) int64 { return t0 + (i*p.Period+p.Rate-1)/p.Rate }
	for _, p := range []algo.Params{
		{Kind: algo.TokenBucket, Rate: 3, Period: 1_000_000, Burst: 2},
		{Kind: algo.GCRA, Rate: 3, Period: 1_000_000, Burst: 2},
		{Kind: algo.LeakyBucket, Rate: 3, Period: 1_000_000, Burst: 1},
	} {
		var s algo.State
		now := t0
		if d := algo.Step(&p, &s, now, p.Capacity(), algo.Never); !d.Allowed {
			t.Fatalf("%v: draining the bucket: %+v", p.Kind, d)
		}
		for i := int64(1); i <= n; i++ {
			d := algo.Step(&p, &s, now, 1, algo.Never)
			if !d.Allowed {
				now += d.RetryAfter
				d = algo.Step(&p, &s, now, 1, algo.Never)
			}
			wantDelay := int64(0)
			if p.Kind == algo.LeakyBucket {
				wantDelay = at(p, i+1) - now
			}
			if !d.Allowed || now != at(p, i) || d.Delay != wantDelay {
				t.Fatalf("%v: unit %d at %d (%+v), want admitted at %d with delay %d",
					p.Kind, i, now-t0, d, at(p, i)-t0, wantDelay)
			}
		}
	}
}

// TestBurstOneRoundsEachInterval pins what the contract implies for a bucket
// of 1 (and a leaky bucket with no queue) on a clock of whole µs: the request
// that finds the bucket full arrives up to 1µs after it filled, and the refill
// in that µs overflows, so admissions are ⌈T⌉ apart, not T on average: at 3/s,
// 333334µs apart, about 2.999994 per second.
func TestBurstOneRoundsEachInterval(t *testing.T) {
	for _, p := range []algo.Params{
		{Kind: algo.TokenBucket, Rate: 3, Period: 1_000_000, Burst: 1},
		{Kind: algo.GCRA, Rate: 3, Period: 1_000_000, Burst: 1},
		{Kind: algo.LeakyBucket, Rate: 3, Period: 1_000_000, Burst: 0},
	} {
		var s algo.State
		now := t0
		for i := range int64(10) {
			d := algo.Step(&p, &s, now, 1, algo.Never)
			if !d.Allowed {
				now += d.RetryAfter
				d = algo.Step(&p, &s, now, 1, algo.Never)
			}
			if !d.Allowed || now != t0+i*333334 {
				t.Fatalf("%v: admission %d at %d (%+v), want at %d", p.Kind, i, now-t0, d, i*333334)
			}
		}
	}
}
