// Package sim runs one trace of arrivals through each of sluice's algorithms
// and counts, tick by tick, what each admits, delays and denies; it renders the
// result as terminal rows (WriteText) or as an SVG figure (WriteSVG). It backs
// `sluice sim`.
//
// Everything here is a pure function of its inputs: decisions are made by a
// fresh memstore.Store at the arrivals' own times, never the wall clock.
package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cmd/sluice/internal/runat"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/store"
)

// MaxAutoTicks is the most ticks Run shows when Config.Ticks is 0.
const MaxAutoTicks = 30

// MaxTicks is the most ticks Run accepts.
const MaxTicks = 10000

// Arrival is one request of a trace: cost units for Key at time T (µs since
// the epoch), taken, or with Charge charged whatever the key has
// (sluice.Limiter.Charge). Run takes only takes; a walk (NewWalk) both.
type Arrival struct {
	T      int64
	Key    string
	Cost   int64
	Charge bool
}

// Config is what a simulation runs: one limit shaped by every algorithm, and
// the ticks its counts are bucketed into.
type Config struct {
	// Limit's Rate, Period and Burst apply to every algorithm; its Algorithm
	// is ignored. Burst is the bucket's capacity (token-bucket, gcra) and the
	// units that may wait (leaky-bucket).
	Limit sluice.Limit
	// Window is the windows' length (fixed-window, sliding-window,
	// sliding-log); they admit Limit's rate over it, Rate·Window/Period units.
	// Zero means Burst emission intervals (Burst·Period/Rate, at least one), so
	// that a window holds as many units as the bucket.
	Window time.Duration
	// Tick is the width of one column.
	Tick time.Duration
	// Ticks is the number of columns; 0 fits the arrivals, up to
	// MaxAutoTicks.
	Ticks int
	// Start is tick 0's start, µs since the epoch; 0 means the earliest
	// arrival's time. Arrivals before it are not simulated.
	Start int64
	// Source says where the arrivals come from, for the header ("4 quiet
	// ticks, then ...", "trace.jsonl").
	Source string
}

// Setup is one algorithm's configuration in a simulation.
type Setup struct {
	Params algo.Params
	// About describes the configuration in a few words: "bucket of 4,
	// refilled 1 per 100ms".
	About string
}

// Kind returns the setup's algorithm.
func (s Setup) Kind() algo.Kind { return s.Params.Kind }

// Totals sums a row over the simulated arrivals, in units.
type Totals struct {
	Admitted int64 // every admitted unit, delayed or not
	Delayed  int64 // the admitted units that waited (leaky-bucket)
	Denied   int64
	Errors   int64 // units of requests that could never pass (cost over capacity)
	Later    int64 // delayed units that leave after the last tick
	MaxDelay int64 // µs
}

// Row is what one algorithm did, per tick, in units.
type Row struct {
	Setup
	// Admitted counts the units that passed at once, in their arrival tick.
	Admitted []int64
	// Delayed counts the admitted units that waited, in the tick they leave
	// (arrival + delay).
	Delayed []int64
	// Denied counts the refused units, in their arrival tick.
	Denied []int64
	// Errors counts the units of requests that could never pass (a cost over
	// the algorithm's capacity: an error, not a denial), in their arrival tick.
	Errors []int64
	Totals Totals
}

// Result is a simulation's outcome.
type Result struct {
	// Config is the configuration run, with Window and Ticks resolved.
	Config Config
	// Start is tick 0's start, µs since the epoch.
	Start int64
	// Arrivals counts the units arriving in each tick.
	Arrivals []int64
	// Requests is the number of arrivals simulated (those in the ticks shown).
	Requests int
	// Omitted is the number of arrivals after the last tick, not simulated.
	Omitted int
	// Span is the number of ticks from the first arrival to the last.
	Span int
	// Keys is the number of distinct keys among the simulated arrivals.
	Keys int
	// Units reports whether some arrival's cost is not 1, so that counts are
	// units rather than requests.
	Units bool
	// WindowRate is the units each window admits over Config.Window.
	WindowRate int64
	// Rows holds one row per algorithm, in algo.Kinds order.
	Rows []Row
}

// DefaultArrivals is the default scenario over n ticks: 4 quiet ticks, a burst
// of 8 in one tick, then 2 per tick. Fewer than 5 ticks are cut from it.
func DefaultArrivals(n int) []int {
	c := make([]int, n)
	for i := range c {
		switch {
		case i < 4:
		case i == 4:
			c[i] = 8
		default:
			c[i] = 2
		}
	}
	return c
}

// DefaultSource describes DefaultArrivals for Config.Source.
const DefaultSource = "4 quiet ticks, a burst of 8 in one tick, then 2 per tick"

// DefaultStart is the default scenario's tick 0, µs since the epoch:
// 2025-11-24 16:00:00 UTC, a whole number of hours, so that the windows of
// sliding-window (aligned to the epoch) line up with the ticks.
const DefaultStart int64 = 1_764_000_000_000_000

// Spread turns per-tick counts into arrivals of cost 1 for key: the n arrivals
// of tick i come at start + i·tick + j·tick/n, j = 0..n−1, evenly spaced.
func Spread(counts []int, start int64, tick time.Duration, key string) []Arrival {
	us := tick.Microseconds()
	var out []Arrival
	for i, n := range counts {
		for j := range n {
			out = append(out, Arrival{T: start + int64(i)*us + int64(j)*us/int64(n), Key: key, Cost: 1})
		}
	}
	return out
}

// Setups returns the configuration of each algorithm under cfg, in algo.Kinds
// order, and the units each window admits.
func Setups(cfg Config) ([]Setup, int64, error) {
	l := cfg.Limit
	l.Debt = 0 // it matters only to charges, which Run does not take
	if l.Burst < 1 {
		return nil, 0, fmt.Errorf("burst %d: token-bucket and gcra need a burst of at least 1", l.Burst)
	}
	tb, err := storelink.Params(l.WithAlgorithm(sluice.TokenBucket))
	if err != nil {
		return nil, 0, err
	}
	window, wrate, err := windowOf(cfg)
	if err != nil {
		return nil, 0, err
	}
	t := interval(tb.Rate, tb.Period)
	ws := fmtDur(window.Microseconds())
	about := map[algo.Kind]string{
		algo.TokenBucket:   fmt.Sprintf("bucket of %d, refilled 1 per %s", l.Burst, t),
		algo.GCRA:          fmt.Sprintf("as token-bucket: bucket of %d, 1 per %s", l.Burst, t),
		algo.LeakyBucket:   fmt.Sprintf("queue: 1 leaves per %s, %d may wait", t, l.Burst),
		algo.FixedWindow:   fmt.Sprintf("%d per %s window, opened by its first request", wrate, ws),
		algo.AlignedWindow: fmt.Sprintf("%d per %s window, aligned to the epoch", wrate, ws),
		algo.SlidingWindow: fmt.Sprintf("~%d per %s, estimated from 2 fixed windows", wrate, ws),
		algo.SlidingLog:    fmt.Sprintf("%d in any trailing %s", wrate, ws),
	}
	var out []Setup
	for _, k := range algo.Kinds() {
		lk := l.WithAlgorithm(sluice.Algorithm(k))
		switch k {
		case algo.FixedWindow, algo.AlignedWindow, algo.SlidingWindow, algo.SlidingLog:
			lk.Rate, lk.Period, lk.Burst = wrate, window, 0
		}
		p, err := storelink.Params(lk)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", k, err)
		}
		out = append(out, Setup{Params: p, About: about[k]})
	}
	return out, wrate, nil
}

// windowOf resolves the windows' length and the units they admit.
func windowOf(cfg Config) (time.Duration, int64, error) {
	l := cfg.Limit
	rate, period := big.NewInt(l.Rate), big.NewInt(l.Period.Microseconds())
	if cfg.Window == 0 {
		b := big.NewInt(max(l.Burst, 1))
		w, m := new(big.Int).QuoRem(new(big.Int).Mul(b, period), rate, new(big.Int))
		if m.Sign() != 0 || !w.IsInt64() {
			return 0, 0, fmt.Errorf("the windows' default length, burst·period/rate = %d·%s/%d, is not a whole number of µs: give a window (sluice sim --window)", max(l.Burst, 1), l.Period, l.Rate)
		}
		return time.Duration(w.Int64()) * time.Microsecond, max(l.Burst, 1), nil
	}
	if cfg.Window < time.Microsecond || cfg.Window%time.Microsecond != 0 {
		return 0, 0, fmt.Errorf("window %v is not a whole number of microseconds (at least 1µs)", cfg.Window)
	}
	units := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(cfg.Window.Microseconds()), rate), period)
	if !units.IsInt() || !units.Num().IsInt64() || units.Num().Int64() < 1 {
		return 0, 0, fmt.Errorf("a window of %v at %d/%v holds %s units: pick one that holds a whole number, at least 1", cfg.Window, l.Rate, l.Period, units.FloatString(3))
	}
	n := units.Num()
	return cfg.Window, n.Int64(), nil
}

// interval formats the emission interval period/rate µs.
func interval(rate, period int64) string {
	if period%rate == 0 {
		return fmtDur(period / rate)
	}
	return "~" + fmtDur((period+rate/2)/rate)
}

// fmtDur formats µs as a short ASCII duration: 100ms, 1.5s, 250us.
func fmtDur(us int64) string {
	if us > math.MaxInt64/int64(time.Microsecond) {
		return fmt.Sprintf("%dus", us)
	}
	return strings.Replace(time.Duration(us*int64(time.Microsecond)).String(), "µs", "us", 1)
}

// Run runs arrivals through every algorithm of cfg, each with a key of its own
// in a fresh memory store (the arrival's key prefixed by the algorithm's name),
// deciding each arrival at its time in the order given. Ticks start at the
// Config.Start, or the earliest arrival; arrivals outside the ticks are not
// simulated.
func Run(cfg Config, arrivals []Arrival) (*Result, error) {
	if len(arrivals) == 0 {
		return nil, errors.New("no arrivals to simulate")
	}
	if cfg.Tick < time.Microsecond || cfg.Tick%time.Microsecond != 0 {
		return nil, fmt.Errorf("tick %v is not a whole number of microseconds (at least 1µs)", cfg.Tick)
	}
	if cfg.Ticks < 0 || cfg.Ticks > MaxTicks {
		return nil, fmt.Errorf("ticks %d is outside [0, %d]", cfg.Ticks, MaxTicks)
	}
	setups, wrate, err := Setups(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Window == 0 {
		cfg.Window, _, _ = windowOf(cfg)
	}
	tick := cfg.Tick.Microseconds()
	start, end := arrivals[0].T, arrivals[0].T
	for _, a := range arrivals {
		if err := algo.CheckTime(a.T); err != nil {
			return nil, err
		}
		if a.Key == "" {
			return nil, sluice.ErrEmptyKey
		}
		if a.Cost < 0 {
			return nil, fmt.Errorf("%w: %d is negative", sluice.ErrInvalidCost, a.Cost)
		}
		if a.Charge {
			return nil, fmt.Errorf("a charge (of %d units at %dµs): the simulation shows what each algorithm admits of takes; walk a charge step by step (sluice sim --steps, the console's Step through)", a.Cost, a.T)
		}
		start, end = min(start, a.T), max(end, a.T)
	}
	if cfg.Start != 0 {
		if err := algo.CheckTime(cfg.Start); err != nil {
			return nil, fmt.Errorf("start: %w", err)
		}
		start = cfg.Start
	}
	if end < start {
		return nil, errors.New("every arrival is before the start")
	}
	span := int(min((end-start)/tick, MaxTicks)) + 1
	if cfg.Ticks == 0 {
		// Fit the arrivals, and the delayed units leaving after them if
		// they fit too.
		cfg.Ticks = MaxAutoTicks
		if span < MaxAutoTicks {
			res := run(cfg, setups, wrate, arrivals, start, span)
			cfg.Ticks = span
			for _, r := range res.Rows {
				for i, n := range r.Delayed {
					if n > 0 {
						cfg.Ticks = max(cfg.Ticks, i+1)
					}
				}
			}
		}
	}
	return run(cfg, setups, wrate, arrivals, start, span), nil
}

func run(cfg Config, setups []Setup, wrate int64, arrivals []Arrival, start int64, span int) *Result {
	n, tick := cfg.Ticks, cfg.Tick.Microseconds()
	at := func(t int64) int { // the tick of time t, or n when outside the ticks
		if i := (t - start) / tick; t >= start && i < int64(n) {
			return int(i)
		}
		return n
	}
	res := &Result{Config: cfg, Start: start, Arrivals: make([]int64, n), Span: span, WindowRate: wrate}
	keys := map[string]bool{}
	for _, a := range arrivals {
		i := at(a.T)
		if i == n {
			res.Omitted++
			continue
		}
		res.Requests++
		res.Arrivals[i] += a.Cost
		keys[a.Key] = true
		if a.Cost != 1 {
			res.Units = true
		}
	}
	res.Keys = len(keys)
	st := runat.Memory(memstore.WithShards(1))
	for _, s := range setups {
		row := Row{Setup: s, Admitted: make([]int64, n), Delayed: make([]int64, n), Denied: make([]int64, n), Errors: make([]int64, n)}
		tot := &row.Totals
		prefix := s.Kind().String() + "/"
		for _, a := range arrivals {
			i := at(a.T)
			if i == n {
				continue
			}
			if storelink.Check(a.Key, &s.Params, a.Cost) != nil {
				row.Errors[i] += a.Cost
				tot.Errors += a.Cost
				continue
			}
			// The times and costs were checked above, so Run cannot fail.
			d, _ := runat.Run(context.Background(), st, store.Op{Kind: store.Take, Key: prefix + a.Key, Limit: storelink.LimitOf(&s.Params), Cost: a.Cost, MaxDelay: store.Never}, a.T)
			switch {
			case !d.Allowed:
				row.Denied[i] += a.Cost
				tot.Denied += a.Cost
			case d.Delay == 0:
				row.Admitted[i] += a.Cost
				tot.Admitted += a.Cost
			default:
				tot.Admitted += a.Cost
				tot.Delayed += a.Cost
				tot.MaxDelay = max(tot.MaxDelay, d.Delay)
				if j := at(a.T + d.Delay); j < n {
					row.Delayed[j] += a.Cost
				} else {
					tot.Later += a.Cost
				}
			}
		}
		res.Rows = append(res.Rows, row)
	}
	return res
}
