package cli

import (
	"bytes"
	"context"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/internal/algo"
)

// simCLI runs `sluice sim args...` in process.
func simCLI(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(context.Background(), append([]string{"sim"}, args...), strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

// The default: 10/1s and, --burst left out, a burst of the rate (10): the
// bucket passes the burst of 8 and two ticks of 2 (refilled 1 a tick), then
// 1 a tick; the windows (default burst·period/rate = 1s) admit 10 a second.
func TestSimDefault(t *testing.T) {
	code, out, errs := simCLI(t, "")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, s := range []string{
		"limit 10/1s (1 per tick), burst 10;",
		"arrivals              .  .  .  .  8  2  2  2  2  2",
		"token-bucket   admit  .  .  .  .  8  2  2  1  1  1",
		"leaky-bucket   admit  .  .  .  .  1  .  .  .  .  .",
		"               delay  .  .  .  .  .  1  1  1  1  1",
		"fixed-window   admit  .  .  .  .  8  2  .  .  .  .  .  .  .  .  2  2",
		"  sliding-log     admitted 30  denied 28",
		"--trace FILE",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Error("colors on a non-terminal")
	}
	if errs != "" {
		t.Errorf("stderr: %s", errs)
	}
}

func TestSimFlags(t *testing.T) {
	// 20/1s is one per 50ms: two per 100ms tick; burst 2 makes windows of
	// 2 per 100ms. 10 ticks.
	code, out, errs := simCLI(t, "", "--limit", "20/1s", "--burst", "2", "--ticks", "10", "--no-color")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, s := range []string{
		"limit 20/1s (2 per tick), burst 2",
		"the windows admit 2 per 100ms",
		"               tick   0  1  2  3  4  5  6  7  8  9\n",
		// The bucket holds 2 at the burst and refills one more during it
		// (the burst's arrivals are 12.5ms apart, T = 50ms); then the
		// steady 2 per tick pass.
		"token-bucket   admit  .  .  .  .  3  2  2  2  2  2\n",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	code, out, errs = simCLI(t, "", "--window", "1s", "--tick", "50ms", "--ticks", "8")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, s := range []string{"the windows admit 10 per 1s", "8 ticks of 50ms", "limit 10/1s (0.5 per tick)"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
}

func TestSimSVG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sim.svg")
	code, out, errs := simCLI(t, "", "--svg", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "token-bucket   admit") || !strings.Contains(errs, "wrote "+path) {
		t.Errorf("stdout:\n%s\nstderr:\n%s", out, errs)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(b))
	groups := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s is not XML: %v", path, err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "g" {
			for _, a := range se.Attr {
				if a.Name.Local == "class" && a.Value == "algorithm" {
					groups++
				}
			}
		}
	}
	if groups != len(algo.Kinds()) {
		t.Errorf("%d algorithm groups, want %d", groups, len(algo.Kinds()))
	}

	code, _, errs = simCLI(t, "", "--svg", filepath.Join(t.TempDir(), "no", "such", "dir.svg"))
	if code != 2 || !strings.Contains(errs, "dir.svg") {
		t.Errorf("unwritable --svg: exit %d, %s", code, errs)
	}
}

func TestSimTrace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "burst.jsonl")
	// 6 at once on one key, then one a tick: under 10/1s --burst 4 the token
	// bucket admits 4 and then the rate.
	trace := `{"t_us": 1764000000000000, "key": "u"}
{"t_us": 1764000000000000, "key": "u"}
{"t_us": 1764000000000000, "key": "u"}

{"t_us": 1764000000000000, "key": "u"}
{"t_us": 1764000000000000, "key": "u"}
{"t_us": 1764000000000000, "key": "u"}
{"t_us": 1764000000100000, "key": "u"}
{"t_us": 1764000000200000, "key": "u"}
`
	if err := os.WriteFile(path, []byte(trace), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := simCLI(t, "", "--trace", path, "--burst", "4")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, s := range []string{
		"arrivals: burst.jsonl, 8 requests",
		"7 ticks of 100ms",
		"arrivals              6  1  1  .  .  .  .\n",
		"token-bucket   admit  4  1  1  .  .  .  .\n",
		"               deny   2  .  .  .  .  .  .\n",
		// The leaky bucket admits 5 of the 6 (one at once, 4 queued), then
		// queues the next two behind them: one leaves a tick, until tick 6,
		// which the ticks stretch to show.
		"leaky-bucket   admit  1  .  .  .  .  .  .\n",
		"               delay  .  1  1  1  1  1  1\n",
		"               deny   1  .  .  .  .  .  .\n",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "Try your own") {
		t.Error("the default scenario's hint under a trace")
	}

	// The same trace on stdin.
	code, out2, errs := simCLI(t, trace, "--trace", "-")
	if code != 0 || !strings.Contains(out2, "arrivals: stdin, 8 requests") {
		t.Errorf("stdin: exit %d, %s\n%s", code, errs, out2)
	}
}

func TestSimTraceLeaves(t *testing.T) {
	// The leaky bucket's queued requests leave after the trace's last
	// arrival: the ticks stretch to show them.
	path := filepath.Join(t.TempDir(), "t.jsonl")
	var b strings.Builder
	for range 5 {
		b.WriteString(`{"t_us": 1764000000000000, "key": "u"}` + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := simCLI(t, "", "--trace", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, s := range []string{
		"5 ticks of 100ms",
		"leaky-bucket   admit  1  .  .  .  .\n",
		"               delay  .  1  1  1  1\n",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
}

func TestSimBadTrace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(path, []byte(`{"t_us": 1, "key": "u"}`+"\n\n"+`{"t_us": 2, "key": "u"`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := simCLI(t, "", "--trace", path)
	if code != 2 || !strings.Contains(errs, "bad.jsonl: line 3:") || out != "" {
		t.Errorf("malformed line: exit %d, stdout %q, stderr %q", code, out, errs)
	}

	empty := filepath.Join(dir, "empty.jsonl")
	if err := os.WriteFile(empty, []byte("\n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--trace", empty}, "no requests"},
		{[]string{"--trace", filepath.Join(dir, "missing.jsonl")}, "missing.jsonl"},
	} {
		code, _, errs := simCLI(t, "", tc.args...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errs, tc.want)
		}
	}
}

// --burst left out is the rate, as in replay and sluice.ParseLimit.
func TestSimBurstIsTheRate(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "limit 10/1s (1 per tick), burst 10;"},
		{[]string{"--limit", "20/1s"}, "limit 20/1s (2 per tick), burst 20;"},
		{[]string{"--limit", "3/1s"}, "limit 3/1s (0.3 per tick), burst 3;"},
		{[]string{"--limit", "20/1s", "--burst", "5"}, "limit 20/1s (2 per tick), burst 5;"},
	} {
		code, out, errs := simCLI(t, "", append(tc.args, "--ticks", "5")...)
		if code != 0 || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d %s, output\n%s\nwant %q", tc.args, code, errs, out, tc.want)
		}
	}
}

// The usage names every algorithm sim runs: algo's list, not a copy.
func TestSimHelpNamesEveryAlgorithm(t *testing.T) {
	_, out, _ := simCLI(t, "", "--help")
	para := strings.Join(strings.Fields(out[:strings.Index(out, "  -burst")]), " ")
	for _, k := range algo.Kinds() {
		if !strings.Contains(para, k.String()+",") && !strings.Contains(para, k.String()+")") {
			t.Errorf("sluice sim --help does not name %s:\n%s", k, out)
		}
	}
	for _, line := range strings.Split(out[:strings.Index(out, "  -burst")], "\n") {
		if len(line) > 90 {
			t.Errorf("a usage line of %d bytes: %q", len(line), line)
		}
	}
}

func TestSimBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--limit", "ten"}, "not RATE/PERIOD"},
		{[]string{"--limit", ""}, "--limit RATE/PERIOD is required"},
		{[]string{"--limit", "0/1s"}, "rate must be positive"},
		{[]string{"--burst", "0"}, "at least 1"},
		{[]string{"--burst", "-1"}, "--burst -1 is negative"},
		{[]string{"--ticks", "-1"}, "--ticks -1"},
		{[]string{"--ticks", "100000"}, "--ticks 100000"},
		{[]string{"--tick", "0s"}, "--tick 0s"},
		{[]string{"--tick", "1500ns"}, "--tick 1.5µs"},
		{[]string{"--window", "150ms"}, "holds 1.500 units"},
		{[]string{"--window", "-1s"}, "negative"},
		{[]string{"--limit", "3/1s", "--burst", "4"}, "give a window"},
		{[]string{"--bogus"}, "flag provided but not defined"},
		{[]string{"--ticks", "x"}, "invalid value"},
		{[]string{"extra"}, "sluice sim: unexpected argument \"extra\"\nsee sluice sim --help\n"},
	} {
		code, out, errs := simCLI(t, "", tc.args...)
		if code != 2 || !strings.Contains(errs, tc.want) || out != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", tc.args, code, out, errs, tc.want)
		}
	}
	// -h prints the usage to stdout and exits 0 (TestHelp).
	code, out, errs := simCLI(t, "", "-h")
	if code != 0 || !strings.Contains(out, "--trace") || !strings.Contains(out, "Usage: sluice sim") || errs != "" {
		t.Errorf("-h: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

// TestSimSteps: --steps prints the walk the console shows, step by step.
func TestSimSteps(t *testing.T) {
	// A trace: the walk follows its first key, from its first time.
	tr := `{"t_us": 1764000000000000, "key": "a"}
{"t_us": 1764000000100000, "key": "b"}
{"t_us": 1764000000200000, "key": "a", "cost": 2}
`
	for _, c := range []struct {
		stdin string
		args  []string
		want  []string
	}{
		{"", []string{"--algorithm", "fixed-window", "--limit", "2/1s", "--requests", "0ms x3, 1s cost=2, 1500ms cost=3"}, []string{
			"sluice sim --steps: fixed-window 2/1s: 2 per window of 1s opened by its first request",
			"step 1  t+0s  cost 1  ->  decision allowed; remaining 1; retry after 0s; reset after 1s; delay 0s; window ends t+1s; fresh at t+1s",
			"  math    no window is open: the request opens [t+0s, t+1s), count 0",
			"step 3  t+0s  cost 1  ->  decision denied; remaining 0; retry after 1s;",
			"          count + cost = 2 + 1 = 3 > rate 2: denied, nothing spent; retry after 1s",
			"  after   window [t+1s, t+2s); count 2",
			"step 5  t+1.5s  cost 3  ->  error: sluice: cost exceeds capacity: cost 3, capacity 2",
		}},
		// A charge, and the debt it leaves.
		{"", []string{"--algorithm", "token-bucket", "--limit", "10/1s debt 3", "--burst", "2", "--requests", "0ms charge=4, 0ms"}, []string{
			"sluice sim --steps: token-bucket 10/1s: a bucket of 2, refilled 1 per T = 100ms; a charge may leave it owing 3",
			"step 1  t+0s  charge 4  ->  decision charged; remaining -2;",
			"          tokens → -2 (in debt: owes 2)",
			"  after   level 4 (units spent, not yet refilled); tokens -2;",
			"step 2  t+0s  cost 1  ->  decision denied; remaining -2; retry after 300ms;",
		}},
		{tr, []string{"--algorithm", "gcra", "--limit", "10/1s", "--burst", "2", "--trace", "-"}, []string{
			`1 requests of other keys are left out`, `key "a", 2 requests`, "step 2  t+200ms  cost 2  ->  decision allowed",
		}},
	} {
		code, out, errs := simCLI(t, c.stdin, append([]string{"--steps"}, c.args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", c.args, code, errs)
		}
		for _, s := range c.want {
			if !strings.Contains(out, s) {
				t.Errorf("%v: output lacks %q:\n%s", c.args, s, out)
			}
		}
	}

	for _, c := range []struct{ args []string }{
		{[]string{"--steps", "--algorithm", "nope"}},
		{[]string{"--steps", "--requests", "1s, 0s"}},
		{[]string{"--steps", "--requests", "0s", "--trace", "x.jsonl"}},
		{[]string{"--algorithm", "gcra"}},
	} {
		if code, _, errs := simCLI(t, "", c.args...); code == 0 || errs == "" {
			t.Errorf("%v: exit %d, stderr %q", c.args, code, errs)
		}
	}
}
