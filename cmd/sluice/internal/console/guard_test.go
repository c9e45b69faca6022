package console

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
	"github.com/sluice-go/sluice/cmd/sluice/internal/sim"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// doPost posts body to path with the headers given as name, value pairs.
func doPost(t *testing.T, base, path, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	return testenv.Do(t, nil, "POST", base+path, body, hdr...)
}

const formType = "application/x-www-form-urlencoded"

// A page of another site cannot run the playground through a visitor's
// browser (the red team's no-cors fetch, a cross-site form); the console's
// own page and programs can.
func TestSimCrossSite(t *testing.T) {
	_, _, srv := newTestServer(t, testView())
	form := url.Values{"limit": {"10/1s"}, "shape": {"default"}}.Encode()
	for _, tc := range []struct {
		path, body string
		hdr        []string
		code       int
	}{
		{"/console/api/sim", `{"ticks": 10}`, []string{"Origin", "https://evil.example", "Content-Type", "text/plain"}, 403},
		{"/console/api/sim", `{"ticks": 10}`, []string{"Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site", "Content-Type", "application/json"}, 403},
		{"/console/playground", form, []string{"Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site", "Content-Type", formType}, 403},
		{"/console/api/sim", `{"ticks": 10}`, []string{"Origin", srv.URL, "Sec-Fetch-Site", "same-origin", "Content-Type", "application/json"}, 200},
		{"/console/playground", form, []string{"Origin", srv.URL, "Sec-Fetch-Site", "same-origin", "Content-Type", formType}, 200},
		{"/console/api/sim", `{"ticks": 10}`, []string{"Content-Type", "application/json"}, 200},
	} {
		if resp, body := doPost(t, srv.URL, tc.path, tc.body, tc.hdr...); resp.StatusCode != tc.code {
			t.Errorf("%s %v: %d %.200s, want %d", tc.path, tc.hdr, resp.StatusCode, body, tc.code)
		}
	}
}

// A run must say what it is: JSON or the page's form. A JSON body sent
// without its type (or as text/plain) is refused with 415, not run as the
// default scenario.
func TestSimContentType(t *testing.T) {
	_, _, srv := newTestServer(t, testView())
	run := `{"limit": "20/1s", "ticks": 12}`
	for _, tc := range []struct {
		path, body, ctype string
		code              int
	}{
		{"/console/api/sim", run, "", 415},
		{"/console/api/sim", run, "text/plain", 415},
		{"/console/api/sim", run, "multipart/form-data; boundary=x", 415},
		{"/console/playground", run, "", 415},
		{"/console/api/sim", run, "application/json; charset=utf-8", 200},
		{"/console/api/sim", "limit=20/1s&ticks=12", formType, 200},
	} {
		var hdr []string
		if tc.ctype != "" {
			hdr = []string{"Content-Type", tc.ctype}
		}
		resp, body := doPost(t, srv.URL, tc.path, tc.body, hdr...)
		if resp.StatusCode != tc.code {
			t.Errorf("%s %q: %d %.200s, want %d", tc.path, tc.ctype, resp.StatusCode, body, tc.code)
			continue
		}
		switch {
		case tc.code == 415 && tc.path == "/console/api/sim" && !strings.Contains(body, `"error":"`) || tc.code == 415 && !strings.Contains(body, "application/json"):
			t.Errorf("%s %q: %s, want an error naming application/json", tc.path, tc.ctype, body)
		case tc.code == 200:
			var res SimResult
			if err := json.Unmarshal([]byte(body), &res); err != nil || res.Ticks != 12 || res.Limit != "20/1s" {
				t.Errorf("%s %q: ticks %d limit %q, want the run asked for", tc.path, tc.ctype, res.Ticks, res.Limit)
			}
		}
	}
}

// The red team's 58-byte request (ticks 10000) answered 23 MB after a second
// of CPU. A run's work (arrivals, the body read) and answer (ticks) are
// bounded: past the bounds the request is refused at once with a 4xx that
// says why; within them, the largest answers stay under maxAnswerBytes.
func TestSimBounded(t *testing.T) {
	_, _, srv := newTestServer(t, testView())
	maxAnswerBytes := int(limits.AnswerBytes.Default)
	for _, tc := range []struct {
		req  SimRequest
		want string
	}{
		{SimRequest{Ticks: 10_000}, "10000, over the service's limit run-ticks of 200 (--limit run-ticks=N raises it)"},
		{SimRequest{Ticks: maxTicks + 1}, "run-ticks of 200"},
		{SimRequest{Shape: ShapeSteady, Rate: maxArrivals/maxTicks + 1, Ticks: maxTicks}, "run-arrivals of 10000"},
		{SimRequest{Shape: ShapeBurst, Size: maxArrivals + 1, Ticks: 1}, "run-arrivals of 10000"},
		{SimRequest{Shape: ShapeTrace, Trace: strings.Repeat(`{"t_us": 1764000000000000, "key": "a"}`+"\n", maxArrivals+1)}, "the trace's requests: over the service's limit run-arrivals of 10000"},
		{SimRequest{Shape: ShapeTrace, Trace: strings.Repeat(`{"t_us": 1764000000000000, "key": "a", "cost": 1}`+strings.Repeat(" ", 200)+"\n", maxArrivals)}, "run-body-bytes of 1MiB"},
	} {
		start := time.Now()
		_, code, body := postSim(t, srv, tc.req)
		if code/100 != 4 || !strings.Contains(body, tc.want) || len(body) > 1000 {
			t.Errorf("ticks %d shape %q: %d %.300s, want a 4xx and %q", tc.req.Ticks, tc.req.Shape, code, body, tc.want)
		}
		// A trace is read to be counted: its refusal costs the read of up
		// to maxBodyBytes, which under -race is no longer "at once".
		if d := time.Since(start); tc.req.Shape != ShapeTrace && os.Getenv("SLUICE_TIMING") == "1" && d > 100*time.Millisecond {
			t.Errorf("ticks %d shape %q: refused after %v, want at once", tc.req.Ticks, tc.req.Shape, d)
		}
	}

	// The largest runs allowed: every tick of every row drawn, as many
	// arrivals as may be; in the trace, costs that every row admits,
	// delays, denies and errs on in every tick, some of 15 digits (more
	// could overflow the rows' sums).
	big := make([]int, maxTicks)
	for i := range big {
		big[i] = maxArrivals / maxTicks
	}
	var huge strings.Builder
	for i, a := range sim.Spread(big, sim.DefaultStart, 100*time.Millisecond, "k") {
		cost := int64(i%7 + 1)
		if i%5 == 0 {
			cost = 1e14 + int64(i)
		}
		fmt.Fprintf(&huge, "{\"t_us\": %d, \"key\": \"k%d\", \"cost\": %d}\n", a.T, i%3, cost)
	}
	for _, req := range []SimRequest{
		{Ticks: maxTicks},
		{Shape: ShapeSteady, Rate: maxArrivals / maxTicks, Ticks: maxTicks, Limit: "1000/1s"},
		{Shape: ShapeRamp, Rate: maxArrivals / maxTicks, Ticks: maxTicks, Limit: "7/1s", Window: "3s"},
		{Shape: ShapeTrace, Trace: huge.String(), Ticks: maxTicks, Limit: "500/1s", Burst: ptr(int64(40))},
	} {
		start := time.Now()
		res, code, body := postSim(t, srv, req)
		if code != 200 {
			t.Fatalf("shape %q: %d %.300s", req.Shape, code, body)
		}
		if len(body) > maxAnswerBytes || res.Requests > maxArrivals || res.Ticks > maxTicks {
			t.Errorf("shape %q: a %d-byte answer of %d requests over %d ticks; want at most %d bytes", req.Shape, len(body), res.Requests, res.Ticks, maxAnswerBytes)
		}
		t.Logf("shape %q: %d requests, %d ticks: %d bytes in %v", req.Shape, res.Requests, res.Ticks, len(body), time.Since(start))
	}
}

func ptr[T any](v T) *T { return &v }

// readCounter counts the reads of r.
type readCounter struct {
	r io.Reader
	n int
}

func (c *readCounter) Read(p []byte) (int, error) {
	c.n++
	return c.r.Read(p)
}

// One run at a time: while one holds the playground, others are answered
// 503 with Retry-After at once (the JSON API and the page's form alike),
// unread and never queued; once it is done the next runs. (TestGate has
// the rest between runs.)
func TestSimOneAtATime(t *testing.T) {
	c, _, srv := newTestServer(t, testView())
	c.runs.slot <- struct{}{} // a run in progress
	resp, body := doPost(t, srv.URL, "/console/api/sim", `{}`, "Content-Type", "application/json")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, `"error":"the playground is busy`) {
		t.Errorf("a second run: %d Retry-After %q %s; want 503, Retry-After and why", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	resp, body = doPost(t, srv.URL, "/console/playground", "shape=default", "Content-Type", formType)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, `id="sim-error"`) {
		t.Errorf("a second run from the form: %d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// Turned away unread: reading (and decoding) bodies is work too.
	rc := &readCounter{r: strings.NewReader(`{"ticks": 10}`)}
	req := httptest.NewRequest("POST", "/console/api/sim", rc)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	c.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable || rc.n != 0 {
		t.Errorf("a second run: %d, %d reads of its body; want 503 and none", rec.Code, rc.n)
	}
	<-c.runs.slot
	for range 3 {
		if _, code, body := postSim(t, srv, SimRequest{}); code != 200 {
			t.Errorf("after the run: %d %s", code, body)
		}
	}
}

// Left out, the burst is the rate, as everywhere else (sluice.ParseLimit):
// the playground's and `sluice sim`'s alike.
func TestSimBurstDefault(t *testing.T) {
	_, _, srv := newTestServer(t, testView())
	for _, tc := range []struct {
		req   SimRequest
		burst int64
	}{
		{SimRequest{}, 10},
		{SimRequest{Limit: "20/1s"}, 20},
		{SimRequest{Limit: "20/1s gcra burst 3"}, 3},
		{SimRequest{Limit: "20/1s", Burst: ptr(int64(6))}, 6},
		{SimRequest{Rule: "edge.remote_address"}, 20},
		{SimRequest{Rule: "edge.api.user", Burst: ptr(int64(2))}, 2},
	} {
		res, code, body := postSim(t, srv, tc.req)
		if code != 200 || res.Burst != tc.burst {
			t.Errorf("%+v: %d %.200s, want burst %d", tc.req, code, body, tc.burst)
		}
	}
	got, want := cliTotals(t, "--limit", "20/1s"), cliTotals(t, "--limit", "20/1s", "--burst", "20")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("sluice sim --limit 20/1s\n%s\nwith --burst 20\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	res, _, _ := postSim(t, srv, SimRequest{Limit: "20/1s"})
	if got := consoleTotals(res); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the playground's 20/1s\n%s\nsluice sim's\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
