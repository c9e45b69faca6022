package console

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cmd/sluice/internal/sim"
	"github.com/sluice-go/sluice/internal/algo"
)

func postSteps(t *testing.T, srv *httptest.Server, req StepsRequest) (*StepsResult, int, string) {
	t.Helper()
	b, _ := json.Marshal(req)
	resp, err := http.Post(srv.URL+"/console/api/steps", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return nil, resp.StatusCode, string(body)
	}
	var res StepsResult
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatal(err)
	}
	return &res, 200, string(body)
}

// wantWalk is sim.NewWalk's walk, as JSON, for the same input.
func wantWalk(t *testing.T, p algo.Params, start int64, reqs []sim.Arrival) string {
	t.Helper()
	w, err := sim.NewWalk(p, start, reqs, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(w)
	return string(b)
}

// TestStepsAPI: the walk the console answers is sim.NewWalk's for the same
// limit and requests, whichever way they are given.
func TestStepsAPI(t *testing.T) {
	_, _, srv := newTestServer(t, testView())
	typed, _ := sim.ParseRequests(sim.DefaultWalk, sim.DefaultStart, "sim", 100)
	steady := sim.Spread([]int{3, 3, 3, 3}, sim.DefaultStart, defaultTick, "sim")
	for _, c := range []struct {
		name  string
		req   StepsRequest
		p     algo.Params
		start int64
		reqs  []sim.Arrival
		burst int64
	}{
		{"the defaults", StepsRequest{}, algo.Params{Kind: algo.TokenBucket, Rate: 10, Period: 1e6, Burst: 10}, sim.DefaultStart, typed, 10},
		{"a rule, its algorithm", StepsRequest{Rule: "edge.api.user", Requests: "0s x6, 1s"},
			algo.Params{Kind: algo.GCRA, Rate: 100, Period: 60e6, Burst: 5}, sim.DefaultStart, mustParse(t, "0s x6, 1s"), 5},
		{"a rule, another algorithm", StepsRequest{Rule: "edge.remote_address", Algorithm: "sliding-log", Requests: "0s x12"},
			algo.Params{Kind: algo.SlidingLog, Rate: 10, Period: 1e6}, sim.DefaultStart, mustParse(t, "0s x12"), 20},
		{"a shape", StepsRequest{Algorithm: "leaky-bucket", Limit: "5/1s", Burst: ptr(int64(2)), Shape: ShapeSteady, Rate: 3, Ticks: 4},
			algo.Params{Kind: algo.LeakyBucket, Rate: 5, Period: 1e6, Burst: 2}, sim.DefaultStart, steady, 2},
	} {
		res, code, body := postSteps(t, srv, c.req)
		if code != 200 {
			t.Fatalf("%s: %d %s", c.name, code, body)
		}
		got, _ := json.Marshal(res.Walk)
		if want := wantWalk(t, c.p, c.start, c.reqs); string(got) != want {
			t.Errorf("%s: the walk\n%s\nsim.NewWalk's\n%s", c.name, got, want)
		}
		if res.Burst != c.burst {
			t.Errorf("%s: burst %d, want %d", c.name, res.Burst, c.burst)
		}
	}

	// A trace: its first key, from its first time.
	tr := "{\"t_us\": 1764000000000000, \"key\": \"a\"}\n{\"t_us\": 1764000000000001, \"key\": \"b\"}\n{\"t_us\": 1764000000500000, \"key\": \"a\", \"cost\": 3}\n"
	res, code, body := postSteps(t, srv, StepsRequest{Algorithm: "fixed-window", Limit: "2/1s", Shape: ShapeTrace, Trace: tr})
	if code != 200 || res.LeftOut != 1 || res.Key != "a" || len(res.Steps) != 2 || res.Steps[1].At != "t+500ms" || res.Steps[1].Error == "" {
		t.Errorf("a trace: %d %s", code, body)
	}
}

// TestStepsCharge: a walk charges (charge=N, a trace's "charge" lines)
// under a rule's debt allowance or a typed one, and shows the debt.
func TestStepsCharge(t *testing.T) {
	view := testView()
	view.Rules = append(view.Rules, Rule{Domain: "llm", Path: "api_key", Name: "llm.tokens", Algorithm: "token-bucket", Rate: 10, Period: time.Second, Burst: 2, Debt: 3, Charge: true})
	_, _, srv := newTestServer(t, view)
	for _, c := range []struct {
		name string
		req  StepsRequest
		p    algo.Params
		reqs []sim.Arrival
	}{
		{"a rule's debt", StepsRequest{Rule: "llm.tokens", Requests: "0ms charge=4, 0ms"},
			algo.Params{Kind: algo.TokenBucket, Rate: 10, Period: 1e6, Burst: 2, Debt: 3}, mustParse(t, "0ms charge=4, 0ms")},
		{"a typed debt", StepsRequest{Algorithm: "fixed-window", Limit: "2/1s debt 5", Requests: "0ms charge=6, 1s"},
			algo.Params{Kind: algo.FixedWindow, Rate: 2, Period: 1e6, Debt: 5}, mustParse(t, "0ms charge=6, 1s")},
		{"a trace's charge", StepsRequest{Algorithm: "gcra", Limit: "10/1s debt 3", Burst: ptr(int64(2)), Shape: ShapeTrace,
			Trace: `{"t_us": 1764000000000000, "key": "a", "charge": 5}` + "\n" + `{"t_us": 1764000000100000, "key": "a"}`},
			algo.Params{Kind: algo.GCRA, Rate: 10, Period: 1e6, Burst: 2, Debt: 3},
			[]sim.Arrival{{T: 1764000000000000, Key: "a", Cost: 5, Charge: true}, {T: 1764000000100000, Key: "a", Cost: 1}}},
	} {
		res, code, body := postSteps(t, srv, c.req)
		if code != 200 {
			t.Fatalf("%s: %d %s", c.name, code, body)
		}
		got, _ := json.Marshal(res.Walk)
		if want := wantWalk(t, c.p, c.reqs[0].T, c.reqs); string(got) != want {
			t.Errorf("%s: the walk\n%s\nsim.NewWalk's\n%s", c.name, got, want)
		}
		if !res.Steps[0].Charge || !strings.HasPrefix(res.Steps[0].Result[1].Value, "-") {
			t.Errorf("%s: step 1 %+v, want a charge that leaves a debt", c.name, res.Steps[0])
		}
	}
	// The page shows the charge and the debt it leaves.
	resp, err := http.Post(srv.URL+"/console/steps", "application/x-www-form-urlencoded", strings.NewReader(url.Values{"rule": {"llm.tokens"}, "requests": {"0ms charge=4, 0ms"}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	page, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`<td class="num" data-label="Cost">charge 4</td>`,
		`<td class="outcome-charged" data-label="Decision">charged</td><td class="num" data-label="Remaining">-2</td>`,
		`<li>tokens → -2 (in debt: owes 2)</li>`,
		`llm.tokens (10/1s token-bucket, burst 2, debt 3, charged)`,
	} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

func mustParse(t *testing.T, s string) []sim.Arrival {
	t.Helper()
	r, err := sim.ParseRequests(s, sim.DefaultStart, "sim", 1000)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestStepsErrors: a bad walk is the client's error (4xx), with a message
// that says what to fix; a walk is bounded.
func TestStepsErrors(t *testing.T) {
	_, _, srv := newTestServer(t, testView())
	for _, c := range []struct {
		req  StepsRequest
		want string
	}{
		{StepsRequest{Algorithm: "magic"}, "magic"},
		{StepsRequest{Rule: "nope"}, "no loaded rule"},
		{StepsRequest{Rule: "internal.health"}, "unlimited"},
		{StepsRequest{Limit: "ten"}, "limit \\\"ten\\\""},
		{StepsRequest{Algorithm: "gcra", Burst: ptr(int64(0))}, "burst"},
		{StepsRequest{Requests: "0ms x1001"}, "the walk's requests: over the service's limit walk-requests of 1000 (--limit walk-requests=N raises it)"},
		{StepsRequest{Requests: "1s, 0s"}, "time order"},
		{StepsRequest{Shape: ShapeSteady, Rate: 100, Ticks: 11}, "1100, over the service's limit walk-requests of 1000"},
		{StepsRequest{Shape: "zigzag"}, "zigzag"},
		{StepsRequest{Shape: ShapeTrace, Trace: "{\"t_us\": 5, \"key\": \"a\"}\n{\"t_us\": 4, \"key\": \"a\"}\n"}, "time order"},
		{StepsRequest{Shape: ShapeSteady, Rate: 1, Tick: "1ns"}, "tick"},
	} {
		_, code, body := postSteps(t, srv, c.req)
		if code != http.StatusBadRequest || !strings.Contains(body, c.want) {
			t.Errorf("%+v: %d %s, want 400 with %q", c.req, code, body, c.want)
		}
	}
	resp, err := http.Post(srv.URL+"/console/api/steps", "text/plain", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain: %d", resp.StatusCode)
	}
	big := `{"requests": "` + strings.Repeat("0ms, ", maxBodyBytes/5) + `"}`
	resp, err = http.Post(srv.URL+"/console/api/steps", "application/json", strings.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over the bound: %d", resp.StatusCode)
	}
}

// TestStepsForm: the form posts to /console/steps and the page comes back
// with every step in its table, and the fields as typed.
func TestStepsForm(t *testing.T) {
	_, _, srv := newTestServer(t, testView())
	post := func(f url.Values) (int, string) {
		resp, err := http.PostForm(srv.URL+"/console/steps", f)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, page := post(url.Values{"algorithm": {"aligned-window"}, "limit": {"2/1s"}, "shape": {"typed"}, "requests": {"0ms x3, 1s"}})
	if code != 200 {
		t.Fatalf("%d %s", code, page)
	}
	for _, s := range []string{`<tr data-step="4">`, `<td class="outcome-denied" data-label="Decision">denied</td>`, `value="0ms x3, 1s"`, `<option value="aligned-window" selected>`, "count &#43; cost = 2 &#43; 1 = 3 &gt; rate 2"} {
		if !strings.Contains(page, s) {
			t.Errorf("the page lacks %q", s)
		}
	}
	if n := strings.Count(page, "<tr data-step="); n != 4 {
		t.Errorf("%d steps in the table, want 4", n)
	}
	code, page = post(url.Values{"requests": {"soon"}})
	if code != http.StatusBadRequest || !strings.Contains(page, `id="steps-error"`) || !strings.Contains(page, `value="soon"`) {
		t.Errorf("a bad walk: %d", code)
	}
	// The form's URL is the step-through's: GET shows the page (it was 405).
	if code, _, page := get(t, srv.URL+"/console/steps"); code != 200 || !strings.Contains(page, `<form id="steps-form"`) {
		t.Errorf("GET /console/steps: %d", code)
	}
}
