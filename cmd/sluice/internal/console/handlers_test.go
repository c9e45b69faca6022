package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cmd/sluice/internal/browsertest"
	"github.com/sluice-go/sluice/cmd/sluice/internal/sim"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/observe"
)

// testView is a configuration with three rules, one shadow, one
// unlimited, and a failed reload.
func testView() ConfigView {
	return ConfigView{
		Sources:     []string{"/etc/sluice/rules.yaml"},
		Origin:      "file /etc/sluice/rules.yaml",
		Loaded:      t0.Add(-time.Hour),
		LastError:   `rules.yaml:7: unit "fortnight": want second, minute, hour or day`,
		LastErrorAt: t0.Add(-time.Minute),
		Rules: []Rule{
			{Domain: "edge", Path: "remote_address", Name: "edge.remote_address", Algorithm: "token-bucket", Rate: 10, Period: time.Second, Burst: 20, Unit: "second"},
			{Domain: "edge", Path: "header_match=api > user_id", Name: "edge.api.user", Algorithm: "gcra", Rate: 100, Period: time.Minute, Burst: 5, Shadow: true, Unit: "minute"},
			{Domain: "internal", Path: "service=health", Name: "internal.health", Unlimited: true},
		},
	}
}

func newTestServer(t *testing.T, view ConfigView) (*Console, *fakeClock, *httptest.Server) {
	t.Helper()
	c, clk := newTestConsole(t, Options{Config: func() ConfigView { return view }})
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	return c, clk, srv
}

func get(t *testing.T, url string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

func TestPage(t *testing.T) {
	_, _, srv := newTestServer(t, testView())
	code, h, body := get(t, srv.URL+"/")
	if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %s", code, h.Get("Content-Type"))
	}
	for _, s := range []string{
		`<td data-k="path" data-label="Descriptor path"><code>header_match=api &gt; user_id</code></td>`,
		`<td data-k="algorithm" data-label="Algorithm">gcra</td>`,
		`<td data-k="period" data-label="Period">1m (minute)</td>`,
		`<td data-k="shadow" data-label="Shadow">yes</td>`,
		`<tr data-rule="internal.health">`,
		`<code>/etc/sluice/rules.yaml</code>`,
		`2026-12-02 15:00:00 UTC`,
		`id="config-error" class="error" role="alert"`,
		`unit &#34;fortnight&#34;: want second`,
		`<label for="sim-limit">`,
		`<option value="edge.api.user" data-limit="100/1m" data-burst="5">`,
		`<script src="/console/assets/console.js" defer></script>`,
	} {
		if !strings.Contains(body, s) {
			t.Errorf("the page lacks %q", s)
		}
	}
	if strings.Contains(body, "http://") || strings.Contains(body, "https://") {
		t.Error("the page refers to another origin")
	}
	// No error: no alert.
	v := testView()
	v.LastError = ""
	_, _, srv2 := newTestServer(t, v)
	if _, _, body := get(t, srv2.URL+"/"); strings.Contains(body, "config-error") {
		t.Error("an error shown after a good load")
	}
}

func TestAssets(t *testing.T) {
	_, _, srv := newTestServer(t, testView())
	for path, ctype := range map[string]string{"/console/assets/console.js": "text/javascript", "/console/assets/console.css": "text/css"} {
		code, h, body := get(t, srv.URL+path)
		if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), ctype) || len(body) < 100 {
			t.Errorf("GET %s: %d %q, %d bytes", path, code, h.Get("Content-Type"), len(body))
		}
	}
	for _, path := range []string{"/console/assets/", "/console/assets/nope.js", "/nope", "/console/api/nope", "/console/assets/../templates/page.html"} {
		if code, _, _ := get(t, srv.URL+path); code != 404 {
			t.Errorf("GET %s: %d, want 404", path, code)
		}
	}
	resp, err := http.Post(srv.URL+"/console/api/live", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /console/api/live: %d", resp.StatusCode)
	}
}

func TestConfigEndpoint(t *testing.T) {
	_, _, srv := newTestServer(t, testView())
	code, _, body := get(t, srv.URL+"/console/api/config")
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	var got configJSON
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Rules) != 3 || got.Rules[1].Limit != "100/1m" || got.Rules[1].PeriodUS != 60e6 || !got.Rules[1].Shadow ||
		got.Rules[2].Limit != "" || !strings.Contains(got.LastError, "fortnight") || got.Origin != "file /etc/sluice/rules.yaml" || !got.Loaded.Equal(t0.Add(-time.Hour)) {
		t.Errorf("config %s", body)
	}
}

func TestLiveEndpoint(t *testing.T) {
	c, clk, srv := newTestServer(t, testView())
	for range 4 {
		c.Observe(observe.Event{Policy: "edge.api.user", Outcome: observe.ShadowDenied, Latency: time.Millisecond})
	}
	c.Refused("edge.remote_address", "10.0.0.1")
	c.Refused("edge.remote_address", "10.0.0.1")
	c.Refused("edge.remote_address", "10.0.0.2")
	clk.Advance(time.Second)
	c.Observe(observe.Event{Policy: "edge.remote_address", Outcome: observe.Denied})
	code, _, body := get(t, srv.URL+"/console/api/live")
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	var l Live
	if err := json.Unmarshal([]byte(body), &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Rules) != 3 || l.Rules[1].Rule != "edge.api.user" || l.Rules[1].Totals.ShadowDenied != 4 || l.Rules[1].Totals.LatencyAvgUS != 1000 ||
		l.Rules[0].Totals.Denied != 1 || fmt.Sprint(l.Top) != "[{edge.remote_address 10.0.0.1 2 0} {edge.remote_address 10.0.0.2 1 0}]" {
		t.Errorf("live %s", body)
	}
	_, _, body = get(t, srv.URL+"/console/api/live?since="+strconv.FormatInt(t0.Unix()+1, 10))
	if err := json.Unmarshal([]byte(body), &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Rules[1].Points) != 0 || len(l.Rules[0].Points) != 1 || strings.Contains(body, "null") {
		t.Errorf("since=now: %s", body)
	}
	if code, _, body := get(t, srv.URL+"/console/api/live?since=yesterday"); code != 400 || !strings.Contains(body, "Unix seconds") {
		t.Errorf("since=yesterday: %d %s", code, body)
	}
}

// simTotalsRE reads a row of `sluice sim`'s totals.
var simTotalsRE = regexp.MustCompile(`(?m)^  (\S+) +admitted (\d+) +denied (\d+) +delayed (\d+) +max delay (\S+)(?: +(.*))?$`)

// sluiceBinary builds cmd/sluice once for the package's tests.
var sluiceBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "sluice-console-test")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "sluice")
	out, err := exec.Command("go", "build", "-o", bin, "../..").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build ./cmd/sluice: %v\n%s", err, out)
	}
	return bin, nil
})

func TestMain(m *testing.M) {
	code := browsertest.Run(m) // the browser tests share one Chromium
	if bin, err := sluiceBinary(); err == nil {
		os.RemoveAll(filepath.Dir(bin))
	}
	os.Exit(code)
}

// cliTotals runs `sluice sim --no-color args...`, the command built from
// cmd/sluice, and returns its totals, one line per algorithm in the
// console's terms.
func cliTotals(t *testing.T, args ...string) []string {
	t.Helper()
	bin, err := sluiceBinary()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, append([]string{"sim", "--no-color"}, args...)...).Output()
	if err != nil {
		t.Fatalf("sluice sim %v: %v", args, err)
	}
	var rows []string
	for _, m := range simTotalsRE.FindAllStringSubmatch(string(out), -1) {
		errs := "0"
		if e := regexp.MustCompile(`(\d+) errors`).FindStringSubmatch(m[6]); e != nil {
			errs = e[1]
		}
		rows = append(rows, fmt.Sprintf("%s admitted %s denied %s delayed %s errors %s max delay %s", m[1], m[2], m[3], m[4], errs, m[5]))
	}
	if len(rows) != 7 {
		t.Fatalf("sluice sim %v: %d totals rows:\n%s", args, len(rows), out)
	}
	return rows
}

func consoleTotals(res *SimResult) []string {
	var rows []string
	for _, r := range res.Rows {
		x := r.Totals
		d := strings.Replace(time.Duration(x.MaxDelayUS*int64(time.Microsecond)).String(), "µs", "us", 1)
		rows = append(rows, fmt.Sprintf("%s admitted %d denied %d delayed %d errors %d max delay %s", r.Algorithm, x.Admitted, x.Denied, x.Delayed, x.Errors, d))
	}
	return rows
}

func postSim(t *testing.T, srv *httptest.Server, req SimRequest) (*SimResult, int, string) {
	t.Helper()
	b, _ := json.Marshal(req)
	resp, err := http.Post(srv.URL+"/console/api/sim", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return nil, resp.StatusCode, string(body)
	}
	var res SimResult
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatal(err)
	}
	return &res, 200, string(body)
}

// writeTrace writes arrivals as a replay trace and returns its path.
func writeTrace(t *testing.T, arrivals []sim.Arrival) string {
	t.Helper()
	var b strings.Builder
	for _, a := range arrivals {
		fmt.Fprintf(&b, "{\"t_us\": %d, \"key\": %q, \"cost\": %d}\n", a.T, a.Key, a.Cost)
	}
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func randomTrace(r *rand.Rand, n int) []sim.Arrival {
	var out []sim.Arrival
	t := sim.DefaultStart + r.Int64N(1_000_000)
	for range n {
		t += r.Int64N(40_000)
		out = append(out, sim.Arrival{T: t, Key: fmt.Sprintf("user:%d", r.IntN(3)), Cost: r.Int64N(4)})
	}
	return out
}

// TestSimMatchesCLI runs the playground and `sluice sim` (the command built) on the same
// inputs: their totals are equal, row by row.
func TestSimMatchesCLI(t *testing.T) {
	seed := testenv.SeedOr(t, 7)
	r := rand.New(rand.NewPCG(seed, 2))
	_, _, srv := newTestServer(t, testView())
	burst := func(b int64) *int64 { return &b }
	spread := func(counts []int, tick time.Duration) []sim.Arrival {
		return sim.Spread(counts, sim.DefaultStart, tick, "sim")
	}
	ramp := make([]int, 25)
	for i := range ramp {
		ramp[i] = (7*(i+1) + 24) / 25
	}
	steady := make([]int, 20)
	for i := range steady {
		steady[i] = 3
	}
	bursty := make([]int, 30)
	bursty[0] = 12
	for i := 1; i < 30; i++ {
		bursty[i] = 1
	}
	trace := randomTrace(r, 120)
	var traceText strings.Builder
	for _, a := range trace {
		fmt.Fprintf(&traceText, "{\"t_us\": %d, \"key\": %q, \"cost\": %d}\n", a.T, a.Key, a.Cost)
	}
	for _, tc := range []struct {
		name string
		req  SimRequest
		args []string
	}{
		{"default", SimRequest{}, nil},
		{"default with flags", SimRequest{Limit: "20/1s", Burst: burst(6), Tick: "50ms", Ticks: 40, Window: "300ms"},
			[]string{"--limit", "20/1s", "--burst", "6", "--tick", "50ms", "--ticks", "40", "--window", "300ms"}},
		{"a rule's limit", SimRequest{Rule: "edge.remote_address"}, []string{"--limit", "10/1s", "--burst", "20"}},
		{"steady", SimRequest{Shape: ShapeSteady, Rate: 3, Ticks: 20},
			[]string{"--trace", writeTrace(t, spread(steady, 100*time.Millisecond)), "--ticks", "20"}},
		{"burst", SimRequest{Shape: ShapeBurst, Size: 12, Rate: 1},
			[]string{"--trace", writeTrace(t, spread(bursty, 100*time.Millisecond)), "--ticks", "30"}},
		{"ramp", SimRequest{Shape: ShapeRamp, Rate: 7, Ticks: 25, Limit: "5/100ms", Burst: burst(3), Tick: "20ms"},
			[]string{"--trace", writeTrace(t, spread(ramp, 20*time.Millisecond)), "--ticks", "25", "--limit", "5/100ms", "--burst", "3", "--tick", "20ms"}},
		{"pasted trace", SimRequest{Shape: ShapeTrace, Trace: traceText.String(), Limit: "20/1s", Burst: burst(2), Window: "250ms"},
			[]string{"--trace", writeTrace(t, trace), "--limit", "20/1s", "--burst", "2", "--window", "250ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, code, body := postSim(t, srv, tc.req)
			if code != 200 {
				t.Fatalf("POST /console/api/sim: %d %s", code, body)
			}
			got, want := consoleTotals(res), cliTotals(t, tc.args...)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("the playground's totals\n%s\n`sluice sim %s`'s\n%s", strings.Join(got, "\n"), strings.Join(tc.args, " "), strings.Join(want, "\n"))
			}
			if !strings.Contains(res.SVG, `<g class="algorithm"`) || len(res.Arrivals) != res.Ticks {
				t.Errorf("no figure, or %d arrivals for %d ticks", len(res.Arrivals), res.Ticks)
			}
		})
	}
}

func TestSimAlgorithmsAndErrors(t *testing.T) {
	_, _, srv := newTestServer(t, testView())
	res, code, body := postSim(t, srv, SimRequest{Algorithms: []string{"gcra", "sliding-log"}})
	if code != 200 || len(res.Rows) != 2 || res.Rows[0].Algorithm != "gcra" || res.Rows[1].Algorithm != "sliding-log" ||
		strings.Count(res.SVG, `<g class="algorithm"`) != 2 {
		t.Errorf("two algorithms: %d %s", code, body)
	}
	neg := int64(-1)
	for _, tc := range []struct {
		req  SimRequest
		want string
	}{
		{SimRequest{Limit: "ten per second"}, "limit"},
		{SimRequest{Burst: &neg}, "negative"},
		{SimRequest{Tick: "soon"}, "tick"},
		{SimRequest{Tick: "1ns"}, "microseconds"},
		{SimRequest{Ticks: -1}, "ticks"},
		{SimRequest{Window: "-1s"}, "negative"},
		{SimRequest{Shape: "sine"}, "shape"},
		{SimRequest{Shape: ShapeSteady}, "rate"},
		{SimRequest{Shape: ShapeSteady, Rate: 100_000, Ticks: maxTicks}, "over the service's limit run-arrivals"},
		{SimRequest{Shape: ShapeTrace}, "no requests"},
		{SimRequest{Shape: ShapeTrace, Trace: "{\"t_us\": 1, \"key\": \"a\"}\nnot json\n"}, "line 2"},
		{SimRequest{Shape: ShapeTrace, Trace: `{"t_us": 1764000000000000, "parts": [{"key": "a", "limit": "1/1s"}]}`}, "composite"},
		{SimRequest{Rule: "nope"}, "no loaded rule"},
		{SimRequest{Rule: "internal.health"}, "unlimited"},
		{SimRequest{Algorithms: []string{"magic"}}, "magic"},
	} {
		_, code, body := postSim(t, srv, tc.req)
		if code != 400 || !strings.Contains(body, tc.want) || !strings.Contains(body, `"error"`) {
			t.Errorf("%+v: %d %s, want 400 and %q", tc.req, code, body, tc.want)
		}
	}
	resp, err := http.Post(srv.URL+"/console/api/sim", "application/json", strings.NewReader(`{"limit": 5`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("bad JSON: %d", resp.StatusCode)
	}
}

// TestPlaygroundForm posts the page's form as a browser without a script
// does: the page comes back with the totals and the figure.
func TestPlaygroundForm(t *testing.T) {
	_, _, srv := newTestServer(t, testView())
	form := url.Values{"rule": {""}, "limit": {"10/1s"}, "burst": {""}, "window": {""}, "tick": {"100ms"}, "ticks": {""},
		"shape": {"default"}, "rate": {"2"}, "size": {"8"}, "trace": {""}, "algorithms": {"token-bucket", "leaky-bucket"}}
	resp, err := http.PostForm(srv.URL+"/console/playground", form)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := cliTotals(t)
	for _, s := range []string{
		`<tr data-algorithm="token-bucket">`, `<tr data-algorithm="leaky-bucket">`, `<svg xmlns="http://www.w3.org/2000/svg"`,
		`<input type="checkbox" name="algorithms" value="leaky-bucket" checked>`,
		`<input type="checkbox" name="algorithms" value="gcra">`,
	} {
		if !strings.Contains(string(body), s) {
			t.Errorf("the page lacks %q", s)
		}
	}
	if resp.StatusCode != 200 || strings.Contains(string(body), `<tr data-algorithm="gcra">`) {
		t.Errorf("%d, or rows not asked for", resp.StatusCode)
	}
	if !strings.Contains(want[0], "token-bucket admitted ") {
		t.Fatal(want)
	}
	adm := strings.Fields(want[0])[2]
	if !strings.Contains(string(body), `<td class="num" data-k="admitted" data-label="Admitted">`+adm+`</td>`) {
		t.Errorf("the page lacks token-bucket's %s admitted", adm)
	}
	form.Set("ticks", "many")
	resp, err = http.PostForm(srv.URL+"/console/playground", form)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(body), `id="sim-error"`) || !strings.Contains(string(body), `value="many"`) {
		t.Errorf("bad ticks: %d", resp.StatusCode)
	}
}

// The page stays small whatever the configuration: its rules table, the
// live view's rows of rules not seen yet and the playground's choices list
// the first maxPageRules rules, and the table says how many there are and
// where all of them are. (10,000 rules once made a 12 MB page.)
func TestPageBounded(t *testing.T) {
	var v ConfigView
	for i := range 10_000 {
		v.Rules = append(v.Rules, Rule{Domain: "d", Path: fmt.Sprintf("k%d", i), Name: fmt.Sprintf("d.k%d", i), Algorithm: "aligned-window", Rate: 1, Period: time.Second, Burst: 1, Unit: "second"})
	}
	c, _, srv := newTestServer(t, v)
	_, _, body := get(t, srv.URL+"/")
	if len(body) > 1<<20 {
		t.Errorf("a page of %d bytes for 10,000 rules, want at most 1 MiB", len(body))
	}
	if n := strings.Count(body, `<td data-k="path" data-label="Descriptor path">`); n != maxPageRules {
		t.Errorf("%d rows in the rules table, want %d", n, maxPageRules)
	}
	if want := fmt.Sprintf(`10000 rules loaded; the first %d are listed`, maxPageRules); !strings.Contains(body, want) || !strings.Contains(body, `<a href="/console/api/config">`) {
		t.Errorf("the rules table does not say %q and where the rest are", want)
	}
	if n := len(c.Live(0).Rules); n > maxPageRules {
		t.Errorf("the live report lists %d rules, none seen: want at most %d", n, maxPageRules)
	}
	var all configJSON
	_, _, js := get(t, srv.URL+"/console/api/config")
	if err := json.Unmarshal([]byte(js), &all); err != nil || len(all.Rules) != 10_000 {
		t.Errorf("/console/api/config: %d rules, %v; want every one", len(all.Rules), err)
	}
}
