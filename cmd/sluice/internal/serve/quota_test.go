package serve

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/redisstore"
	"github.com/sluice-go/sluice/store"
)

// quotaConfig has envoy's quota_mode rules (two backends, as in
// envoyproxy/ratelimit's example), one of them a token bucket, one with
// requests_per_unit 0, and limits to give units back to.
const quotaConfig = `domain: quota
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: service
    value: service_2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: service
    value: bucket
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: token-bucket}
  - key: service
    value: empty
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: tokens
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: token-bucket, name: tokens}
  - key: cells
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: gcra}
  - key: window
    rate_limit: {unit: minute, requests_per_unit: 10, name: per_window}
  - key: fixed
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed-window}
  - key: sliding
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding-window, name: per_sliding}
`

// onEachStore runs f against a server on the memory store and on a Redis
// store, both on one fake clock at t0.
func onEachStore(t *testing.T, o Options, f func(t *testing.T, ts *testServer, clock *fakeClock)) {
	o.Config = writeConfig(t, map[string]string{"quota.yaml": quotaConfig})
	t.Run("memory", func(t *testing.T) {
		clock := &fakeClock{t: t0}
		o := o
		o.Store = memstore.New(memstore.WithClock(clock))
		f(t, start(t, o, clock), clock)
	})
	t.Run("redis", func(t *testing.T) {
		rs := redistest.Standalone(t)
		clock := &fakeClock{t: t0}
		st, err := redisstore.New(rs.Client(), redisstore.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		o := o
		o.Store = st
		f(t, start(t, o, clock), clock)
	})
}

// negative sets a descriptor's own hits_addend to n and is_negative_hits.
func negative(d *rlv3.RateLimitDescriptor, n uint64) *rlv3.RateLimitDescriptor {
	d = withHits(d, n)
	d.IsNegativeHits = true
	return d
}

// quota_mode as envoyproxy/ratelimit answers it: each quota descriptor has
// its own code, and the call is over the limit only when every quota
// descriptor is (or an enforced one refuses). A look (hits_addend 0) at a
// quota descriptor is over once nothing is left.
func TestQuotaMode(t *testing.T) {
	onEachStore(t, Options{}, func(t *testing.T, ts *testServer, clock *fakeClock) {
		check := func(what, wantCodes string, r *pb.RateLimitResponse, remaining ...uint32) {
			t.Helper()
			if codesOf(r) != wantCodes {
				t.Errorf("%s: %s, want %s", what, codesOf(r), wantCodes)
			}
			for i, rem := range remaining {
				if got := r.Statuses[i].LimitRemaining; got != rem {
					t.Errorf("%s: status %d remaining %d, want %d", what, i, got, rem)
				}
			}
		}
		look := func() *pb.RateLimitResponse {
			return ts.call(t, "quota", withHits(desc("service=service_1"), 0), withHits(desc("service=service_2"), 0))
		}
		debit := func(svc string) *pb.RateLimitResponse { return ts.call(t, "quota", desc("service="+svc)) }
		// envoy's token-quota flow: look at both backends on the request
		// path, debit the one that served on the response path.
		check("first look", "OK: OK OK", look(), 1, 2)
		check("debit service_1", "OK: OK", debit("service_1"), 0)
		check("service_1 spent", "OK: OVER_LIMIT OK", look(), 0, 2)
		check("debit service_2", "OK: OK", debit("service_2"), 1)
		check("debit service_2 again", "OK: OK", debit("service_2"), 0)
		check("both spent", "OVER_LIMIT: OVER_LIMIT OVER_LIMIT", look(), 0, 0)
		check("a debit past the quota", "OVER_LIMIT: OVER_LIMIT", debit("service_2"), 0)

		// Spending on several quota descriptors: each spends on its own.
		clock.Set(t0.Add(30 * time.Second)) // the next minute
		both := func() *pb.RateLimitResponse {
			return ts.call(t, "quota", desc("service=service_1"), desc("service=service_2"))
		}
		check("spend both", "OK: OK OK", both(), 0, 1)
		check("service_1 over, service_2 spends", "OK: OVER_LIMIT OK", both(), 0, 0)
		check("both over", "OVER_LIMIT: OVER_LIMIT OVER_LIMIT", both(), 0, 0)

		// Every quota descriptor over refuses the call: the enforced
		// descriptor spends nothing.
		check("user with spent quotas", "OVER_LIMIT: OK OVER_LIMIT", ts.call(t, "quota", desc("user=a"), desc("service=service_1")), 1, 0)
		check("user alone", "OK: OK", ts.call(t, "quota", desc("user=a")), 0)
		// An enforced refusal: the quota spending is given back (envoy
		// spends it), but under the algorithms that cannot give back.
		check("user over, bucket passes", "OVER_LIMIT: OVER_LIMIT OK", ts.call(t, "quota", desc("user=a"), desc("service=bucket")), 0, 2)
		check("bucket given back", "OK: OK", debit("bucket"), 1)
		clock.Set(t0.Add(90 * time.Second))
		check("user and window pass", "OK: OK OK", ts.call(t, "quota", desc("user=a"), desc("service=service_2")), 0, 1)
		check("user over, window passes", "OVER_LIMIT: OVER_LIMIT OK", ts.call(t, "quota", desc("user=a"), desc("service=service_2")), 0, 1)
		check("window given back", "OK: OK", debit("service_2"), 0)
		check("user over, sliding window passes", "OVER_LIMIT: OVER_LIMIT OK", ts.call(t, "quota", desc("user=a"), desc("sliding=x")), 0, 1)
		check("sliding window stays spent", "OK: OK", ts.call(t, "quota", desc("sliding=x")), 0)

		// requests_per_unit 0 under quota_mode is one quota over its limit.
		check("empty alone", "OVER_LIMIT: OVER_LIMIT", debit("empty"))
		check("empty and bucket", "OK: OVER_LIMIT OK", ts.call(t, "quota", desc("service=empty"), desc("service=bucket")), 0, 1) // refilled in the minute since
	})
}

// quota_mode in the headers and under global shadow.
func TestQuotaModeHeaders(t *testing.T) {
	onEachStore(t, Options{Headers: HeadersEnvoy, GlobalShadow: true}, func(t *testing.T, ts *testServer, _ *fakeClock) {
		ts.call(t, "quota", desc("service=service_1"))
		r := ts.call(t, "quota", desc("service=service_1"), desc("service=service_2"))
		got := map[string]string{}
		for _, h := range r.ResponseHeadersToAdd {
			got[h.Key] = h.Value
		}
		if codesOf(r) != "OK: OVER_LIMIT OK" || got["RateLimit-Limit"] != "1" || got["RateLimit-Remaining"] != "0" {
			t.Errorf("%s, headers %v: want OK: OVER_LIMIT OK and service_1's limit 1, remaining 0", codesOf(r), got)
		}
		if r := ts.call(t, "quota", desc("service=service_1")); codesOf(r) != "OK: OVER_LIMIT" {
			t.Errorf("every quota over, global shadow: %s, want OK: OVER_LIMIT", codesOf(r))
		}
		if _, body := httpGet(t, ts.base+"/debug/config"); !strings.Contains(grep(body, "quota: service=service_1 "), " quota_mode") {
			t.Errorf("/debug/config does not show service_1's quota_mode:\n%s", body)
		}
	})
}

// is_negative_hits gives units back to a token bucket, a GCRA, and envoy's
// windows (the count of the window the key is in), never past the limit; a
// rule that cannot give back is InvalidArgument naming its algorithm;
// hits_addend 0 with is_negative_hits looks.
func TestNegativeHits(t *testing.T) {
	onEachStore(t, Options{}, func(t *testing.T, ts *testServer, clock *fakeClock) {
		for _, key := range []string{"tokens", "cells", "window", "fixed"} {
			want(t, key+" spends 4", ts.call(t, "quota", withHits(desc(key+"=x"), 4)).Statuses[0], ok, 6, 10, minute)
			want(t, key+" gets 3 back", ts.call(t, "quota", negative(desc(key+"=x"), 3)).Statuses[0], ok, 9, 10, minute)
			want(t, key+" gets 5 back", ts.call(t, "quota", negative(desc(key+"=x"), 5)).Statuses[0], ok, 10, 10, minute)
			want(t, key+" looks", ts.call(t, "quota", withHits(desc(key+"=x"), 0)).Statuses[0], ok, 10, 10, minute)
		}
		// A sliding window cannot give back.
		_, err := ts.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "quota", Descriptors: []*rlv3.RateLimitDescriptor{desc("user=b"), negative(desc("sliding=y"), 1)}})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `descriptor 1: is_negative_hits: rule "per_sliding" counts with sliding-window, which cannot give units back`) {
			t.Errorf("is_negative_hits on a sliding window: %v", err)
		}
		want(t, "the refused request spent nothing", ts.call(t, "quota", withHits(desc("user=b"), 0)).Statuses[0], ok, 1, 1, minute)
		want(t, "hits_addend 0 on a sliding window looks", ts.call(t, "quota", negative(desc("sliding=y"), 0)).Statuses[0], ok, 2, 2, minute)
		want(t, "no rule", ts.call(t, "quota", negative(desc("nope=x"), 3)).Statuses[0], ok, 0, 0, 0)
		// The request's hits_addend applies when the descriptor has none.
		d := desc("tokens=y")
		d.IsNegativeHits = true
		want(t, "tokens=y spends 10", ts.call(t, "quota", withHits(desc("tokens=y"), 10)).Statuses[0], ok, 0, 10, minute)
		r, err := ts.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "quota", HitsAddend: 2, Descriptors: []*rlv3.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatal(err)
		}
		want(t, "the request's hits_addend back", r.Statuses[0], ok, 2, 10, minute)

		// In a call that also spends: the give-back comes first (the spending
		// can use it) and stays whatever the call's answer.
		r = ts.call(t, "quota", negative(desc("tokens=y"), 3), withHits(desc("tokens=y"), 5))
		if codesOf(r) != "OK: OK OK" || r.Statuses[0].LimitRemaining != 5 || r.Statuses[1].LimitRemaining != 0 {
			t.Errorf("give back 3 and spend 5 of 2 left: %s, remaining %d %d; want OK: OK OK, 5 0", codesOf(r), r.Statuses[0].LimitRemaining, r.Statuses[1].LimitRemaining)
		}
		ts.call(t, "quota", desc("user=b"))
		r = ts.call(t, "quota", negative(desc("tokens=y"), 4), desc("user=b"))
		if codesOf(r) != "OVER_LIMIT: OK OVER_LIMIT" || r.Statuses[0].LimitRemaining != 4 {
			t.Errorf("give back 4 in a refused call: %s, remaining %d; want OVER_LIMIT: OK OVER_LIMIT, 4", codesOf(r), r.Statuses[0].LimitRemaining)
		}
		want(t, "the give-back stayed", ts.call(t, "quota", withHits(desc("tokens=y"), 0)).Statuses[0], ok, 4, 10, minute)

		// Units spent in a window that has ended are not given to the next.
		want(t, "window=z spends 5", ts.call(t, "quota", withHits(desc("window=z"), 5)).Statuses[0], ok, 5, 10, minute)
		clock.Set(t0.Add(30 * time.Second)) // the next minute
		want(t, "a give-back in the next minute", ts.call(t, "quota", negative(desc("window=z"), 3)).Statuses[0], ok, 10, 10, minute)
		want(t, "the next minute's 10", ts.call(t, "quota", withHits(desc("window=z"), 10)).Statuses[0], ok, 0, 10, minute)
		want(t, "and no more", ts.call(t, "quota", withHits(desc("window=z"), 1)).Statuses[0], over, 0, 10, minute)
	})
}

const globalQuotaConfig = `domain: gq
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: q
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: sq
    shadow_mode: true
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// Global quota mode (envoy's QUOTA_MODE): every descriptor but the unlimited
// ones counts as a quota descriptor, those without a rule and those in
// shadow_mode too (their status is always OK, so they keep the call from
// being over); each quota descriptor spends when it passes alone. A rule in
// both shadow_mode and quota_mode counts the same way without it.
func TestGlobalQuotaMode(t *testing.T) {
	config := writeConfig(t, map[string]string{"gq.yaml": globalQuotaConfig})
	check := func(ts *testServer, what, want string, ds ...*rlv3.RateLimitDescriptor) {
		t.Helper()
		if got := codesOf(ts.call(t, "gq", ds...)); got != want {
			t.Errorf("%s: %s, want %s", what, got, want)
		}
	}
	ts := start(t, Options{Config: config, GlobalQuota: true}, &fakeClock{t: t0})
	check(ts, "user=a", "OK: OK", desc("user=a"))
	check(ts, "user=a again", "OVER_LIMIT: OVER_LIMIT", desc("user=a"))
	check(ts, "with no rule", "OK: OVER_LIMIT OK", desc("user=a"), desc("other=x"))
	check(ts, "with an unlimited one", "OVER_LIMIT: OVER_LIMIT OK", desc("user=a"), desc("free=x"))
	check(ts, "with a shadow one", "OK: OVER_LIMIT OK", desc("user=a"), desc("shadow=x"))
	check(ts, "user=b passes alone and spends", "OK: OK OVER_LIMIT", desc("user=b"), desc("user=a"))
	check(ts, "user=b spent", "OVER_LIMIT: OVER_LIMIT", desc("user=b"))

	ts = start(t, Options{Config: config}, &fakeClock{t: t0})
	check(ts, "q=a", "OK: OK", desc("q=a"))
	check(ts, "q=a again", "OVER_LIMIT: OVER_LIMIT", desc("q=a"))
	check(ts, "q=a and a shadow quota", "OK: OVER_LIMIT OK", desc("q=a"), desc("sq=a"))
	check(ts, "q=a and no rule", "OVER_LIMIT: OVER_LIMIT OK", desc("q=a"), desc("other=x"))
	check(ts, "user=a", "OK: OK", desc("user=a"))
	check(ts, "user=a enforced: no rule does not save it", "OVER_LIMIT: OVER_LIMIT OK", desc("user=a"), desc("other=x"))
}

// evalshaCalls is the EVALSHA count of a Redis server's commandstats.
func evalshaCalls(t *testing.T, rs *redistest.Server) int64 {
	t.Helper()
	info, err := rs.Client().Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(info, "cmdstat_evalsha:calls=")
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// On Redis the quota_mode descriptors of a call are decided at once, so the
// store's batcher sends them together, not in one round trip each (in
// memory, one after the other).
func TestQuotaPartsTogether(t *testing.T) {
	rs := redistest.Standalone(t)
	st, err := redisstore.New(rs.Client())
	if err != nil {
		t.Fatal(err)
	}
	ts := start(t, Options{Config: writeConfig(t, map[string]string{"gq.yaml": globalQuotaConfig}), Store: st, GlobalQuota: true}, nil)
	fewer := false
	for i := 0; i < 10 && !fewer; i++ {
		before := evalshaCalls(t, rs)
		r := ts.call(t, "gq", withHits(desc("user=a"), 0), withHits(desc("user=b"), 0), withHits(desc("q=a"), 0), withHits(desc("user=c"), 0))
		if codesOf(r) != "OK: OK OK OK OK" {
			t.Fatalf("looks: %s", codesOf(r))
		}
		n := evalshaCalls(t, rs) - before
		t.Logf("call %d: 4 quota looks in %d EVALSHA", i, n)
		fewer = n < 4
	}
	if !fewer {
		t.Error("every call sent its 4 quota descriptors in 4 EVALSHA: one round trip each")
	}
}

// failingStore fails every operation on a key that holds "fail", and
// runs the others on its memory store (which lends the Limiter its clock).
type failingStore struct{ *memstore.Store }

var errInjected = errors.New("injected store failure")

func (f failingStore) Run(ctx context.Context, ops []store.Op) {
	for i := range ops {
		op := &ops[i]
		fail := strings.Contains(op.Key, "fail")
		for _, p := range op.Parts {
			fail = fail || strings.Contains(p.Key, "fail")
		}
		if fail {
			op.Err = errInjected
			continue
		}
		f.Store.Run(ctx, ops[i:i+1])
	}
}

// A call whose quota_mode descriptor fails at the store fails, and spends
// nothing: what the other quota descriptors took (at once, the store being
// outside the process) is given back.
func TestQuotaFailureSpendsNothing(t *testing.T) {
	clock := &fakeClock{t: t0}
	ts := start(t, Options{Config: writeConfig(t, map[string]string{"quota.yaml": quotaConfig}),
		Store: failingStore{memstore.New(memstore.WithClock(clock))}, GlobalQuota: true}, clock)
	_, err := ts.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "quota",
		Descriptors: []*rlv3.RateLimitDescriptor{desc("tokens=a"), desc("user=fail"), desc("service=bucket")}})
	if err == nil || !strings.Contains(err.Error(), errInjected.Error()) {
		t.Fatalf("a call with a failing descriptor: %v, want the store's error", err)
	}
	r := ts.call(t, "quota", withHits(desc("tokens=a"), 0), withHits(desc("service=bucket"), 0))
	if r.Statuses[0].LimitRemaining != 10 || r.Statuses[1].LimitRemaining != 2 {
		t.Errorf("after the failed call: remaining %d and %d, want 10 and 2 (nothing spent)", r.Statuses[0].LimitRemaining, r.Statuses[1].LimitRemaining)
	}
}
