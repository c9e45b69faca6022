package sim

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
)

// defaultConfig is the configuration `sluice sim` runs with no flags.
func defaultConfig() Config {
	return Config{
		Limit:  sluice.Limit{Rate: 10, Period: time.Second, Burst: 4},
		Tick:   100 * time.Millisecond,
		Ticks:  30,
		Start:  DefaultStart,
		Source: DefaultSource,
	}
}

func runDefault(t *testing.T) *Result {
	t.Helper()
	cfg := defaultConfig()
	res, err := Run(cfg, Spread(DefaultArrivals(cfg.Ticks), cfg.Start, cfg.Tick, "sim"))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// ticks builds a 30-tick row: the values given from tick 4 on, then fill
// repeated to the end (the pattern of fill, cycled).
func ticks(from []int64, fill ...int64) []int64 {
	row := make([]int64, 4, 30)
	row = append(row, from...)
	for i := 0; len(row) < 30; i++ {
		row = append(row, fill[i%len(fill)])
	}
	return row
}

func row(t *testing.T, res *Result, k algo.Kind) Row {
	t.Helper()
	for _, r := range res.Rows {
		if r.Kind() == k {
			return r
		}
	}
	t.Fatalf("no row for %s", k)
	return Row{}
}

func checkRow(t *testing.T, name string, got, want []int64) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n got %v\nwant %v", name, got, want)
	}
}

// TestDefaultScenario checks the default scenario tick by tick against
// numbers worked out by hand from SEMANTICS.md. The limit is 10/1s, so
// T = 100ms = one tick; burst 4; the windows hold 4 per 400ms. Ticks 0–3 are
// quiet; tick 4 has 8 arrivals at 400, 412.5, ..., 487.5ms; every later tick k
// has 2, at k·100 and k·100 + 50ms. Tick 0 is a whole number of hours since the
// epoch, so the sliding window's epoch windows start at ticks 0, 4, 8, ...
func TestDefaultScenario(t *testing.T) {
	res := runDefault(t)
	if res.Start != DefaultStart || len(res.Arrivals) != 30 || res.Requests != 58 || res.Omitted != 0 || res.Keys != 1 || res.Units {
		t.Fatalf("result: start %d, %d ticks, %d requests, %d omitted, %d keys, units %v",
			res.Start, len(res.Arrivals), res.Requests, res.Omitted, res.Keys, res.Units)
	}
	checkRow(t, "arrivals", res.Arrivals, ticks([]int64{8}, 2))
	if res.Config.Window != 400*time.Millisecond || res.WindowRate != 4 {
		t.Errorf("windows: %d per %v, want 4 per 400ms", res.WindowRate, res.Config.Window)
	}
	kinds := make([]algo.Kind, len(res.Rows))
	for i, r := range res.Rows {
		kinds[i] = r.Kind()
	}
	if !slices.Equal(kinds, algo.Kinds()) {
		t.Fatalf("rows %v, want %v", kinds, algo.Kinds())
	}

	// Token bucket: full (4) at 400ms, so the first 4 of the burst pass; the
	// bucket then holds 0.375 at 437.5ms, 0.875 by 487.5ms: the other 4 are
	// denied. From then on it holds exactly 1 at k·100ms (admitted, back to
	// 0) and 0.5 at k·100 + 50ms (denied): one a tick, the rate.
	// GCRA gives the same decisions.
	for _, k := range []algo.Kind{algo.TokenBucket, algo.GCRA} {
		r := row(t, res, k)
		checkRow(t, k.String()+" admitted", r.Admitted, ticks([]int64{4}, 1))
		checkRow(t, k.String()+" denied", r.Denied, ticks([]int64{4}, 1))
		checkRow(t, k.String()+" delayed", r.Delayed, make([]int64, 30))
		if want := (Totals{Admitted: 29, Denied: 29}); r.Totals != want {
			t.Errorf("%s totals %+v, want %+v", k, r.Totals, want)
		}
	}

	// Leaky bucket, Q = 4: at 400ms the queue is empty, so the first leaves
	// at once; the next four leave at 500, 600, 700 and 800ms (their last
	// unit's wait 87.5, 175, 262.5 and 350ms ≤ Q·T = 400ms), and the last
	// three would wait more than 400ms: denied. At each later k·100ms the
	// queue empties at (k+4)·100ms: the wait is exactly Q·T, admitted, leaving
	// 4 ticks later; the one at k·100 + 50ms would wait 450ms: denied. So
	// exactly one leaves per tick from tick 4 on, all but the first delayed,
	// and the arrivals of ticks 26–29 leave after tick 29.
	lb := row(t, res, algo.LeakyBucket)
	checkRow(t, "leaky-bucket admitted", lb.Admitted, ticks([]int64{1}, 0))
	checkRow(t, "leaky-bucket delayed", lb.Delayed, ticks([]int64{0}, 1))
	checkRow(t, "leaky-bucket denied", lb.Denied, ticks([]int64{3}, 1))
	if want := (Totals{Admitted: 30, Delayed: 29, Denied: 28, Later: 4, MaxDelay: 400_000}); lb.Totals != want {
		t.Errorf("leaky-bucket totals %+v, want %+v", lb.Totals, want)
	}

	// Fixed window, 4 per 400ms: the burst opens [400, 800ms) and fills it
	// with its first 4; everything is refused until 800ms, which opens
	// [800, 1200ms): its first 4 arrivals (ticks 8 and 9) pass, ticks 10 and
	// 11 are refused, and so on: 2, 2, 0, 0 every 4 ticks.
	fw := row(t, res, algo.FixedWindow)
	checkRow(t, "fixed-window admitted", fw.Admitted, ticks([]int64{4, 0, 0, 0}, 2, 2, 0, 0))
	checkRow(t, "fixed-window denied", fw.Denied, ticks([]int64{4, 2, 2, 2}, 0, 0, 2, 2))
	if want := (Totals{Admitted: 28, Denied: 30}); fw.Totals != want {
		t.Errorf("fixed-window totals %+v, want %+v", fw.Totals, want)
	}

	// Sliding log, 4 in any trailing 400ms: the burst's first 4 (400 to
	// 437.5ms) fill the log until they age out at 800 to 837.5ms; then the
	// arrivals of ticks 8 and 9 pass and fill it until 1200ms: the same
	// 2, 2, 0, 0 as the fixed window on this trace.
	sl := row(t, res, algo.SlidingLog)
	checkRow(t, "sliding-log admitted", sl.Admitted, fw.Admitted)
	checkRow(t, "sliding-log denied", sl.Denied, fw.Denied)

	// Sliding window, 4 per 400ms over epoch windows [4j, 4j+4) ticks: the
	// burst puts 4 in window 1. In window 2 (prev = 4) an arrival at offset x
	// passes when 4·(400−x)/400 + cur + 1 ≤ 4: at x = 100, 200, 300ms, three
	// of them (ticks 9, 10, 11). From then on prev = 3: one passes at x = 0,
	// then x ≥ 133⅓ (150ms), then x ≥ 266⅔ (300ms): ticks 1, 1, 0, 1 of each
	// window. It settles at rate − 1 per window under this overload.
	sw := row(t, res, algo.SlidingWindow)
	checkRow(t, "sliding-window admitted", sw.Admitted, ticks([]int64{4, 0, 0, 0, 0, 1, 1, 1}, 1, 1, 0, 1))
	if want := (Totals{Admitted: 21, Denied: 37}); sw.Totals != want {
		t.Errorf("sliding-window totals %+v, want %+v", sw.Totals, want)
	}

	// Every arrival is admitted or denied exactly once.
	for _, r := range res.Rows {
		if r.Totals.Admitted+r.Totals.Denied+r.Totals.Errors != 58 {
			t.Errorf("%s: totals %+v do not add up to the 58 arrivals", r.Kind(), r.Totals)
		}
	}
}

func TestSpread(t *testing.T) {
	got := Spread([]int{0, 3, 1}, 1000, 90*time.Microsecond, "k")
	want := []Arrival{{T: 1090, Key: "k", Cost: 1}, {T: 1120, Key: "k", Cost: 1}, {T: 1150, Key: "k", Cost: 1}, {T: 1180, Key: "k", Cost: 1}}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if c := DefaultArrivals(7); !slices.Equal(c, []int{0, 0, 0, 0, 8, 2, 2}) {
		t.Errorf("DefaultArrivals(7) = %v", c)
	}
}

func TestSetups(t *testing.T) {
	cfg := defaultConfig()
	setups, wrate, err := Setups(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := map[algo.Kind]algo.Params{
		algo.TokenBucket:   {Kind: algo.TokenBucket, Rate: 10, Period: 1e6, Burst: 4},
		algo.GCRA:          {Kind: algo.GCRA, Rate: 10, Period: 1e6, Burst: 4},
		algo.LeakyBucket:   {Kind: algo.LeakyBucket, Rate: 10, Period: 1e6, Burst: 4},
		algo.FixedWindow:   {Kind: algo.FixedWindow, Rate: 4, Period: 4e5},
		algo.AlignedWindow: {Kind: algo.AlignedWindow, Rate: 4, Period: 4e5},
		algo.SlidingWindow: {Kind: algo.SlidingWindow, Rate: 4, Period: 4e5},
		algo.SlidingLog:    {Kind: algo.SlidingLog, Rate: 4, Period: 4e5},
	}
	if wrate != 4 || len(setups) != 7 {
		t.Fatalf("window rate %d, %d setups", wrate, len(setups))
	}
	for _, s := range setups {
		if s.Params != want[s.Kind()] {
			t.Errorf("%s: %+v, want %+v", s.Kind(), s.Params, want[s.Kind()])
		}
		if s.About == "" {
			t.Errorf("%s: no description", s.Kind())
		}
	}
	if !strings.Contains(setups[0].About, "bucket of 4") || !strings.Contains(setups[0].About, "100ms") {
		t.Errorf("token-bucket about: %q", setups[0].About)
	}

	// A window given explicitly holds the limit's rate over it.
	cfg.Window = 2 * time.Second
	if _, wrate, err := Setups(cfg); err != nil || wrate != 20 {
		t.Errorf("2s window: %d, %v; want 20", wrate, err)
	}

	bad := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"window not whole units", func(c *Config) { c.Window = 150 * time.Millisecond }, "holds 1.500 units"},
		{"window not whole µs", func(c *Config) { c.Window = 1500 * time.Nanosecond }, "whole number of microseconds"},
		{"default window not whole µs", func(c *Config) { c.Limit.Rate = 3 }, "give a window"},
		{"burst 0", func(c *Config) { c.Limit.Burst = 0 }, "at least 1"},
		{"rate 0", func(c *Config) { c.Limit.Rate = 0 }, "rate must be positive"},
	}
	for _, tc := range bad {
		c := defaultConfig()
		tc.edit(&c)
		if _, _, err := Setups(c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

func TestRunTrace(t *testing.T) {
	cfg := defaultConfig()
	cfg.Ticks, cfg.Start = 0, 0 // fit the trace, from its first arrival
	t0 := int64(1_000_000)
	arr := []Arrival{
		{T: t0, Key: "a", Cost: 1}, {T: t0, Key: "a", Cost: 1}, {T: t0, Key: "a", Cost: 3}, // tick 0
		{T: t0 + 50_000, Key: "b", Cost: 1},  // tick 0, another key
		{T: t0 + 250_000, Key: "a", Cost: 9}, // tick 2: over every capacity
		{T: t0 + 300_000, Key: "a", Cost: 1}, // tick 3
	}
	res, err := Run(cfg, arr)
	if err != nil {
		t.Fatal(err)
	}
	// The leaky bucket's last admission (a at 300ms, queue empty at 500ms)
	// leaves in tick 5: the ticks stretch to show it.
	if res.Config.Ticks != 6 || res.Span != 4 || res.Start != t0 || res.Keys != 2 || !res.Units || res.Requests != 6 {
		t.Fatalf("ticks %d, span %d, start %d, keys %d, units %v, requests %d",
			res.Config.Ticks, res.Span, res.Start, res.Keys, res.Units, res.Requests)
	}
	checkRow(t, "arrivals", res.Arrivals, []int64{6, 0, 9, 1, 0, 0})
	tb := row(t, res, algo.TokenBucket)
	// a: 1 + 1 pass (2 left), 3 is denied; b passes on its own key; a's 1 at
	// 300ms passes.
	checkRow(t, "token-bucket admitted", tb.Admitted, []int64{3, 0, 0, 1, 0, 0})
	checkRow(t, "token-bucket denied", tb.Denied, []int64{3, 0, 0, 0, 0, 0})
	checkRow(t, "token-bucket errors", tb.Errors, []int64{0, 0, 9, 0, 0, 0})
	lb := row(t, res, algo.LeakyBucket)
	// a: leaves at 0, 100ms, and the 3 (last unit waits 400ms = Q·T) from
	// 200ms; the 1 at 300ms waits until 500ms. b leaves at once.
	checkRow(t, "leaky-bucket admitted", lb.Admitted, []int64{2, 0, 0, 0, 0, 0})
	checkRow(t, "leaky-bucket delayed", lb.Delayed, []int64{0, 1, 3, 0, 0, 1})
	if lb.Totals.MaxDelay != 200_000 || lb.Totals.Errors != 9 || lb.Totals.Later != 0 {
		t.Errorf("leaky-bucket totals %+v", lb.Totals)
	}

	// Fewer ticks than the trace spans: later arrivals are not simulated.
	cfg.Ticks = 2
	res, err = Run(cfg, arr)
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 4 || res.Omitted != 2 || len(res.Arrivals) != 2 {
		t.Errorf("2 ticks: %d requests, %d omitted, %d ticks", res.Requests, res.Omitted, len(res.Arrivals))
	}
	if lb := row(t, res, algo.LeakyBucket); lb.Totals.Later != 3 || !slices.Equal(lb.Delayed, []int64{0, 1}) {
		t.Errorf("2 ticks: leaky-bucket %v %+v", lb.Delayed, lb.Totals)
	}
	cfg.Ticks = 1
	res, err = Run(cfg, arr)
	if err != nil {
		t.Fatal(err)
	}
	if lb := row(t, res, algo.LeakyBucket); lb.Totals.Later != 4 {
		t.Errorf("1 tick: leaky-bucket %+v, want 4 leaving later", lb.Totals)
	}
}

func TestRunErrors(t *testing.T) {
	ok := []Arrival{{T: 1000, Key: "k", Cost: 1}}
	bad := []struct {
		name string
		cfg  func(*Config)
		arr  []Arrival
		want string
	}{
		{"no arrivals", nil, nil, "no arrivals"},
		{"tick 0", func(c *Config) { c.Tick = 0 }, ok, "tick"},
		{"too many ticks", func(c *Config) { c.Ticks = MaxTicks + 1 }, ok, "ticks"},
		{"empty key", nil, []Arrival{{T: 1000, Key: "", Cost: 1}}, "empty key"},
		{"negative cost", nil, []Arrival{{T: 1000, Key: "k", Cost: -1}}, "negative"},
		{"bad time", nil, []Arrival{{T: -5, Key: "k", Cost: 1}}, "outside"},
		{"a charge", nil, []Arrival{{T: 1000, Key: "k", Cost: 1, Charge: true}}, "walk a charge step by step"},
		{"before start", func(c *Config) { c.Start = 5000 }, ok, "before the start"},
	}
	for _, tc := range bad {
		cfg := defaultConfig()
		if tc.cfg != nil {
			tc.cfg(&cfg)
		}
		if _, err := Run(cfg, tc.arr); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

// TestAutoTicksCap: a trace longer than MaxAutoTicks shows MaxAutoTicks.
func TestAutoTicksCap(t *testing.T) {
	cfg := defaultConfig()
	cfg.Ticks, cfg.Start = 0, 0
	arr := Spread(DefaultArrivals(50), 0, cfg.Tick, "k")
	res, err := Run(cfg, arr)
	if err != nil {
		t.Fatal(err)
	}
	// The arrivals start at tick 4 of the scenario: 46 ticks, of which the
	// first 30 hold 8 + 29·2 arrivals, leaving 16·2.
	if res.Config.Ticks != MaxAutoTicks || res.Span != 46 || res.Requests != 66 || res.Omitted != 32 {
		t.Errorf("ticks %d, span %d, omitted %d", res.Config.Ticks, res.Span, res.Omitted)
	}
}
