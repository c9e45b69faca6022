package serve

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"strings"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/redisstore"
)

// chargeConfig has charge rules (sluice's extension): tokens per minute
// per API key in a bucket with a debt allowance, a window's worth per
// tenant with one, one in shadow mode, and a plain rule of requests.
const chargeConfig = `domain: llm
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 1000, algorithm: token-bucket, debt: 5000, charge: true, name: tokens}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 100, debt: 250, charge: true, name: tenant-tokens}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: gcra, debt: 100, charge: true}
  - key: requests
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: token-bucket, debt: 10}
  - key: sliding
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding-log}
`

func startCharge(t *testing.T, o Options) (*testServer, *fakeClock) {
	t.Helper()
	clock := &fakeClock{t: t0}
	o.Config = writeConfig(t, map[string]string{"llm.yaml": chargeConfig})
	return start(t, o, clock), clock
}

// onStores runs f on a server of chargeConfig over memory, then over Redis
// (a fresh one), where the call's parts are decided as redisstore has them
// (enforced and shadow parts in one script).
func onStores(t *testing.T, f func(t *testing.T, ts *testServer, clock *fakeClock)) {
	t.Run("memory", func(t *testing.T) {
		ts, clock := startCharge(t, Options{})
		f(t, ts, clock)
	})
	t.Run("redis", func(t *testing.T) {
		clock := &fakeClock{t: t0}
		rs, err := redisstore.New(redistest.Standalone(t).Client(), redisstore.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		ts := start(t, Options{Store: rs, Config: writeConfig(t, map[string]string{"llm.yaml": chargeConfig})}, clock)
		f(t, ts, clock)
	})
}

// metric is the line of /metrics that begins with series, "" when none.
func (ts *testServer) metric(t *testing.T, series string) string {
	t.Helper()
	_, body := httpGet(t, ts.base+"/metrics")
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, series+" ") {
			return l
		}
	}
	return ""
}

// A charge rule charges the call's hits whatever the answer: a call whose
// hits do not fit is over the limit and still charged, leaving the key in
// debt; a check of 0 hits is over exactly while the key is in debt, its
// duration_until_reset the wait until the debt is paid.
func TestChargeRuleBucket(t *testing.T) { onStores(t, testChargeRuleBucket) }

func testChargeRuleBucket(t *testing.T, ts *testServer, clock *fakeClock) {
	check := func(when string, code pb.RateLimitResponse_Code, remaining uint32, reset time.Duration) {
		t.Helper()
		r := ts.call(t, "llm", withHits(desc("api_key=k"), 0))
		st := r.Statuses[0]
		if r.OverallCode != code || st.Code != code || st.LimitRemaining != remaining || st.DurationUntilReset.AsDuration() != reset {
			t.Errorf("%s: check %s remaining %d reset %v, want %v %d %v", when, codesOf(r), st.LimitRemaining, st.DurationUntilReset.AsDuration(), code, remaining, reset)
		}
	}
	check("fresh", ok, 1000, 0)
	// 600 tokens fit: OK, 400 left.
	if r := ts.call(t, "llm", withHits(desc("api_key=k"), 600)); codesOf(r) != "OK: OK" || r.Statuses[0].LimitRemaining != 400 {
		t.Fatalf("600 tokens: %s remaining %d", codesOf(r), r.Statuses[0].LimitRemaining)
	}
	// 4,000 do not: over the limit, but charged: 3,600 owed.
	r := ts.call(t, "llm", withHits(desc("api_key=k"), 4000))
	if codesOf(r) != "OVER_LIMIT: OVER_LIMIT" || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("4000 tokens: %s remaining %d", codesOf(r), r.Statuses[0].LimitRemaining)
	}
	// Paid back at 1,000 a minute: 3.6 minutes.
	paid := 3*time.Minute + 36*time.Second
	check("in debt", over, 0, paid)
	clock.Set(t0.Add(paid - time.Microsecond))
	check("a µs before it is paid", over, 0, time.Microsecond)
	clock.Set(t0.Add(paid))
	check("paid", ok, 0, time.Minute) // empty: a minute to be full
	// Past the allowance the units are forgiven: over, and the key owes
	// 5,000 at most.
	if r := ts.call(t, "llm", withHits(desc("api_key=k"), 9000)); codesOf(r) != "OVER_LIMIT: OVER_LIMIT" {
		t.Fatalf("9000 tokens: %s", codesOf(r))
	}
	check("at the allowance", over, 0, 5*time.Minute)
	if l := ts.metric(t, `sluice_serve_units_charged_total{domain="llm",rule="tokens"}`); !strings.HasSuffix(l, " 13600") {
		t.Errorf("%q, want 13600 (600 + 4000 + 9000: the hits asked)", l)
	}
	if _, cfg := httpGet(t, ts.base+"/debug/config"); !strings.Contains(cfg, `llm: api_key name="tokens" 1000/minute limit="1000/1m0s token-bucket burst 1000 debt 5000" charge`) {
		t.Errorf("/debug/config does not show the charge rule:\n%s", cfg)
	}
}

// A window in debt is paid as the last window its debt reaches begins:
// 250 owed past a rate of 100 a minute is paid 3 windows on.
func TestChargeRuleWindow(t *testing.T) { onStores(t, testChargeRuleWindow) }

func testChargeRuleWindow(t *testing.T, ts *testServer, clock *fakeClock) {
	r := ts.call(t, "llm", withHits(desc("tenant=t"), 350))
	if codesOf(r) != "OVER_LIMIT: OVER_LIMIT" {
		t.Fatalf("350 units: %s", codesOf(r))
	}
	// t0 is mid-minute: the window ends in 30s; 250 owed fill the next two
	// windows and owe 50 in the third, which is paid when it begins.
	wait := 30*time.Second + 2*time.Minute
	if d := r.Statuses[0].DurationUntilReset.AsDuration(); d != wait {
		t.Errorf("duration_until_reset %v, want %v (the debt paid)", d, wait)
	}
	clock.Set(t0.Add(wait - time.Microsecond))
	if r := ts.call(t, "llm", withHits(desc("tenant=t"), 0)); codesOf(r) != "OVER_LIMIT: OVER_LIMIT" {
		t.Errorf("before it is paid: %s", codesOf(r))
	}
	clock.Set(t0.Add(wait))
	r = ts.call(t, "llm", withHits(desc("tenant=t"), 0))
	if codesOf(r) != "OK: OK" || r.Statuses[0].LimitRemaining != 50 {
		t.Errorf("paid: %s remaining %d, want OK 50 (the window counts the last 50 owed)", codesOf(r), r.Statuses[0].LimitRemaining)
	}
}

// A call of a charge rule and a plain one: the charge is made whatever the
// answer, and when it refuses the call the plain rule spends nothing. A
// charge rule in shadow mode is charged, reported over, and refuses
// nothing.
func TestChargeRuleMixed(t *testing.T) { onStores(t, testChargeRuleMixed) }

func testChargeRuleMixed(t *testing.T, ts *testServer, _ *fakeClock) {
	ts.call(t, "llm", withHits(desc("api_key=k"), 2000)) // 1,000 owed
	r := ts.call(t, "llm", withHits(desc("api_key=k"), 0), desc("requests=k"))
	if codesOf(r) != "OVER_LIMIT: OVER_LIMIT OK" || r.Statuses[1].LimitRemaining != 2 {
		t.Fatalf("check in debt and a request: %s, requests remaining %d (want 2: nothing spent)", codesOf(r), r.Statuses[1].LimitRemaining)
	}
	r = ts.call(t, "llm", withHits(desc("api_key=other"), 0), desc("requests=k"))
	if codesOf(r) != "OK: OK OK" || r.Statuses[1].LimitRemaining != 1 {
		t.Fatalf("check and a request: %s, requests remaining %d", codesOf(r), r.Statuses[1].LimitRemaining)
	}
	// Shadow: 50 past 10 are charged, the call is OK.
	r = ts.call(t, "llm", withHits(desc("trial=x"), 50))
	if codesOf(r) != "OK: OK" {
		t.Errorf("shadow charge: %s", codesOf(r))
	}
	r = ts.call(t, "llm", withHits(desc("trial=x"), 0), withHits(desc("api_key=other"), 0))
	if codesOf(r) != "OK: OK OK" {
		t.Errorf("shadow check in debt: %s", codesOf(r))
	}
	if l := ts.metric(t, `sluice_serve_rule_decisions_total{domain="llm",outcome="shadow_denied",rule="trial"}`); !strings.HasSuffix(l, " 2") {
		t.Errorf("%q, want 2", l)
	}
}

// Two descriptors of one charge rule's key are charged together, in one
// part; descriptors of several charge rules in one ChargeAll.
func TestChargeRuleComposite(t *testing.T) { onStores(t, testChargeRuleComposite) }

func testChargeRuleComposite(t *testing.T, ts *testServer, _ *fakeClock) {
	r := ts.call(t, "llm", withHits(desc("api_key=k"), 700), withHits(desc("api_key=k"), 700), withHits(desc("tenant=t"), 80))
	if codesOf(r) != "OVER_LIMIT: OVER_LIMIT OVER_LIMIT OK" || r.Statuses[2].LimitRemaining != 20 {
		t.Fatalf("%s, tenant remaining %d", codesOf(r), r.Statuses[2].LimitRemaining)
	}
	// 1,400 charged: 400 owed, paid in 24s.
	r = ts.call(t, "llm", withHits(desc("api_key=k"), 0))
	if d := r.Statuses[0].DurationUntilReset.AsDuration(); codesOf(r) != "OVER_LIMIT: OVER_LIMIT" || d != 24*time.Second {
		t.Errorf("check: %s, reset %v, want 24s", codesOf(r), d)
	}
}

// postJSON posts body to path on ts, checks the status and decodes the
// answer.
func postJSON(t *testing.T, ts *testServer, path, body string, code int) TakeResponse {
	t.Helper()
	resp, out := httpPost(t, ts.base+path, body)
	var r TakeResponse
	if resp.StatusCode != code || (code < 300 && json.Unmarshal([]byte(out), &r) != nil) {
		t.Fatalf("%s %s: %d %s, want %d", path, body, resp.StatusCode, out, code)
	}
	return r
}

// /v1/charge by key: never refused, the debt visible (remaining < 0),
// allowed while no unit is forgiven; a take in debt is refused until it is
// paid.
func TestChargeByKey(t *testing.T) { onStores(t, testChargeByKey) }

func testChargeByKey(t *testing.T, ts *testServer, clock *fakeClock) {
	const lim = `"limit": "1000/1m debt 5000"`
	r := postJSON(t, ts, "/v1/charge", `{"key": "k", `+lim+`, "cost": 1500}`, 200)
	if !r.Allowed || r.Remaining != -500 || r.RetryAfterUS != 0 || r.ResetAfterUS != (90*time.Second).Microseconds() {
		t.Errorf("charge 1500: %+v", r)
	}
	// A take of 1 waits for the debt and its own unit: 501 units, 30.06s.
	resp, out := httpPost(t, ts.base+"/v1/take", `{"key": "k", `+lim+`}`)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "31" || !strings.Contains(out, `"retry_after_us":30060000`) {
		t.Errorf("take in debt: %d %s Retry-After %s", resp.StatusCode, out, resp.Header.Get("Retry-After"))
	}
	if r := postJSON(t, ts, "/v1/charge", `{"key": "k", `+lim+`, "cost": 0}`, 200); !r.Allowed || r.Remaining != -500 {
		t.Errorf("a charge of 0 looks: %+v", r)
	}
	// Past the allowance: forgiven, allowed false, still 200.
	if r := postJSON(t, ts, "/v1/charge", `{"key": "k", `+lim+`, "cost": 100000}`, 200); r.Allowed || r.Remaining != -5000 {
		t.Errorf("charge past the allowance: %+v", r)
	}
	clock.Set(t0.Add(5*time.Minute + time.Second*3/50)) // 5,001 units back
	postJSON(t, ts, "/v1/take", `{"key": "k", `+lim+`}`, 200)
	if l := ts.metric(t, `sluice_serve_units_charged_total{domain="",rule="(charge)"}`); !strings.HasSuffix(l, " 101500") {
		t.Errorf("%q, want 101500", l)
	}
	// Not every algorithm can be charged; the key form needs --key-form.
	if resp, out := httpPost(t, ts.base+"/v1/charge", `{"key": "s", "limit": "10/1s sliding-log", "cost": 1}`); resp.StatusCode != 400 || !strings.Contains(out, "can give units back or charge them") {
		t.Errorf("a sliding log: %d %s", resp.StatusCode, out)
	}
}

// /v1/charge by descriptors charges every limited descriptor's rule, a
// charge rule's or not, and says which are over; a rule whose algorithm
// cannot carry a debt is a bad request that charges nothing.
func TestChargeByDescriptors(t *testing.T) { onStores(t, testChargeByDescriptors) }

func testChargeByDescriptors(t *testing.T, ts *testServer, _ *fakeClock) {
	body := `{"domain": "llm", "hits_addend": 5, "descriptors": [[{"key": "requests", "value": "k"}], [{"key": "api_key", "value": "k"}], [{"key": "other"}]]}`
	r := postJSON(t, ts, "/v1/charge", body, 200)
	if !r.Allowed || r.Remaining != -3 || len(r.Statuses) != 3 || r.Statuses[0].Code != "OVER_LIMIT" || r.Statuses[0].Remaining != -3 ||
		r.Statuses[1].Code != "OK" || r.Statuses[1].Remaining != 995 || r.Statuses[2].Code != "OK" {
		t.Errorf("charge 5: %+v", r)
	}
	// The plain rule is in debt: a take is refused.
	resp, out := httpPost(t, ts.base+"/v1/take", `{"domain": "llm", "descriptors": [[{"key": "requests", "value": "k"}]]}`)
	if resp.StatusCode != 429 || !strings.Contains(out, `"remaining":-3`) {
		t.Errorf("take in debt: %d %s", resp.StatusCode, out)
	}
	// 20 more: the plain rule's allowance is 10, the rest forgiven.
	if r := postJSON(t, ts, "/v1/charge", strings.Replace(body, `"hits_addend": 5`, `"hits_addend": 20`, 1), 200); r.Allowed || r.Statuses[0].Remaining != -10 {
		t.Errorf("charge 20: %+v", r)
	}
	resp, out = httpPost(t, ts.base+"/v1/charge", `{"domain": "llm", "descriptors": [[{"key": "api_key", "value": "k"}], [{"key": "sliding", "value": "k"}]]}`)
	if resp.StatusCode != 400 || !strings.Contains(out, `rule "sliding" counts with sliding-log, which cannot be charged`) {
		t.Errorf("a sliding log's rule: %d %s", resp.StatusCode, out)
	}
	if r := postJSON(t, ts, "/v1/charge", `{"domain": "llm", "hits_addend": 0, "descriptors": [[{"key": "api_key", "value": "k"}]]}`, 200); r.Statuses[0].Remaining != 975 {
		t.Errorf("after a bad request, api_key=k: %+v, want 975 left (nothing charged)", r)
	}
}

// /v1/settle: an estimate taken, then the actual: the difference is given
// back to the take's window or charged; a refused take spent nothing, so
// all of the actual is charged.
func TestSettle(t *testing.T) { onStores(t, testSettle) }

func testSettle(t *testing.T, ts *testServer, clock *fakeClock) {
	const lim = `"limit": "100/1m fixed-window debt 50"`
	take := postJSON(t, ts, "/v1/take", `{"key": "k", `+lim+`, "cost": 80}`, 200)
	if take.WindowUS != t0.Add(time.Minute).UnixMicro() {
		t.Fatalf("take: window_us %d, want the window's end", take.WindowUS)
	}
	tk, _ := json.Marshal(take)
	settle := func(estimate, actual int, take []byte) TakeResponse {
		t.Helper()
		return postJSON(t, ts, "/v1/settle", fmt.Sprintf(`{"key": "k", %s, "estimate": %d, "actual": %d, "take": %s}`, lim, estimate, actual, take), 200)
	}
	if r := settle(80, 30, tk); !r.Allowed || r.Remaining != 70 {
		t.Errorf("settle 80 → 30: %+v, want 50 given back", r)
	}
	if r := settle(30, 150, tk); !r.Allowed || r.Remaining != -50 {
		t.Errorf("settle 30 → 150: %+v, want 120 charged, 50 owed", r)
	}
	postJSON(t, ts, "/v1/take", `{"key": "k", `+lim+`, "cost": 10}`, 429)
	if r := settle(10, 5, []byte(`{"allowed": false}`)); r.Allowed || r.Remaining != -50 {
		t.Errorf("settle a refused take: %+v, want 5 charged and forgiven", r)
	}
	// In the next window, a refund to the take's window gives nothing.
	clock.Set(t0.Add(time.Minute))
	if r := settle(80, 0, tk); r.Remaining != 50 {
		t.Errorf("settle in the next window: %+v, want the window as it is: 50 carried", r)
	}
	for _, bad := range []string{
		`{"key": "k", ` + lim + `, "actual": 1, "take": {"allowed": true}}`,
		`{"key": "k", ` + lim + `, "estimate": 1, "actual": -1, "take": {"allowed": true}}`,
		`{"key": "k", ` + lim + `, "estimate": 1, "actual": 1}`,
		`{"domain": "llm", "estimate": 1, "actual": 1, "take": {"allowed": true}}`,
		`{"key": "k", ` + lim + `, "estimate": 1, "actual": 1, "take": {"allowed": true, "bogus": 1}}`,
	} {
		if resp, out := httpPost(t, ts.base+"/v1/settle", bad); resp.StatusCode != 400 {
			t.Errorf("%s: %d %s, want 400", bad, resp.StatusCode, out)
		}
	}
}

// With --store-per-second, a call's charges are charged each in its
// store: the per-second ones there, the others in the main store.
func TestChargePerSecondStore(t *testing.T) {
	clock := &fakeClock{t: t0}
	main, sec := memstore.New(memstore.WithClock(clock)), memstore.New(memstore.WithClock(clock))
	ts := start(t, Options{Store: main, PerSecondStore: sec, Config: writeConfig(t, map[string]string{"llm.yaml": chargeConfig + `
  - key: tps
    rate_limit: {unit: second, requests_per_unit: 5, debt: 10, charge: true}
`})}, clock)
	r := ts.call(t, "llm", withHits(desc("tps=k"), 8), withHits(desc("api_key=k"), 8), withHits(desc("tenant=k"), 8))
	if codesOf(r) != "OVER_LIMIT: OVER_LIMIT OK OK" || main.Len() != 2 || sec.Len() != 1 {
		t.Fatalf("%s; %d keys in the store, %d in the per-second store; want 2 and 1", codesOf(r), main.Len(), sec.Len())
	}
	// 3 owed past 5 a second: paid as the next second begins.
	if d := r.Statuses[0].DurationUntilReset.AsDuration(); d != time.Second {
		t.Errorf("duration_until_reset %v, want 1s", d)
	}
	r = ts.call(t, "llm", withHits(desc("tps=k"), 0), withHits(desc("api_key=k"), 0))
	if codesOf(r) != "OVER_LIMIT: OVER_LIMIT OK" || r.Statuses[1].LimitRemaining != 992 {
		t.Errorf("the check: %s, api_key remaining %d", codesOf(r), r.Statuses[1].LimitRemaining)
	}
}
