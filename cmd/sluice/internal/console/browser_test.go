package console

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/sluice-go/sluice/cmd/sluice/internal/browsertest"
	"github.com/sluice-go/sluice/cmd/sluice/internal/sim"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/observe"
)

const browserTimeout = 90 * time.Second

// browse starts a console over view, a browser, and opens the page.
func browse(t *testing.T, view ConfigView, script bool) (*Console, *fakeClock, context.Context) {
	t.Helper()
	return browseWith(t, Options{Config: func() ConfigView { return view }}, script)
}

// browseWith starts a console with o, a browser, and opens the page.
func browseWith(t *testing.T, o Options, script bool) (*Console, *fakeClock, context.Context) {
	t.Helper()
	ctx := browsertest.New(t, browserTimeout)
	c, clk := newTestConsole(t, o)
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	if !script {
		disable := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
			return err
		})
		if err := chromedp.Do(ctx, disable); err != nil {
			t.Fatal(err)
		}
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#rules-table"))); err != nil {
		t.Fatal(err)
	}
	return c, clk, ctx
}

func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return v
}

func waitFor(t *testing.T, ctx context.Context, js string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](js, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("waiting for %s: %v", js, err)
	}
}

// TestBrowserRules: the rules table the browser shows is the config view,
// with or without the script, and a failed load is shown.
func TestBrowserRules(t *testing.T) {
	view := testView()
	var want [][]string
	for _, r := range view.Rules {
		rate, period, burst := strconv.FormatInt(r.Rate, 10), fmtPeriod(r.Period), strconv.FormatInt(r.Burst, 10)
		if r.Unit != "" {
			period += " (" + r.Unit + ")"
		}
		if r.Unlimited {
			rate, period, burst = "—", "—", "—"
		}
		want = append(want, []string{r.Domain, r.Path, r.Name, r.Algorithm, rate, period, burst, yesno(r.Shadow), yesno(r.Unlimited)})
	}
	for _, script := range []bool{true, false} {
		t.Run(fmt.Sprintf("script=%v", script), func(t *testing.T) {
			_, _, ctx := browse(t, view, script)
			got := eval[[][]string](t, ctx, `Array.from(document.querySelectorAll("#rules-table tbody tr")).map(tr =>
				Array.from(tr.querySelectorAll("td[data-k]")).map(td => td.innerText.trim()))`)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("rules table\n got %q\nwant %q", got, want)
			}
			if got := eval[string](t, ctx, `document.getElementById("config-error-text").innerText`); got != view.LastError {
				t.Errorf("the error shown is %q, want %q", got, view.LastError)
			}
			if got := eval[string](t, ctx, `document.getElementById("config-sources").innerText`); got != view.Sources[0] {
				t.Errorf("sources %q", got)
			}
			if got := eval[bool](t, ctx, `document.getElementById("config-error").getBoundingClientRect().height > 0`); !got {
				t.Error("the error is not visible")
			}
			browsertest.Screenshot(t, ctx, "rules")
		})
	}
}

func yesno(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// liveCells reads a rule's totals from the live table, and the chart's.
func liveCells(t *testing.T, ctx context.Context, rule string) (table, chart map[string]int64) {
	t.Helper()
	cells := eval[map[string]string](t, ctx, fmt.Sprintf(`Object.fromEntries(Array.from(
		document.querySelectorAll('#live-table tr[data-rule=%q] td[data-k]')).map(td => [td.dataset.k, td.innerText]))`, rule))
	lines := eval[map[string]string](t, ctx, `Object.fromEntries(Array.from(
		document.querySelectorAll('#live-chart polyline')).map(p => [p.dataset.outcome, p.dataset.total]))`)
	num := func(m map[string]string) map[string]int64 {
		out := map[string]int64{}
		for k, v := range m {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("%s=%q", k, v)
			}
			out[k] = n
		}
		return out
	}
	return num(cells), num(lines)
}

// TestBrowserLive: events observed while the page is open move its table's
// and its chart's numbers by as many, units charged its charged column,
// and the refused keys are listed.
func TestBrowserLive(t *testing.T) {
	c, clk, ctx := browse(t, testView(), true)
	const rule = "edge.api.user"
	c.Observe(observe.Event{Policy: rule, Outcome: observe.Allowed, Latency: 200 * time.Microsecond})
	c.Observe(observe.Event{Policy: "edge.remote_address", Outcome: observe.Denied})
	waitFor(t, ctx, `Number(document.body.dataset.livePolls || 0) >= 1`)
	// Chart the one rule.
	if err := chromedp.Do(ctx, chromedp.Focus(chromedp.CSS("#live-rule"))); err != nil {
		t.Fatal(err)
	}
	eval[bool](t, ctx, fmt.Sprintf(`(s => { s.value = %q; s.dispatchEvent(new Event("change")); return true })(document.getElementById("live-rule"))`, rule))
	polls := eval[int](t, ctx, `Number(document.body.dataset.livePolls)`)
	waitFor(t, ctx, fmt.Sprintf(`Number(document.body.dataset.livePolls) > %d`, polls))
	table0, chart0 := liveCells(t, ctx, rule)

	add := map[observe.Outcome]int64{observe.Allowed: 7, observe.Denied: 3, observe.ShadowDenied: 2, observe.Error: 1, observe.Degraded: 4}
	for o, n := range add {
		for range n {
			c.Observe(observe.Event{Source: "serve", Policy: rule, Outcome: o, Latency: 500 * time.Microsecond})
		}
	}
	clk.Advance(time.Second) // the next second too: the page merges both
	for range 5 {
		c.Observe(observe.Event{Source: "serve", Policy: rule, Outcome: observe.Allowed})
	}
	add[observe.Allowed] += 5
	for range 6 {
		c.Refused(rule, "user:mallory")
	}
	c.Refused(rule, "user:bob")
	c.Charged(rule, 4000) // units charged, beside the decisions

	want := map[string]int64{"charged": table0["charged"] + 4000}
	for o, n := range add {
		want[o.String()] = table0[o.String()] + n
	}
	var cond []string
	for k, v := range want {
		cond = append(cond, fmt.Sprintf(`document.querySelector('#live-table tr[data-rule=%q] td[data-k=%q]').innerText == "%d"`, rule, k, v))
	}
	waitFor(t, ctx, strings.Join(cond, " && "))
	table1, chart1 := liveCells(t, ctx, rule)
	for o, n := range add {
		k := o.String()
		if table1[k]-table0[k] != n || chart1[k]-chart0[k] != n {
			t.Errorf("%s: the table moved %d→%d, the chart %d→%d; want +%d", k, table0[k], table1[k], chart0[k], chart1[k], n)
		}
	}
	if table1["charged"]-table0["charged"] != 4000 {
		t.Errorf("charged: the table moved %d→%d, want +4000", table0["charged"], table1["charged"])
	}
	if table1["latency_max_us"] != 500 {
		t.Errorf("store latency max %d µs, want 500", table1["latency_max_us"])
	}
	top := eval[[][]string](t, ctx, `Array.from(document.querySelectorAll("#top-table tbody tr")).map(tr => Array.from(tr.cells).map(td => td.innerText))`)
	if fmt.Sprint(top) != fmt.Sprintf("[[%s user:mallory 6] [%s user:bob 1]]", rule, rule) {
		t.Errorf("top refused %q", top)
	}
	browsertest.Screenshot(t, ctx, "live")
}

// readSimTotals reads the playground's totals table as consoleTotals
// writes them.
func readSimTotals(t *testing.T, ctx context.Context) []string {
	t.Helper()
	rows := eval[[][]string](t, ctx, `Array.from(document.querySelectorAll("#sim-totals tbody tr")).map(tr =>
		[tr.dataset.algorithm].concat(Array.from(tr.querySelectorAll("td[data-k]")).map(td => td.innerText)))`)
	res := &SimResult{}
	for _, r := range rows {
		if len(r) != 6 {
			t.Fatalf("row %q", r)
		}
		var n [5]int64
		for i := range n {
			v, err := strconv.ParseInt(r[i+1], 10, 64)
			if err != nil {
				t.Fatalf("row %q", r)
			}
			n[i] = v
		}
		res.Rows = append(res.Rows, SimRow{Algorithm: r[0], Totals: SimTotals{Admitted: n[0], Delayed: n[1], Denied: n[2], Errors: n[3], MaxDelayUS: n[4]}})
	}
	return consoleTotals(res)
}

// typeInto replaces an input's text by typing, as a person would.
func typeInto(id, text string) chromedp.Action[chromedp.Void] {
	sel := chromedp.CSS("#" + id)
	return chromedp.Steps(chromedp.Focus(sel), clearInput(id), chromedp.SendKeys(sel, text))
}

// clearInput empties an input (chromedp.Clear resets only its default
// value, and SetValue fails on an empty one).
func clearInput(id string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Evaluate[bool](fmt.Sprintf(`(e => { e.value = ""; e.dispatchEvent(new Event("input", {bubbles: true})); return true })(document.getElementById(%q))`, id))(ctx, tg)
		return err
	})
}

// TestBrowserPlayground fills the form from the keyboard and runs it: the
// totals shown are `sluice sim`'s for the same input.
func TestBrowserPlayground(t *testing.T) {
	_, _, ctx := browse(t, testView(), true)
	waitFor(t, ctx, `Number(document.body.dataset.livePolls || 0) >= 1`)

	// A steady 3 per tick for 20 ticks under 20/1s, burst 6.
	steady := make([]int, 20)
	for i := range steady {
		steady[i] = 3
	}
	tracePath := writeTrace(t, sim.Spread(steady, sim.DefaultStart, 100*time.Millisecond, "sim"))
	err := chromedp.Do(ctx,
		typeInto("sim-limit", "20/1s"),
		typeInto("sim-burst", "6"),
		chromedp.Focus(chromedp.CSS("#sim-shape")),
		chromedp.SetValue(chromedp.CSS("#sim-shape"), ShapeSteady),
		typeInto("sim-rate", "3"),
		typeInto("sim-ticks", "20"),
		chromedp.Focus(chromedp.CSS("#sim-run")),
		chromedp.KeyEvent(kb.Enter),
	)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, `Number(document.body.dataset.simRuns || 0) >= 1 && document.querySelector("#sim-totals")`)
	got, want := readSimTotals(t, ctx), cliTotals(t, "--trace", tracePath, "--ticks", "20", "--limit", "20/1s", "--burst", "6")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the page's totals\n%s\n`sluice sim`'s\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("#sim-figure svg g.algorithm").length`); n != 7 {
		t.Errorf("the figure has %d algorithms' rows, want 7", n)
	}
	browsertest.Screenshot(t, ctx, "playground")

	// A loaded rule, from its button in the rules table, with sim's own
	// scenario and two algorithms.
	err = chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`button.try[data-rule="edge.remote_address"]`)),
		chromedp.SetValue(chromedp.CSS("#sim-shape"), ShapeDefault),
		clearInput("sim-ticks"),
		chromedp.Click(chromedp.CSS(`input[name=algorithms][value=gcra]`)),
		chromedp.Focus(chromedp.CSS("#sim-run")),
		chromedp.KeyEvent(kb.Enter),
	)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, `Number(document.body.dataset.simRuns || 0) >= 2`)
	if v := eval[string](t, ctx, `document.getElementById("sim-rule").value`); v != "edge.remote_address" {
		t.Errorf("the rule picked is %q", v)
	}
	got = readSimTotals(t, ctx)
	want = cliTotals(t, "--limit", "10/1s", "--burst", "20")
	want = append(want[:1], want[2:]...) // gcra unchecked
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the page's totals\n%s\n`sluice sim`'s\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// A bad limit shows an error.
	err = chromedp.Do(ctx, typeInto("sim-limit", "ten a second"), chromedp.Focus(chromedp.CSS("#sim-run")), chromedp.KeyEvent(kb.Enter))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, `document.querySelector("#sim-error[role=alert]")`)
}

// TestBrowserKeyboard: every control has a label, and Tab reaches the
// sections' links, the rules' buttons and the whole form, in order.
func TestBrowserKeyboard(t *testing.T) {
	_, _, ctx := browse(t, testView(), true)
	waitFor(t, ctx, `Number(document.body.dataset.livePolls || 0) >= 1`)
	unlabelled := eval[[]string](t, ctx, `Array.from(document.querySelectorAll("input, select, textarea"))
		.filter(e => e.labels.length === 0 && !e.closest("label")).map(e => e.id || e.name)`)
	if len(unlabelled) > 0 {
		t.Errorf("controls without a label: %v", unlabelled)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("[onclick], div[role=button], span[role=button]").length`); n != 0 {
		t.Errorf("%d clickable non-buttons", n)
	}
	var order []string
	for range 60 {
		if err := chromedp.Do(ctx, chromedp.KeyEvent(kb.Tab)); err != nil {
			t.Fatal(err)
		}
		order = append(order, eval[string](t, ctx, `(e => e.id || (e.tagName.toLowerCase() + ":" + (e.getAttribute("href") || e.dataset.rule || e.value || "")))(document.activeElement)`))
	}
	at := func(id string) int {
		for i, o := range order {
			if o == id {
				return i
			}
		}
		t.Errorf("Tab never reaches %s: %v", id, order)
		return -1
	}
	seq := []string{"a:#rules", "a:#live", "a:#playground", "button:edge.remote_address", "live-rule", "sim-rule", "sim-limit", "sim-burst", "sim-shape", "sim-run"}
	for i := 1; i < len(seq); i++ {
		if a, b := at(seq[i-1]), at(seq[i]); a >= b {
			t.Errorf("Tab reaches %s (%d) after %s (%d): %v", seq[i-1], a, seq[i], b, order)
		}
	}
}

// TestBrowserScreenshot draws the page as docs/console.md shows it: four minutes
// of traffic on two rules, a playground run and a walk at its fourth step. With SLUICE_UPDATE_DOCS=1
// it writes docs/console.png.
func TestBrowserScreenshot(t *testing.T) {
	seed := testenv.SeedOr(t, 2026)
	r := rand.New(rand.NewPCG(seed, 3))
	var tick atomic.Int64
	c, clk, ctx := browseWith(t, realHolding(testView, &tick), true)
	clk.Advance(-240 * time.Second)
	c.SampleSlices()
	for s := range 240 {
		wave := 20 + 15*math.Sin(float64(s)/25)
		for range int(wave) + r.IntN(5) {
			c.Observe(observe.Event{Policy: "edge.remote_address", Outcome: observe.Allowed, Latency: time.Duration(150+r.IntN(200)) * time.Microsecond})
		}
		if s > 120 && s < 180 {
			for range 8 + r.IntN(8) {
				c.Observe(observe.Event{Policy: "edge.remote_address", Outcome: observe.Denied, Latency: 200 * time.Microsecond})
				c.Refused("edge.remote_address", fmt.Sprintf("10.1.0.%d", r.IntN(4)))
			}
		}
		for range r.IntN(6) {
			c.Observe(observe.Event{Policy: "edge.api.user", Outcome: observe.Allowed, Latency: 300 * time.Microsecond})
		}
		if r.IntN(4) == 0 {
			c.Observe(observe.Event{Policy: "edge.api.user", Outcome: observe.ShadowDenied})
			c.Refused("edge.api.user", fmt.Sprintf("user:%d", 1000+r.IntN(3)))
		}
		tick.Add(1)
		c.SampleSlices()
		clk.Advance(time.Second)
	}
	// The page polls for the seconds after its last poll: reload it to read
	// the minutes just made up.
	if err := chromedp.Do(ctx, chromedp.Reload()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, `Number(document.body.dataset.livePolls || 0) >= 1`)
	if err := chromedp.Do(ctx, chromedp.Focus(chromedp.CSS("#sim-run")), chromedp.KeyEvent(kb.Enter)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, `document.querySelector("#sim-figure svg")`)
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS("#steps-algorithm"), "gcra"), typeInto("steps-burst", "3")); err != nil {
		t.Fatal(err)
	}
	press(t, ctx, "#steps-run")
	waitFor(t, ctx, `Number(document.body.dataset.stepsRuns || 0) >= 1 && document.querySelector("#step-current")`)
	for range 3 {
		press(t, ctx, "#step-forward")
	}
	path := browsertest.Screenshot(t, ctx, "console")
	if os.Getenv("SLUICE_UPDATE_DOCS") == "1" {
		png, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("..", "..", "..", "..", "docs", "console.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Log("wrote docs/console.png")
	}
}

// TestBrowserPlaygroundForm runs the playground without the script: the
// form posts to /console/playground (a same-origin form, which the
// cross-site rule lets through), and the page comes back with `sluice
// sim`'s totals for the default limit, whose burst is the rate.
func TestBrowserPlaygroundForm(t *testing.T) {
	_, _, ctx := browse(t, testView(), false)
	if v := eval[string](t, ctx, `document.getElementById("sim-burst").value`); v != "" {
		t.Errorf("the burst field holds %q, want it empty (the rate)", v)
	}
	err := chromedp.Do(ctx,
		typeInto("sim-limit", "20/1s"),
		chromedp.Click(chromedp.CSS("#sim-run")),
		chromedp.WaitVisible(chromedp.CSS("#sim-totals")),
	)
	if err != nil {
		t.Fatal(err)
	}
	if u := eval[string](t, ctx, `location.pathname`); u != "/console/playground" {
		t.Errorf("the form went to %s", u)
	}
	got, want := readSimTotals(t, ctx), cliTotals(t, "--limit", "20/1s")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the page's totals\n%s\n`sluice sim --limit 20/1s`'s\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if v := eval[string](t, ctx, `document.getElementById("sim-limit").value`); v != "20/1s" {
		t.Errorf("the limit typed is shown as %q", v)
	}
}

// statusLog records the method, path, Sec-Fetch-Site and answer status of
// each request a handler answers.
type statusLog struct {
	mu    sync.Mutex
	lines []string
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

func (l *statusLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, code: 200}
		h.ServeHTTP(sw, r)
		l.mu.Lock()
		l.lines = append(l.lines, fmt.Sprintf("%s %s %s %d", r.Method, r.URL.Path, r.Header.Get("Sec-Fetch-Site"), sw.code))
		l.mu.Unlock()
	})
}

func (l *statusLog) has(line string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.lines, line)
}

// TestBrowserCrossSite opens a page of another site (localhost, where the
// console is 127.0.0.1) that does what the red team did: a no-cors fetch
// of the playground's API with a text/plain JSON body, and a form posted to
// the playground. The browser sends both; the console refuses both (403)
// without running them.
func TestBrowserCrossSite(t *testing.T) {
	ctx := browsertest.New(t, browserTimeout)
	c, _ := newTestConsole(t, Options{Config: testView})
	var log statusLog
	srv := httptest.NewServer(log.wrap(c.Handler()))
	t.Cleanup(srv.Close)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><html><body>
<form id="f" method="post" action="%[1]s/console/playground"><input name="shape" value="default"><input name="ticks" value="10"><button id="go">go</button></form>
<script>
fetch(%[1]q + "/console/api/sim", {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"}, body: '{"ticks": 200}'})
  .finally(() => { document.body.dataset.fetched = "1"; });
</script></body></html>`, srv.URL)
	}))
	t.Cleanup(evil.Close)
	evilURL := strings.Replace(evil.URL, "127.0.0.1", "localhost", 1)
	if err := chromedp.Do(ctx, chromedp.Navigate(evilURL+"/")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, `document.body.dataset.fetched == "1"`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#go"))); err != nil {
		t.Fatal(err)
	}
	// The page navigates: evaluating in it fails until the next one loads.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		done, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`location.pathname == "/console/playground" && document.body.innerText.includes("another origin")`))
		if err == nil && done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the form's answer never showed the refusal (%v): %q", err, log.lines)
		}
	}
	for _, want := range []string{"POST /console/api/sim cross-site 403", "POST /console/playground cross-site 403"} {
		if !log.has(want) {
			t.Errorf("the console's log lacks %q: %q", want, log.lines)
		}
	}
}
