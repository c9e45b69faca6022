package serve

import (
	"testing"
	"time"

	"strings"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
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
func TestChargeRuleBucket(t *testing.T) {
	ts, clock := startCharge(t, Options{})
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
}

// A window in debt is paid as the last window its debt reaches begins:
// 250 owed past a rate of 100 a minute is paid 3 windows on.
func TestChargeRuleWindow(t *testing.T) {
	ts, clock := startCharge(t, Options{})
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
func TestChargeRuleMixed(t *testing.T) {
	ts, _ := startCharge(t, Options{})
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
func TestChargeRuleComposite(t *testing.T) {
	ts, _ := startCharge(t, Options{})
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
