package console

import (
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
)

// The default caps of a run, as the tests send them.
var (
	maxTicks     = int(limits.RunTicks.Default)
	maxArrivals  = int(limits.RunArrivals.Default)
	maxBodyBytes = int(limits.RunBodyBytes.Default)
)

// capsConsole is a console with the caps lt (0s: the defaults) whose gate
// does not rest between runs, and a way to post a run to its handler.
func capsConsole(t *testing.T, lt limits.Table) func(path, ctype, body string) (int, string) {
	t.Helper()
	c, _ := newTestConsole(t, Options{Config: testView, Limits: lt})
	c.runs.sleep = func(time.Duration) {}
	h := c.Handler()
	return func(path, ctype, body string) (int, string) {
		r := httptest.NewRequest("POST", path, strings.NewReader(body))
		r.Header.Set("Content-Type", ctype)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
}

// wantCap checks that an answer refuses an input over row's cap, naming
// the row and the flag that raises it.
func wantCap(t *testing.T, what string, code int, body string, row *limits.Row, status int) {
	t.Helper()
	body = html.UnescapeString(body)
	if code != status || !strings.Contains(body, "over the service's limit "+row.Name+" of ") || !strings.Contains(body, row.Flag()+" raises it") {
		t.Errorf("%s: %d %.400s\nwant %d naming %s and %s", what, code, body, status, row.Name, row.Flag())
	}
}

// runError finds a run's error on a page.
var runError = regexp.MustCompile(`id="(?:steps|sim)-error"[^>]*>([^<]*)<`)

// errorOf is the error of a run a page or a JSON answer shows, or the
// answer's start.
func errorOf(body string) string {
	if m := runError.FindStringSubmatch(body); m != nil {
		return html.UnescapeString(m[1])
	}
	return body[:min(len(body), 300)]
}

func jsonBody(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// redTeamSteps is the red team's walk: a sliding log of 1000/2h and 1,000
// requests at distinct offsets, all within the window, so that the log
// grows to 1,000 entries.
func redTeamSteps() StepsRequest {
	offs := make([]string, 1000)
	for i := range offs {
		offs[i] = fmt.Sprintf("%dms", i*7193)
	}
	return StepsRequest{Algorithm: "sliding-log", Limit: "1000/2h", Requests: strings.Join(offs, ", ")}
}

func stepsFormBody(req StepsRequest) string {
	return url.Values{"algorithm": {req.Algorithm}, "limit": {req.Limit}, "shape": {ShapeTyped}, "requests": {req.Requests}}.Encode()
}

// countWriter is a ResponseWriter that counts what is written.
type countWriter struct {
	h    http.Header
	n    int
	code int
}

func (c *countWriter) Header() http.Header         { return c.h }
func (c *countWriter) Write(b []byte) (int, error) { c.n += len(b); return len(b), nil }
func (c *countWriter) WriteHeader(code int)        { c.code = code }

// TestStepsAnswerBounded: the red team's walk (a sliding log of 1000/2h,
// 1,000 distinct offsets: a 11 KB body) answered 18.7 MB of JSON and 23.4
// MB of HTML, allocating 206 and 255 MB. A sliding log's state is now
// summarised past a few entries and an answer is at most answer-bytes: the
// JSON is the whole walk, under 1 MiB; the page, which shows each step's
// state, arithmetic and result in markup, would be over, and is refused
// with the cap's error before it grows past it. Each answer allocates a
// small multiple of the cap (docs/performance.md).
func TestStepsAnswerBounded(t *testing.T) {
	c, _ := newTestConsole(t, Options{Config: testView})
	c.runs.sleep = func(time.Duration) {}
	h := c.Handler()
	capBytes := limits.AnswerBytes.Default
	req := redTeamSteps()
	for _, tc := range []struct{ path, ctype, body string }{
		{"/console/api/steps", "application/json", jsonBody(req)},
		{"/console/steps", "application/x-www-form-urlencoded", stepsFormBody(req)},
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		w := &countWriter{h: http.Header{}}
		r := httptest.NewRequest("POST", tc.path, strings.NewReader(tc.body))
		r.Header.Set("Content-Type", tc.ctype)
		h.ServeHTTP(w, r)
		runtime.ReadMemStats(&after)
		alloc := int64(after.TotalAlloc - before.TotalAlloc)
		t.Logf("%s: a %d-byte body answered %d: %d bytes, %d allocated", tc.path, len(tc.body), w.code, w.n, alloc)
		if int64(w.n) > capBytes {
			t.Errorf("%s: a %d-byte answer, over %d", tc.path, w.n, capBytes)
		}
		if !raceEnabled && alloc > allocPerAnswer*capBytes { // the race detector allocates for itself
			t.Errorf("%s: %d bytes allocated for one answer, want at most %d × the cap", tc.path, alloc, allocPerAnswer)
		}
	}
	// The JSON is the whole walk.
	code, body := capsConsole(t, limits.Table{})("/console/api/steps", "application/json", jsonBody(req))
	var res StepsResult
	if err := json.Unmarshal([]byte(body), &res); code != 200 || err != nil || len(res.Steps) != 1000 {
		t.Fatalf("the JSON: %d, %v, %d steps", code, err, len(res.Steps))
	}
	if log := res.Steps[999].Before[0]; log.Value != "t+0s ×1, … 997 more …, t+1h59m38.614s ×1" {
		t.Errorf("the last step's log before it: %q", log.Value)
	}
	// The page is refused, the cap named, the form kept.
	code, body = capsConsole(t, limits.Table{})("/console/steps", "application/x-www-form-urlencoded", stepsFormBody(req))
	wantCap(t, "the page", code, body, limits.AnswerBytes, http.StatusBadRequest)
	if !strings.Contains(body, `id="steps-error"`) || strings.Contains(body, `<tr data-step=`) {
		t.Errorf("the page over the cap: want the error in the form's place and no steps")
	}
}

// allocPerAnswer bounds what one answer allocates, in multiples of the
// answer-bytes cap: the walk's text, formatted (about 4 times what it
// keeps), then its encoding.
const allocPerAnswer = 12

// TestWalkRequestsCap: a walk of walk-requests + 1 requests, typed or from
// a shape, is refused before it is walked; one of walk-requests is walked.
func TestWalkRequestsCap(t *testing.T) {
	post := capsConsole(t, limits.Table{})
	n := limits.WalkRequests.Default
	code, body := post("/console/api/steps", "application/json", jsonBody(StepsRequest{Requests: fmt.Sprintf("0ms x%d", n+1)}))
	wantCap(t, "typed", code, body, limits.WalkRequests, http.StatusBadRequest)
	code, body = post("/console/api/steps", "application/json", jsonBody(StepsRequest{Shape: ShapeSteady, Rate: int(n+1) / 7, Ticks: 7}))
	wantCap(t, "a shape", code, body, limits.WalkRequests, http.StatusBadRequest)
	code, body = post("/console/steps", "application/x-www-form-urlencoded", url.Values{"requests": {fmt.Sprintf("0ms x%d", n+1)}}.Encode())
	wantCap(t, "the form", code, body, limits.WalkRequests, http.StatusBadRequest)
	if code, body := post("/console/api/steps", "application/json", jsonBody(StepsRequest{Requests: fmt.Sprintf("0ms x%d", n)})); code != 200 {
		t.Errorf("%d requests: %d %.300s", n, code, body)
	}
	// Raised or lowered, the cap is the operator's.
	post = capsConsole(t, limits.Table{WalkRequests: 5})
	code, body = post("/console/api/steps", "application/json", jsonBody(StepsRequest{Requests: "0ms x6"}))
	wantCap(t, "6 of 5", code, body, limits.WalkRequests, http.StatusBadRequest)
	if code, _ := post("/console/api/steps", "application/json", jsonBody(StepsRequest{Requests: "0ms x5"})); code != 200 {
		t.Errorf("5 of 5: %d", code)
	}
}

// TestAnswerBytesCap: an answer of answer-bytes + 1 bytes, JSON or a page,
// is refused with the cap's error; one of answer-bytes is answered.
func TestAnswerBytesCap(t *testing.T) {
	req := StepsRequest{Algorithm: "sliding-log", Limit: "5/1s", Requests: "0ms x3, 100ms, 200ms x2, 1s"}
	for _, tc := range []struct{ path, ctype, body string }{
		{"/console/api/steps", "application/json", jsonBody(req)},
		{"/console/steps", "application/x-www-form-urlencoded", stepsFormBody(req)},
		{"/console/api/sim", "application/json", jsonBody(SimRequest{Ticks: 20})},
		{"/console/playground", "application/json", jsonBody(SimRequest{Ticks: 20})},
	} {
		code, body := capsConsole(t, limits.Table{})(tc.path, tc.ctype, tc.body)
		if code != 200 {
			t.Fatalf("%s: %d %.300s", tc.path, code, body)
		}
		size := int64(len(body))
		code, body = capsConsole(t, limits.Table{AnswerBytes: size - 1})(tc.path, tc.ctype, tc.body)
		wantCap(t, tc.path+" one byte over", code, body, limits.AnswerBytes, http.StatusBadRequest)
		if int64(len(body)) >= size {
			t.Errorf("%s: the refusal is %d bytes, the answer %d", tc.path, len(body), size)
		}
		if code, body := capsConsole(t, limits.Table{AnswerBytes: size})(tc.path, tc.ctype, tc.body); code != 200 || int64(len(body)) != size {
			t.Errorf("%s at the cap: %d, %d bytes, want 200 and %d", tc.path, code, len(body), size)
		}
	}
	// A page that would show the form as typed over the cap shows the
	// form's defaults, and why.
	long := url.Values{"requests": {strings.Repeat("0ms, ", 12_000) + "0ms"}}.Encode()
	code, body := capsConsole(t, limits.Table{AnswerBytes: 50_000})("/console/steps", "application/x-www-form-urlencoded", long)
	wantCap(t, "a steps form over the cap", code, body, limits.AnswerBytes, http.StatusBadRequest)
	if e := errorOf(body); !strings.HasPrefix(e, "the walk's requests: over the service's limit walk-requests of 1000") || strings.Contains(body, "0ms, 0ms, 0ms") {
		t.Errorf("a steps form over the cap: %s", e)
	}
	code, body = capsConsole(t, limits.Table{AnswerBytes: 50_000})("/console/playground", "application/x-www-form-urlencoded", "ticks=1&trace="+url.QueryEscape(strings.Repeat("x", 60_000)))
	wantCap(t, "a playground form over the cap", code, body, limits.AnswerBytes, http.StatusBadRequest)
	if strings.Contains(body, "xxxxxxxx") {
		t.Errorf("a playground form over the cap is shown again")
	}

	// A walk whose text alone is over the cap stops being walked there.
	code, body = capsConsole(t, limits.Table{AnswerBytes: 4096})("/console/api/steps", "application/json", jsonBody(redTeamSteps()))
	wantCap(t, "the red team's walk under 4KiB", code, body, limits.AnswerBytes, http.StatusBadRequest)
	if !strings.Contains(body, "the walk of 1000 requests") {
		t.Errorf("the walk's refusal: %s", body)
	}
}

// TestRunTicksCap: a run of run-ticks + 1 ticks, the playground's or a
// walk's shape, is refused; one of run-ticks runs.
func TestRunTicksCap(t *testing.T) {
	post := capsConsole(t, limits.Table{})
	n := maxTicks
	code, body := post("/console/api/sim", "application/json", jsonBody(SimRequest{Ticks: n + 1}))
	wantCap(t, "the playground", code, body, limits.RunTicks, http.StatusBadRequest)
	code, body = post("/console/api/steps", "application/json", jsonBody(StepsRequest{Shape: ShapeSteady, Rate: 1, Ticks: n + 1}))
	wantCap(t, "a walk", code, body, limits.RunTicks, http.StatusBadRequest)
	code, body = post("/console/playground", "application/x-www-form-urlencoded", url.Values{"ticks": {fmt.Sprint(n + 1)}}.Encode())
	wantCap(t, "the form", code, body, limits.RunTicks, http.StatusBadRequest)
	if code, body := post("/console/api/sim", "application/json", jsonBody(SimRequest{Ticks: n})); code != 200 {
		t.Errorf("%d ticks: %d %.300s", n, code, body)
	}
}

// TestRunArrivalsCap: a shape or a trace of run-arrivals + 1 arrivals is
// refused; one of run-arrivals runs.
func TestRunArrivalsCap(t *testing.T) {
	post := capsConsole(t, limits.Table{})
	n := maxArrivals
	code, body := post("/console/api/sim", "application/json", jsonBody(SimRequest{Shape: ShapeBurst, Size: n + 1, Ticks: 1}))
	wantCap(t, "a shape", code, body, limits.RunArrivals, http.StatusBadRequest)
	line := `{"t_us": 1764000000000000, "key": "a"}` + "\n"
	code, body = post("/console/api/sim", "application/json", jsonBody(SimRequest{Shape: ShapeTrace, Trace: strings.Repeat(line, n+1)}))
	wantCap(t, "a trace", code, body, limits.RunArrivals, http.StatusBadRequest)
	for _, req := range []SimRequest{{Shape: ShapeBurst, Size: n, Ticks: 1}, {Shape: ShapeTrace, Trace: strings.Repeat(line, n)}} {
		if code, body := post("/console/api/sim", "application/json", jsonBody(req)); code != 200 {
			t.Errorf("%d arrivals, %s: %d %.300s", n, req.Shape, code, body)
		}
	}
}

// TestRunBodyBytesCap: a run's body of run-body-bytes + 1 bytes is refused
// (413), JSON or form; one of run-body-bytes is read.
func TestRunBodyBytesCap(t *testing.T) {
	post := capsConsole(t, limits.Table{})
	n := maxBodyBytes
	pad := func(prefix, suffix string, size int) string {
		return prefix + strings.Repeat(" ", size-len(prefix)-len(suffix)) + suffix
	}
	for _, tc := range []struct{ path, ctype, prefix, suffix string }{
		{"/console/api/sim", "application/json", `{"ticks": 5`, `}`},
		{"/console/api/steps", "application/json", `{"requests": "0ms"`, `}`},
		{"/console/playground", "application/x-www-form-urlencoded", "ticks=5&pad=", ""}, // a field the page does not show again
	} {
		code, body := post(tc.path, tc.ctype, pad(tc.prefix, tc.suffix, n+1))
		wantCap(t, tc.path, code, body, limits.RunBodyBytes, http.StatusRequestEntityTooLarge)
		if code, body := post(tc.path, tc.ctype, pad(tc.prefix, tc.suffix, n)); code != 200 {
			t.Errorf("%s, a body of %d bytes: %d %.300s", tc.path, n, code, errorOf(body))
		}
	}
}
