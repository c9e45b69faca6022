package serve

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// testConfig is an envoyproxy/ratelimit configuration file, as envoy reads
// it, exercising the matching rules.
const testConfig = `domain: test
descriptors:
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 3
  - key: key1
    rate_limit:
      unit: minute
      requests_per_unit: 5
  - key: nested
    value: a
    descriptors:
      - key: sub
        rate_limit:
          unit: hour
          requests_per_unit: 2
          name: sub_limit
  - key: free
    rate_limit:
      unlimited: true
  - key: shadow
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
      name: shadowed
  - key: broad
    rate_limit:
      unit: minute
      requests_per_unit: 100
      name: broad
  - key: narrow
    rate_limit:
      unit: minute
      requests_per_unit: 1
      replaces:
        - name: broad
  - key: wild
    value: foo*
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: detail
    detailed_metric: true
    rate_limit:
      unit: second
      requests_per_unit: 1
  - key: blocked
    rate_limit:
      unit: second
      requests_per_unit: 0
`

// t0 is 12:00:30 UTC on a day: mid-minute.
var t0 = time.Date(2026, 12, 1, 12, 0, 30, 0, time.UTC)

func startTest(t *testing.T, o Options) (*testServer, *fakeClock) {
	clock := &fakeClock{t: t0}
	o.Config = writeConfig(t, map[string]string{"test.yaml": testConfig})
	return start(t, o, clock), clock
}

// want checks one status: its code, remaining, and limit (rpu 0: none).
func want(t *testing.T, what string, s *pb.RateLimitResponse_DescriptorStatus, code pb.RateLimitResponse_Code, remaining uint32, rpu uint32, unit pb.RateLimitResponse_RateLimit_Unit) {
	t.Helper()
	if s.Code != code || s.LimitRemaining != remaining {
		t.Errorf("%s: code %v remaining %d, want %v %d", what, s.Code, s.LimitRemaining, code, remaining)
	}
	switch {
	case rpu == 0 && s.CurrentLimit != nil:
		t.Errorf("%s: current_limit %v, want none", what, s.CurrentLimit)
	case rpu != 0 && (s.CurrentLimit == nil || s.CurrentLimit.RequestsPerUnit != rpu || s.CurrentLimit.Unit != unit):
		t.Errorf("%s: current_limit %v, want %d per %v", what, s.CurrentLimit, rpu, unit)
	}
}

const minute, hour, second = pb.RateLimitResponse_RateLimit_MINUTE, pb.RateLimitResponse_RateLimit_HOUR, pb.RateLimitResponse_RateLimit_SECOND
const ok, over = pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT

// Matching: a key and value, the key alone as the default for other values,
// nested descriptors, unknown domains and descriptors (OK, no limit),
// unlimited, wildcards; remaining counts and the window's reset.
func TestMatching(t *testing.T) {
	ts, _ := startTest(t, Options{})
	for i, rem := range []uint32{2, 1, 0} {
		r := ts.call(t, "test", desc("key1=value1"))
		want(t, "key1=value1 #"+string(rune('1'+i)), r.Statuses[0], ok, rem, 3, minute)
		if d := r.Statuses[0].DurationUntilReset.AsDuration(); d != 30*time.Second {
			t.Errorf("duration_until_reset %v, want 30s (to the minute's end)", d)
		}
	}
	r := ts.call(t, "test", desc("key1=value1"))
	if codesOf(r) != "OVER_LIMIT: OVER_LIMIT" {
		t.Errorf("4th key1=value1: %s", codesOf(r))
	}
	want(t, "key1=other", ts.call(t, "test", desc("key1=other")).Statuses[0], ok, 4, 5, minute)
	r = ts.call(t, "test", desc("nested=a", "sub=x"))
	want(t, "nested=a,sub=x", r.Statuses[0], ok, 1, 2, hour)
	if r.Statuses[0].CurrentLimit.Name != "sub_limit" {
		t.Errorf("name %q, want sub_limit", r.Statuses[0].CurrentLimit.Name)
	}
	want(t, "nested=a alone", ts.call(t, "test", desc("nested=a")).Statuses[0], ok, 0, 0, 0)
	want(t, "nested=b,sub=x", ts.call(t, "test", desc("nested=b", "sub=x")).Statuses[0], ok, 0, 0, 0)
	want(t, "unknown key", ts.call(t, "test", desc("nope=1")).Statuses[0], ok, 0, 0, 0)
	want(t, "unknown domain", ts.call(t, "other", desc("key1=value1")).Statuses[0], ok, 0, 0, 0)
	for range 3 {
		want(t, "unlimited", ts.call(t, "test", desc("free=x")).Statuses[0], ok, math.MaxUint32, 0, 0)
	}
	want(t, "wild=foo1", ts.call(t, "test", desc("wild=foo1")).Statuses[0], ok, 1, 2, minute)
	want(t, "wild=foo2", ts.call(t, "test", desc("wild=foo2")).Statuses[0], ok, 1, 2, minute) // its own counter
	want(t, "wild=foo1 again", ts.call(t, "test", desc("wild=foo1")).Statuses[0], ok, 0, 2, minute)
	want(t, "wild=bar", ts.call(t, "test", desc("wild=bar")).Statuses[0], ok, 0, 0, 0)
	// requests_per_unit 0: always over the limit.
	r = ts.call(t, "test", desc("blocked=x"))
	if codesOf(r) != "OVER_LIMIT: OVER_LIMIT" || r.Statuses[0].CurrentLimit.GetUnit() != second || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 0 {
		t.Errorf("blocked: %s %v", codesOf(r), r.Statuses[0])
	}
}

// The window resets at the unit's boundary, on the clock.
func TestWindowReset(t *testing.T) {
	ts, clock := startTest(t, Options{})
	clock.Set(t0.Add(29*time.Second + 500*time.Millisecond)) // 12:00:59.5
	for range 3 {
		ts.call(t, "test", desc("key1=value1"))
	}
	r := ts.call(t, "test", desc("key1=value1"))
	if r.OverallCode != over || r.Statuses[0].DurationUntilReset.AsDuration() != 500*time.Millisecond {
		t.Fatalf("at 12:00:59.5: %s, reset in %v; want OVER_LIMIT, 500ms", codesOf(r), r.Statuses[0].DurationUntilReset.AsDuration())
	}
	clock.Set(t0.Add(29*time.Second + 999*time.Millisecond))
	if r := ts.call(t, "test", desc("key1=value1")); r.OverallCode != over {
		t.Fatalf("at 12:00:59.999: %s, want OVER_LIMIT", codesOf(r))
	}
	clock.Set(t0.Add(30 * time.Second)) // 12:01:00
	r = ts.call(t, "test", desc("key1=value1"))
	want(t, "at 12:01:00", r.Statuses[0], ok, 2, 3, minute)
	if d := r.Statuses[0].DurationUntilReset.AsDuration(); d != time.Minute {
		t.Errorf("reset in %v, want 1m", d)
	}
}

// A call's descriptors are decided together: a refusal spends nothing on the
// descriptors that would have passed (envoyproxy/ratelimit spends them).
func TestAllOrNothing(t *testing.T) {
	ts, _ := startTest(t, Options{})
	both := func() *pb.RateLimitResponse {
		return ts.call(t, "test", desc("key1=value1"), desc("nested=a", "sub=x"))
	}
	both()
	both()
	r := both() // sub_limit (2/hour) is spent
	if codesOf(r) != "OVER_LIMIT: OK OVER_LIMIT" {
		t.Fatalf("third call: %s, want OVER_LIMIT: OK OVER_LIMIT", codesOf(r))
	}
	want(t, "key1 in the refused call", r.Statuses[0], ok, 1, 3, minute)
	// key1=value1 has spent 2 of 3: the refused call spent nothing.
	want(t, "key1 alone", ts.call(t, "test", desc("key1=value1")).Statuses[0], ok, 0, 3, minute)
	// A descriptor with requests_per_unit 0 refuses the call, spending
	// nothing on the others.
	r = ts.call(t, "test", desc("key1=other"), desc("blocked=x"))
	if codesOf(r) != "OVER_LIMIT: OK OVER_LIMIT" {
		t.Errorf("key1=other with blocked: %s", codesOf(r))
	}
	want(t, "key1=other after", ts.call(t, "test", desc("key1=other")).Statuses[0], ok, 4, 5, minute)
}

// Shadow rules never refuse (overall or per status) and are counted; a
// replaced rule is not applied; global shadow answers OK.
func TestShadowAndReplaces(t *testing.T) {
	ts, _ := startTest(t, Options{})
	for i := range 3 {
		r := ts.call(t, "test", desc("shadow=x"), desc("key1=value1"))
		if codesOf(r) != "OK: OK OK" {
			t.Errorf("shadow call %d: %s", i, codesOf(r))
		}
	}
	_, body := httpGet(t, ts.base+"/metrics")
	if !strings.Contains(body, `sluice_serve_rule_decisions_total{domain="test",outcome="shadow_denied",rule="shadowed"} 2`) {
		t.Errorf("metrics lack 2 shadow_denied for rule shadowed:\n%s", grep(body, "shadow"))
	}
	r := ts.call(t, "test", desc("broad=x"), desc("narrow=y"))
	want(t, "broad (replaced)", r.Statuses[0], ok, 0, 0, 0)
	want(t, "narrow", r.Statuses[1], ok, 0, 1, minute)
	r = ts.call(t, "test", desc("broad=x"), desc("narrow=y"))
	if codesOf(r) != "OVER_LIMIT: OK OVER_LIMIT" {
		t.Errorf("second broad+narrow: %s", codesOf(r))
	}
	want(t, "broad alone", ts.call(t, "test", desc("broad=x")).Statuses[0], ok, 99, 100, minute)

	gs, _ := startTest(t, Options{GlobalShadow: true})
	for range 4 {
		gs.call(t, "test", desc("key1=value1"))
	}
	if r := gs.call(t, "test", desc("key1=value1")); codesOf(r) != "OK: OVER_LIMIT" {
		t.Errorf("global shadow: %s, want OK: OVER_LIMIT", codesOf(r))
	}
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// hits_addend: the request's, a descriptor's own (0 looks), one larger than
// the limit (refused).
func TestHitsAddend(t *testing.T) {
	ts, _ := startTest(t, Options{})
	r, err := ts.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "test", HitsAddend: 2, Descriptors: []*rlv3.RateLimitDescriptor{desc("key1=value1")}})
	if err != nil {
		t.Fatal(err)
	}
	want(t, "hits 2", r.Statuses[0], ok, 1, 3, minute)
	for range 3 {
		want(t, "look", ts.call(t, "test", withHits(desc("key1=value1"), 0)).Statuses[0], ok, 1, 3, minute)
	}
	r = ts.call(t, "test", withHits(desc("key1=value1"), 2))
	want(t, "hits 2 of 1 left", r.Statuses[0], over, 1, 3, minute)
	r = ts.call(t, "test", withHits(desc("key1=other"), 6))
	want(t, "hits 6 > 5", r.Statuses[0], over, 5, 5, minute)
	want(t, "hits 1", ts.call(t, "test", withHits(desc("key1=value1"), 1)).Statuses[0], ok, 0, 3, minute)
}

// Descriptors of one key add their hits_addend without wrapping: a sum
// beyond int64 is over every limit, so the call is refused (OVER_LIMIT, as
// envoy answers a hits_addend over the limit) and spends nothing; it is
// neither Internal nor counted as a store error. (Before, 4×(2^62−1)+5
// wrapped to 1 and passed, and 4×(2^62−1) wrapped to −4: Internal.)
func TestHitsAddendSumSaturates(t *testing.T) {
	ts, _ := startTest(t, Options{})
	const big = math.MaxInt64 >> 1 // what one descriptor's hits_addend is capped at
	four := func(last ...uint64) []*rlv3.RateLimitDescriptor {
		var ds []*rlv3.RateLimitDescriptor
		for range 4 {
			ds = append(ds, withHits(desc("key1=other"), big))
		}
		for _, n := range last {
			ds = append(ds, withHits(desc("key1=other"), n))
		}
		return ds
	}
	for name, ds := range map[string][]*rlv3.RateLimitDescriptor{
		"4×(2^62−1)+5":      four(5),
		"4×(2^62−1)":        four(),
		"4×(2^62−1)+2^64−1": four(math.MaxUint64),
		"2^64−1 twice":      {withHits(desc("key1=other"), math.MaxUint64), withHits(desc("key1=other"), math.MaxUint64)},
	} {
		r, err := ts.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "test", Descriptors: ds})
		if err != nil {
			t.Errorf("%s: %v, want OVER_LIMIT", name, err)
			continue
		}
		if r.OverallCode != over {
			t.Errorf("%s: %s, want OVER_LIMIT", name, codesOf(r))
		}
	}
	// The same through /json, whose hits_addend is a uint64 too.
	body := `{"domain": "test", "descriptors": [` + strings.Repeat(`{"entries": [{"key": "key1", "value": "other"}], "hits_addend": "4611686018427387903"}, `, 4) +
		`{"entries": [{"key": "key1", "value": "other"}], "hits_addend": "5"}]}`
	if resp, out := httpPost(t, ts.base+"/json", body); resp.StatusCode != 429 {
		t.Errorf("/json 4×(2^62−1)+5: %d %s, want 429", resp.StatusCode, out)
	}
	want(t, "key1=other after the refused calls", ts.call(t, "test", withHits(desc("key1=other"), 0)).Statuses[0], ok, 5, 5, minute)
	// /v1/take by key sums nothing: a cost over the caller's own limit is
	// the caller's error (400), one beyond int64 does not decode.
	for body, msg := range map[string]string{
		`{"key": "k", "limit": "1/1s", "cost": 9223372036854775807}`: "exceeds",
		`{"key": "k", "limit": "1/1s", "cost": 9223372036854775808}`: "bad request JSON",
	} {
		if resp, out := httpPost(t, ts.base+"/v1/take", body); resp.StatusCode != 400 || !strings.Contains(out, msg) {
			t.Errorf("/v1/take %s: %d %s, want 400 with %q", body, resp.StatusCode, out, msg)
		}
	}
	_, m := httpGet(t, ts.base+"/metrics")
	if !strings.Contains(m, "sluice_serve_store_errors_total 0") {
		t.Errorf("store errors counted for a client's costs:\n%s", grep(m, "store_errors"))
	}
}

// A descriptor's limit override replaces the configured limit.
func TestLimitOverride(t *testing.T) {
	ts, _ := startTest(t, Options{})
	d := desc("key1=value1")
	d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_SECOND}
	want(t, "override 1/s", ts.call(t, "test", d).Statuses[0], ok, 0, 1, second)
	want(t, "override 1/s again", ts.call(t, "test", d).Statuses[0], over, 0, 1, second)
	want(t, "configured limit", ts.call(t, "test", desc("key1=zzz")).Statuses[0], ok, 4, 5, minute)
	d = desc("key1=value1")
	d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}
	if _, err := ts.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "test", Descriptors: []*rlv3.RateLimitDescriptor{d}}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "unit") {
		t.Errorf("override with no unit: %v, want InvalidArgument naming the unit", err)
	}
}

// Requests the service will not decide are InvalidArgument with a clear
// message.
func TestInvalidRequests(t *testing.T) {
	ts, _ := startTest(t, Options{Limits: limits.Table{Descriptors: 2, EntryBytes: 16}})
	long := strings.Repeat("x", 17)
	for _, c := range []struct {
		req  *pb.RateLimitRequest
		want string
	}{
		{&pb.RateLimitRequest{Descriptors: []*rlv3.RateLimitDescriptor{desc("a=b")}}, "domain must not be empty"},
		{&pb.RateLimitRequest{Domain: "test"}, "descriptor list must not be empty"},
		{&pb.RateLimitRequest{Domain: "test", Descriptors: []*rlv3.RateLimitDescriptor{desc("a"), desc("b"), desc("c")}}, "descriptors: 3, over the service's limit descriptors of 2"},
		{&pb.RateLimitRequest{Domain: "test", Descriptors: []*rlv3.RateLimitDescriptor{desc("a=" + long)}}, "17 bytes, over the service's limit entry-bytes of 16 bytes"},
		{&pb.RateLimitRequest{Domain: "test", Descriptors: []*rlv3.RateLimitDescriptor{{}}}, "descriptor 0 has no entries"},
	} {
		_, err := ts.client.ShouldRateLimit(context.Background(), c.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want InvalidArgument %q", c.req, err, c.want)
		}
	}
	small, _ := startTest(t, Options{Limits: limits.Table{RequestBytes: 200}})
	_, err := small.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: strings.Repeat("d", 300), Descriptors: []*rlv3.RateLimitDescriptor{desc("a=b")}})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a 300-byte request over a 200-byte limit: %v, want ResourceExhausted", err)
	}
}

// Response headers: envoy's RateLimit-Limit/-Remaining/-Reset from the
// descriptor nearest its limit, or draft-11's RateLimit-Policy and RateLimit.
func TestResponseHeaders(t *testing.T) {
	es, _ := startTest(t, Options{Headers: HeadersEnvoy})
	r := es.call(t, "test", desc("key1=other"), desc("key1=value1"))
	got := map[string]string{}
	for _, h := range r.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	if got["RateLimit-Limit"] != "3" || got["RateLimit-Remaining"] != "2" || got["RateLimit-Reset"] != "30" {
		t.Errorf("envoy headers %v, want limit 3, remaining 2, reset 30", got)
	}
	// Renamed, as envoy's LIMIT_*_HEADER settings do.
	rs, _ := startTest(t, Options{Headers: HeadersEnvoy, HeaderNames: EnvoyHeaderNames{Limit: "X-Limit", Reset: "X-Reset"}})
	got = map[string]string{}
	for _, h := range rs.call(t, "test", desc("key1=value1")).ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	if len(got) != 3 || got["X-Limit"] != "3" || got["RateLimit-Remaining"] != "2" || got["X-Reset"] != "30" {
		t.Errorf("renamed envoy headers %v, want X-Limit 3, RateLimit-Remaining 2, X-Reset 30", got)
	}
	if _, err := New(Options{HeaderNames: EnvoyHeaderNames{Remaining: "bad name"}, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0"}); err == nil || !strings.Contains(err.Error(), `"bad name" is not a valid HTTP header name`) {
		t.Errorf("New with a header name holding a space: %v", err)
	}
	ds, _ := startTest(t, Options{Headers: HeadersDraft11})
	r = ds.call(t, "test", desc("nested=a", "sub=x"))
	got = map[string]string{}
	for _, h := range r.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	if got["RateLimit-Policy"] != `"sub_limit";q=2;w=3600` || !strings.HasPrefix(got["RateLimit"], `"sub_limit";r=1;t=`) {
		t.Errorf("draft-11 headers %v", got)
	}
}
