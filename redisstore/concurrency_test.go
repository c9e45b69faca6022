package redisstore_test

// TestConcurrency hammers one real redis-server from several processes at
// once and checks that the Redis store never admits more than the algorithm's
// model allows for the server's clock.
//
// The parent starts a standalone redis-server and, for each algorithm in
// turn, re-executes this test binary loadProcs times (the children run
// TestLoadChild, selected by -test.run and marked by the loadChildEnv
// variable). Each child runs loadGoroutines goroutines that call Take on
// loadKeys keys in a loop. The children start together (each prints a ready
// line, the parent then writes the stop time to every child's stdin), stop
// together, and print what they saw as one JSON line: the units admitted and
// denied per key, the errors, and the server's TIME just before their first
// Take and just after their last one returned.
//
// Every admission happened at a server time in [tS, tE], tS the earliest
// child start and tE the latest child end (a Take's script runs after the
// child's TIME command was answered, and before the Take returned), and
// [tS, tE] lies within [T0, T1], the parent's own TIME before spawning and
// after every child exited. The checks, per key:
//
//   - every algorithm: admitted ≤ the worst case of SEMANTICS.md for a span
//     of tE−tS (and of T1−T0): burst + ⌊span·rate/period⌋ for the token
//     bucket and GCRA, rate·(⌊span/period⌋+1) for the fixed window (windows
//     are disjoint and last period), rate·⌈(span+1µs)/period⌉ for the sliding
//     log (span+1 whole µs are covered by that many trailing periods).
//   - token bucket, GCRA: tokens are conserved. From the key's final state
//     (tokens x at its last update l; GCRA's TAT) and the first admission
//     being at or after tS: admitted·T ≤ B·T − x·T + (l − tS), and
//     admitted·T ≤ TAT − tS. Under saturation the bucket never fills, so
//     these are equalities for the real first admission time, which the
//     report derives (it should be a few ms after tS).
//   - fixed window: from the final state (count c of the window ending at e)
//     at most ⌊(e − tS)/period⌋ windows fit, all but the last holding at most
//     rate: admitted ≤ rate·(⌊(e−tS)/period⌋ − 1) + c. The parent also reads
//     every key every 50ms while the children run: no window holds more than
//     rate, windows never overlap.
//   - sliding log: the 50ms samples of the key's log (entries "t n" of the
//     trailing period) each hold at most rate units. Their union (each entry
//     lives about a period in the log, so every entry is seen when sampling
//     keeps up) rebuilds the admissions; when it accounts for every admitted
//     unit, every trailing period of the whole run is checked to hold at most
//     rate, exactly.
//   - the limiter was saturated, not idle: admitted ≥ 90% of the run's bound
//     (of the state bound for the fixed window; of rate·⌊span/period⌋ for
//     the sliding log, whose last period may or may not start before the
//     stop).
//   - no errors.
//
// The keys keep their state for a minute after the run (WithTTLMargin), so
// that the parent can read the final state; expiry never changes decisions.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testsupport/childproc"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/redisstore"
)

const (
	// loadChildEnv carries a child's loadConfig (JSON); its presence makes
	// TestLoadChild run.
	loadChildEnv = "SLUICE_LOAD_CHILD"

	loadProcs      = 8
	loadGoroutines = 32
	loadKeys       = 10

	// loadSampleEvery is how often the parent reads every key's state.
	loadSampleEvery = 50 * time.Millisecond

	// Marker lines a child prints on stdout.
	loadReadyLine   = "sluice-load-child: ready"
	loadResultMark  = "sluice-load-child: result "
	loadReadyWithin = 2 * time.Minute
)

// loadConfig is what a child process is asked to do.
type loadConfig struct {
	Addr       string `json:"addr"`
	Prefix     string `json:"prefix"`
	Algorithm  string `json:"algorithm"`
	Rate       int64  `json:"rate"`
	Period     int64  `json:"period_us"`
	Burst      int64  `json:"burst"`
	Keys       int    `json:"keys"`
	Goroutines int    `json:"goroutines"`
}

// loadReport is what a child saw.
type loadReport struct {
	Allowed    []int64 `json:"allowed"` // units admitted, per key
	Denied     []int64 `json:"denied"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	Start      int64   `json:"start_us"` // server TIME before the first Take
	End        int64   `json:"end_us"`   // server TIME after the last Take returned
}

func loadKey(i int) string { return "k" + strconv.Itoa(i) }

// TestLoadChild is the body of one child process of TestConcurrency.
func TestLoadChild(t *testing.T) {
	raw := os.Getenv(loadChildEnv)
	if raw == "" {
		t.Skip("a child process of TestConcurrency")
	}
	var cfg loadConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatalf("%s: %v", loadChildEnv, err)
	}
	alg, err := sluice.ParseAlgorithm(cfg.Algorithm)
	if err != nil {
		t.Fatal(err)
	}
	lim := sluice.Limit{Algorithm: alg, Rate: cfg.Rate, Period: time.Duration(cfg.Period) * time.Microsecond, Burst: cfg.Burst}
	if err := lim.Validate(); err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{
		Addr:            cfg.Addr,
		DisableIdentity: true,
		// A retried EVALSHA could be a second decision: surface every error.
		MaxRetries: -1,
		// A loaded machine (8 race-instrumented processes on 2 cores) can be
		// slow to read replies; an error here fails the test, so be patient.
		ReadTimeout:  20 * time.Second,
		WriteTimeout: 20 * time.Second,
		PoolTimeout:  20 * time.Second,
	})
	defer client.Close()
	store := newGoRedis(t, client,
		redisstore.WithPrefix(cfg.Prefix),
		redisstore.WithTimeout(20*time.Second),
		redisstore.WithTTLMargin(time.Minute))
	defer store.Close()
	l := sluice.New(store)
	ctx := context.Background()
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	stop := awaitStart(t)

	start, err := client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, cfg.Keys)
	for i := range keys {
		keys[i] = loadKey(i)
	}
	tl := hammer(cfg.Goroutines, cfg.Keys, stop, func(k int) (sluice.Result, error) {
		return l.Take(ctx, keys[k], lim, 1)
	})
	end, err := client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}

	rep := loadReport{Allowed: tl.allowed, Denied: tl.denied, Errors: tl.errors, FirstError: tl.firstErr, Start: start.UnixMicro(), End: end.UnixMicro()}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(loadResultMark + string(b))
}

// loadCase is one algorithm's run.
type loadCase struct {
	alg                 string
	rate, period, burst int64 // period in µs
}

func TestConcurrency(t *testing.T) {
	if os.Getenv(loadChildEnv) != "" {
		t.Skip("in a child process")
	}
	d := 10 * time.Second // SLUICE_LONG: long enough for a load burst to come and go
	if !testenv.Long() {
		d = time.Second
	}
	srv := redistest.Standalone(t)
	for _, c := range []loadCase{
		{alg: "token-bucket", rate: 50, period: 1_000_000, burst: 20},
		{alg: "gcra", rate: 50, period: 1_000_000, burst: 20},
		{alg: "fixed-window", rate: 100, period: 1_000_000},
		{alg: "sliding-log", rate: 100, period: 1_000_000},
	} {
		t.Run(c.alg, func(t *testing.T) { runLoad(t, srv, c, d) })
	}
}

// loadSamples is what the parent read from the keys during a run: one row
// per sample, one raw state per key ("" when missing).
type loadSamples struct {
	rows   [][]string
	errors int
	maxGap time.Duration
}

func loadSampleKeys(ctx context.Context, c *redis.Client, keys []string, stop <-chan struct{}) loadSamples {
	var s loadSamples
	tick := time.NewTicker(loadSampleEvery)
	defer tick.Stop()
	last := time.Now()
	for {
		cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range keys {
				p.Get(ctx, k)
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			s.errors++
		} else {
			row := make([]string, len(keys))
			for i, cmd := range cmds {
				row[i], _ = cmd.(*redis.StringCmd).Result()
			}
			s.rows = append(s.rows, row)
			now := time.Now()
			s.maxGap = max(s.maxGap, now.Sub(last))
			last = now
		}
		select {
		case <-stop:
			return s
		case <-tick.C:
		}
	}
}

func loadServerTime(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	tm, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	return tm.UnixMicro()
}

// loadParseState reads a key's packed state (see load in scripts/prelude.lua):
// the kind in one byte, then each field as a little-endian 8-byte integer,
// "kind a b c rate period", or for a sliding log "kind rate period t1 n1 t2
// n2 ...", returned without its rate and period: "kind t1 n1 t2 n2 ...".
func loadParseState(raw string) ([]int64, error) {
	if len(raw) == 0 || (len(raw)-1)%8 != 0 {
		return nil, fmt.Errorf("state %q: %d bytes is not a kind and 8-byte fields", raw, len(raw))
	}
	out := []int64{int64(raw[0])}
	from := 1
	if raw[0] == 6 {
		from = 17
	}
	for i := from; i < len(raw); i += 8 {
		out = append(out, int64(binary.LittleEndian.Uint64([]byte(raw[i:i+8]))))
	}
	return out, nil
}

func runLoad(t *testing.T, srv *redistest.Server, lc loadCase, d time.Duration) {
	ctx := context.Background()
	client := srv.Client()
	sampler := srv.NewClient(t, nil)
	cfg := loadConfig{
		Addr:       srv.Addr(),
		Prefix:     fmt.Sprintf("concurrency:%s:%d:", lc.alg, time.Now().UnixNano()),
		Algorithm:  lc.alg,
		Rate:       lc.rate,
		Period:     lc.period,
		Burst:      lc.burst,
		Keys:       loadKeys,
		Goroutines: loadGoroutines,
	}
	env, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	redisKeys := make([]string, loadKeys)
	for i := range redisKeys {
		redisKeys[i] = cfg.Prefix + loadKey(i)
	}

	t0 := loadServerTime(t, client)

	children := startLoadChildren(t, "TestLoadChild", loadChildEnv, env, d)

	// Sample the keys while the children run.
	stopSampling := make(chan struct{})
	stopOnce := sync.OnceFunc(func() { close(stopSampling) })
	defer stopOnce()
	sampled := make(chan loadSamples, 1)
	go func() { sampled <- loadSampleKeys(ctx, sampler, redisKeys, stopSampling) }()

	stop := time.Now().Add(d)
	startAt(t, children, stop)
	var reports []*loadReport
	for i, c := range children {
		out, res, werr := childResult(t, i, c, stop, loadResultMark)
		r := new(loadReport)
		perr := json.Unmarshal([]byte(res), r)
		switch {
		case werr != nil || res == "" || perr != nil:
			t.Errorf("child %d: exit %v, result %v:\n%s", i, werr, perr, out)
		case len(r.Allowed) != loadKeys || len(r.Denied) != loadKeys:
			t.Errorf("child %d: result for %d keys, want %d", i, len(r.Allowed), loadKeys)
		default:
			reports = append(reports, r)
		}
	}
	stopOnce()
	samples := <-sampled
	t1 := loadServerTime(t, client)
	if t.Failed() {
		return
	}

	// Aggregate.
	admitted := make([]int64, loadKeys)
	denied := make([]int64, loadKeys)
	var errs int64
	tS, tE := reports[0].Start, reports[0].End
	for i, r := range reports {
		for k := range loadKeys {
			admitted[k] += r.Allowed[k]
			denied[k] += r.Denied[k]
		}
		errs += r.Errors
		if r.Errors > 0 {
			t.Errorf("child %d: %d errors, the first: %s", i, r.Errors, r.FirstError)
		}
		tS, tE = min(tS, r.Start), max(tE, r.End)
	}
	if tS < t0 || tE > t1 {
		t.Errorf("children ran over server time [%d, %d], outside the parent's [%d, %d]", tS, tE, t0, t1)
	}
	final := make([][]int64, loadKeys)
	for k, rk := range redisKeys {
		raw, err := client.Get(ctx, rk).Result()
		if err != nil {
			t.Errorf("%s: final state: %v", rk, err)
			continue
		}
		if final[k], err = loadParseState(raw); err != nil {
			t.Error(err)
		}
	}
	var decisions, totalAdmitted int64
	for k := range loadKeys {
		decisions += admitted[k] + denied[k]
		totalAdmitted += admitted[k]
	}
	span, window := tE-tS, t1-t0
	t.Logf("%s %d/%v burst %d: %d processes × %d goroutines on %d keys for %v; server span of the run %.3fs (T0..T1 %.3fs)",
		lc.alg, lc.rate, time.Duration(lc.period)*time.Microsecond, lc.burst, loadProcs, loadGoroutines, loadKeys, d,
		float64(span)/1e6, float64(window)/1e6)
	t.Logf("%d decisions (%.0f/s), %d admitted, %d errors; %d samples of the keys (largest gap %v, %d failed)",
		decisions, float64(decisions)/(float64(span)/1e6), totalAdmitted, errs, len(samples.rows),
		samples.maxGap.Round(time.Millisecond), samples.errors)

	// Per-key samples, parsed.
	keySamples := make([][][]int64, loadKeys)
	for _, row := range samples.rows {
		for k, raw := range row {
			if raw == "" {
				continue
			}
			st, err := loadParseState(raw)
			if err != nil {
				t.Error(err)
				continue
			}
			keySamples[k] = append(keySamples[k], st)
		}
	}

	for k := range loadKeys {
		name := loadKey(k)
		a := admitted[k]
		var lines []string
		var runBound, looseBound int64
		switch lc.alg {
		case "token-bucket", "gcra":
			runBound = lc.burst + span*lc.rate/lc.period
			looseBound = lc.burst + window*lc.rate/lc.period
		case "fixed-window":
			runBound = lc.rate * (span/lc.period + 1)
			looseBound = lc.rate * (window/lc.period + 1)
		case "sliding-log":
			runBound = lc.rate * loadCeilDiv(span+1, lc.period)
			looseBound = lc.rate * loadCeilDiv(window+1, lc.period)
		}
		lines = append(lines, fmt.Sprintf("bound(run) %d, bound(T0..T1) %d", runBound, looseBound))
		if a > runBound {
			t.Errorf("%s %s: admitted %d, over the bound %d for a span of %dµs", lc.alg, name, a, runBound, span)
		}
		if a > looseBound {
			t.Errorf("%s %s: admitted %d, over the bound %d for T1−T0 = %dµs", lc.alg, name, a, looseBound, window)
		}
		saturation := runBound
		f := final[k]
		switch lc.alg {
		case "token-bucket":
			// "1 ls l 0 rate period": the level (full − tokens) scaled by
			// the period, last update.
			if len(f) != 6 || f[0] != 1 || f[5] != lc.period {
				t.Errorf("%s %s: final state %v is not a token bucket's", lc.alg, name, f)
				break
			}
			full := lc.burst * lc.period
			xs, l := full-f[1], f[2]
			stateBound := loadFloorDiv(full-xs+lc.rate*(l-tS), lc.period)
			// Never full again after the first admission: equality at the
			// real first admission time.
			first := float64(l) - float64(a*lc.period-full+xs)/float64(lc.rate)
			lines = append(lines, fmt.Sprintf("bound(state) %d (first admission derived %.1fms after the start)",
				stateBound, (first-float64(tS))/1e3))
			if a > stateBound {
				t.Errorf("%s %s: admitted %d, more than the tokens refilled since the start allow: %d (state %v, start %d)",
					lc.alg, name, a, stateBound, f, tS)
			}
		case "gcra":
			// "2 tu tr seen rate period": TAT = tu + tr/rate µs.
			if len(f) != 6 || f[0] != 2 || f[4] != lc.rate {
				t.Errorf("%s %s: final state %v is not a GCRA's", lc.alg, name, f)
				break
			}
			tu, tr := f[1], f[2]
			stateBound := loadFloorDiv((tu-tS)*lc.rate+tr, lc.period)
			first := float64(tu) + float64(tr)/float64(lc.rate) - float64(a*lc.period)/float64(lc.rate)
			lines = append(lines, fmt.Sprintf("bound(state) %d (first admission derived %.1fms after the start)",
				stateBound, (first-float64(tS))/1e3))
			if a > stateBound {
				t.Errorf("%s %s: admitted %d, more than the TAT allows: %d (state %v, start %d)",
					lc.alg, name, a, stateBound, f, tS)
			}
		case "fixed-window":
			// "4 c e 0 rate period": the count of the window ending at e.
			if len(f) != 6 || f[0] != 4 {
				t.Errorf("%s %s: final state %v is not a fixed window's", lc.alg, name, f)
				break
			}
			c, e := f[1], f[2]
			n := loadFloorDiv(e-tS, lc.period) // windows that fit in [tS, e)
			if n < 1 || c > lc.rate {
				t.Errorf("%s %s: final state %v impossible for a run from %d", lc.alg, name, f, tS)
				break
			}
			stateBound := lc.rate*(n-1) + c
			saturation = stateBound
			lines = append(lines, fmt.Sprintf("bound(state) %d", stateBound))
			if a > stateBound {
				t.Errorf("%s %s: admitted %d, over the %d of %d windows ending with count %d at %d (start %d)",
					lc.alg, name, a, stateBound, n, c, e, tS)
			}
			lines = append(lines, loadCheckFixed(t, lc, name, a, append(keySamples[k], f)))
		case "sliding-log":
			if len(f) < 1 || f[0] != 6 {
				t.Errorf("%s %s: final state %v is not a sliding log's", lc.alg, name, f)
				break
			}
			saturation = lc.rate * (span / lc.period)
			lines = append(lines, loadCheckLog(t, lc, name, a, append(keySamples[k], f)))
		}
		pct := 100 * float64(a) / float64(max(saturation, 1))
		if 10*a < 9*saturation && testenv.Timing(t, "the limiter saturated under load") {
			t.Errorf("%s %s: admitted %d, only %.1f%% of %d: the limiter was not saturated", lc.alg, name, a, pct, saturation)
		}
		t.Logf("  %s: admitted %d (%.1f%%), denied %d | %s", name, a, pct, denied[k], strings.Join(lines, " | "))
	}
}

// checkFixedSamples checks the sampled fixed-window states of one key: no
// window over rate, windows never overlapping. It returns a summary.
func loadCheckFixed(t *testing.T, lc loadCase, name string, admitted int64, states [][]int64) string {
	t.Helper()
	windows := map[int64]int64{} // end → highest count seen
	for _, st := range states {
		if len(st) != 6 || st[0] != 4 {
			t.Errorf("%s %s: sampled state %v is not a fixed window's", lc.alg, name, st)
			continue
		}
		c, e := st[1], st[2]
		if c < 0 || c > lc.rate {
			t.Errorf("%s %s: sampled window ending at %d holds %d, over %d", lc.alg, name, e, c, lc.rate)
		}
		windows[e] = max(windows[e], c)
	}
	ends := make([]int64, 0, len(windows))
	var sum int64
	for e, c := range windows {
		ends = append(ends, e)
		sum += c
	}
	slices.Sort(ends)
	for i := 1; i < len(ends); i++ {
		if ends[i]-ends[i-1] < lc.period {
			t.Errorf("%s %s: windows ending at %d and %d overlap (period %dµs)", lc.alg, name, ends[i-1], ends[i], lc.period)
		}
	}
	if sum > admitted {
		t.Errorf("%s %s: the sampled windows hold %d units, more than the %d admitted", lc.alg, name, sum, admitted)
	}
	complete := "all admissions seen"
	if sum < admitted {
		complete = fmt.Sprintf("%d admissions not seen by sampling", admitted-sum)
	}
	return fmt.Sprintf("%d windows sampled, each ≤ %d, none overlapping, holding %d (%s)", len(ends), lc.rate, sum, complete)
}

// checkLogSamples checks the sampled sliding-log states of one key: each
// holds at most rate units of one trailing period; and, over the union of
// all samples, every trailing period of the run holds at most rate units.
// It returns a summary.
func loadCheckLog(t *testing.T, lc loadCase, name string, admitted int64, states [][]int64) string {
	t.Helper()
	entries := map[int64]int64{} // time → highest cost seen (same-µs requests share an entry)
	for _, st := range states {
		if len(st) < 1 || st[0] != 6 || len(st)%2 != 1 {
			t.Errorf("%s %s: sampled state %v is not a sliding log's", lc.alg, name, st)
			continue
		}
		var used int64
		for i := 1; i < len(st); i += 2 {
			tm, n := st[i], st[i+1]
			if n <= 0 || (i > 1 && tm <= st[i-2]) {
				t.Errorf("%s %s: sampled log %v is not in time order with positive costs", lc.alg, name, st)
			}
			used += n
			entries[tm] = max(entries[tm], n)
		}
		if len(st) > 1 && st[len(st)-2]-st[1] >= lc.period {
			t.Errorf("%s %s: sampled log %v spans more than a period", lc.alg, name, st)
		}
		if used > lc.rate {
			t.Errorf("%s %s: sampled log %v holds %d units, over %d", lc.alg, name, st, used, lc.rate)
		}
	}
	times := make([]int64, 0, len(entries))
	var sum int64
	for tm, n := range entries {
		times = append(times, tm)
		sum += n
	}
	slices.Sort(times)
	// Every trailing period (times[i] − period, times[i]].
	var most, in int64
	j := 0
	for i, tm := range times {
		in += entries[tm]
		for times[j] <= tm-lc.period {
			in -= entries[times[j]]
			j++
		}
		if in > most {
			most = in
		}
		if in > lc.rate {
			t.Errorf("%s %s: the period ending at %d holds %d units (entries %d..%d), over %d",
				lc.alg, name, tm, in, j, i, lc.rate)
		}
	}
	if sum > admitted {
		t.Errorf("%s %s: the sampled logs hold %d units, more than the %d admitted", lc.alg, name, sum, admitted)
	}
	complete := "all admissions seen: exact"
	if sum < admitted {
		complete = fmt.Sprintf("%d admissions not seen by sampling", admitted-sum)
	}
	return fmt.Sprintf("log rebuilt from samples: %d units, at most %d in any trailing period (%s)", sum, most, complete)
}

func loadFloorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func loadCeilDiv(a, b int64) int64 { return -loadFloorDiv(-a, b) }

// startLoadChildren spawns loadProcs copies of the test binary running the
// test named run, with env in the environment variable envName, and waits
// until each is ready. Children still running when the test ends are killed.
func startLoadChildren(t *testing.T, run, envName string, env []byte, d time.Duration) []*childproc.Child {
	children := make([]*childproc.Child, loadProcs)
	for i := range children {
		children[i] = childproc.Start(t, run, []string{envName + "=" + string(env)}, d+5*time.Minute, nil)
	}
	for _, c := range children {
		c.WaitReady(t, loadReadyWithin)
	}
	return children
}

// startAt sends the ready children their stop time and closes their input.
func startAt(t *testing.T, children []*childproc.Child, stop time.Time) {
	for i, c := range children {
		if err := c.Send(fmt.Sprintf("go %d", stop.UnixNano())); err != nil {
			t.Errorf("child %d: writing the start line: %v", i, err)
		}
		c.CloseInput()
	}
}

// childResult waits for a child until 5 minutes past stop and returns its
// exit error and what it printed, where the line after mark holds its
// result.
func childResult(t *testing.T, i int, c *childproc.Child, stop time.Time, mark string) (out, result string, werr error) {
	select {
	case <-c.Done():
	case <-time.After(time.Until(stop) + 5*time.Minute):
		t.Fatalf("child %d still running 5 minutes after the stop:\n%s", i, c.Output())
	}
	werr = c.Wait()
	out = c.Output()
	for line := range strings.SplitSeq(out, "\n") {
		if j := strings.Index(line, mark); j >= 0 {
			result = line[j+len(mark):]
		}
	}
	return out, result, werr
}

// awaitStart tells the parent this child is ready and returns the stop time
// the parent answers with.
func awaitStart(t *testing.T) time.Time {
	childproc.Ready()
	line, err := childproc.ReadLine()
	if err != nil {
		t.Fatalf("waiting for the start line: %v", err)
	}
	stopNanos, err := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(line, "go ")), 10, 64)
	if err != nil {
		t.Fatalf("start line %q: %v", line, err)
	}
	return time.Unix(0, stopNanos)
}

// loadTally counts one child's decisions per key.
type loadTally struct {
	allowed, denied []int64
	errors          int64
	firstErr        string
}

// hammer runs goroutines deciding on key k = i mod n, round-robin from a
// different start each, until stop, and sums what they saw.
func hammer(goroutines, n int, stop time.Time, decide func(k int) (sluice.Result, error)) loadTally {
	tallies := make([]loadTally, goroutines)
	var wg sync.WaitGroup
	for g := range tallies {
		wg.Go(func() {
			tl := &tallies[g]
			tl.allowed, tl.denied = make([]int64, n), make([]int64, n)
			for i := g; time.Now().Before(stop); i++ {
				k := i % n
				r, err := decide(k)
				switch {
				case err != nil:
					tl.errors++
					if tl.firstErr == "" {
						tl.firstErr = err.Error()
					}
				case r.Allowed:
					tl.allowed[k]++
				default:
					tl.denied[k]++
				}
			}
		})
	}
	wg.Wait()
	sum := loadTally{allowed: make([]int64, n), denied: make([]int64, n)}
	for _, tl := range tallies {
		for k := range n {
			sum.allowed[k] += tl.allowed[k]
			sum.denied[k] += tl.denied[k]
		}
		sum.errors += tl.errors
		if sum.firstErr == "" {
			sum.firstErr = tl.firstErr
		}
	}
	return sum
}
