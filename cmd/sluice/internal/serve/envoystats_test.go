package serve

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-go/sluice/memstore"
)

// envoySeriesLines are the lines of /metrics of envoy's per-rule families.
func envoySeriesLines(t *testing.T, ts *testServer) string {
	t.Helper()
	code, body := httpGet(t, ts.base+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "ratelimit_service_rate_limit_") {
			out = append(out, l)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// Each step's hits land in envoy's counters where envoy's limiter puts
// them: within the limit, near it (above 80% of it), over it, and in
// shadow mode; a refused call spends nothing here, so the next one starts
// from the same count.
func TestEnvoyStats(t *testing.T) {
	dir := writeConfig(t, map[string]string{"d.yaml": `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: s
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: a
    value: "1"
    descriptors:
      - key: b
        descriptors:
          - key: c
            rate_limit: {unit: hour, requests_per_unit: 5}
  - key: u
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: ip
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: free
    rate_limit: {unlimited: true}
`})
	ts := start(t, Options{Config: dir, EnvoyStats: true}, &fakeClock{t: time.Unix(1e9, 0)})
	for _, step := range []struct {
		d    *rlv3.RateLimitDescriptor
		want string
	}{
		{withHits(desc("k=x"), 7), "OK"},         // 0 → 7: within 7
		{withHits(desc("k=x"), 2), "OK"},         // 7 → 9: within 2, near 1 (above 8)
		{withHits(desc("k=x"), 3), "OVER_LIMIT"}, // 9 → 12: over 2, near 1
		{withHits(desc("k=x"), 1), "OK"},         // 9 → 10 (nothing spent above): within 1, near 1
		{withHits(desc("k=x"), 4), "OVER_LIMIT"}, // 10 → 14: over 4
		{withHits(desc("s=y"), 3), "OK"},         // shadow, 0 → 3: over 1, near 2 - max(1, 0) = 1, shadow 1
		{desc("a=1", "b=q", "c=r"), "OK"},        // three levels: domain, key1, key2
		{desc("u=alice"), "OK"},                  // detailed_metric: the value sent
		{desc("u=bob"), "OK"},
		{desc("ip=10.1.2.3"), "OVER_LIMIT"}, // requests_per_unit 0: over 1
		{desc("free=1"), "OK"},              // unlimited: not counted
	} {
		resp := ts.call(t, "d", step.d)
		if resp.OverallCode.String() != step.want {
			t.Fatalf("%v: %v, want %s", step.d, resp.OverallCode, step.want)
		}
	}
	want := strings.Join([]string{
		`ratelimit_service_rate_limit_near_limit{domain="d",key1="k"} 3`,
		`ratelimit_service_rate_limit_near_limit{domain="d",key1="s"} 1`,
		`ratelimit_service_rate_limit_over_limit{domain="d",key1="ip"} 1`,
		`ratelimit_service_rate_limit_over_limit{domain="d",key1="k"} 6`,
		`ratelimit_service_rate_limit_over_limit{domain="d",key1="s"} 1`,
		`ratelimit_service_rate_limit_shadow_mode{domain="d",key1="s"} 1`,
		`ratelimit_service_rate_limit_total_hits{domain="d",key1="a_1",key2="b"} 1`,
		`ratelimit_service_rate_limit_total_hits{domain="d",key1="ip"} 1`,
		`ratelimit_service_rate_limit_total_hits{domain="d",key1="k"} 17`,
		`ratelimit_service_rate_limit_total_hits{domain="d",key1="s"} 3`,
		`ratelimit_service_rate_limit_total_hits{domain="d",key1="u_alice"} 1`,
		`ratelimit_service_rate_limit_total_hits{domain="d",key1="u_bob"} 1`,
		`ratelimit_service_rate_limit_within_limit{domain="d",key1="a_1",key2="b"} 1`,
		`ratelimit_service_rate_limit_within_limit{domain="d",key1="k"} 10`,
		`ratelimit_service_rate_limit_within_limit{domain="d",key1="u_alice"} 1`,
		`ratelimit_service_rate_limit_within_limit{domain="d",key1="u_bob"} 1`,
	}, "\n")
	if got := envoySeriesLines(t, ts); got != want {
		t.Fatalf("envoy's series:\n%s\nwant:\n%s", got, want)
	}

	// Without the option, none of them.
	plain := start(t, Options{Config: dir}, nil)
	plain.call(t, "d", desc("k=x"))
	if got := envoySeriesLines(t, plain); got != "" {
		t.Fatalf("without EnvoyStats:\n%s", got)
	}
	if _, err := New(Options{EnvoyStats: true, NearLimitRatio: 1.5}); err == nil || !strings.Contains(err.Error(), "near-limit ratio 1.5") {
		t.Fatalf("a ratio of 1.5: %v", err)
	}
}

// A charge rule's hits are counted as envoy counts the hits it always adds
// to a window: from the count before them to the count after, the part
// past the limit over it, whether they fit or not.
func TestEnvoyStatsCharge(t *testing.T) {
	dir := writeConfig(t, map[string]string{"d.yaml": `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 10, debt: 20, charge: true}
`})
	ts := start(t, Options{Config: dir, EnvoyStats: true}, &fakeClock{t: time.Unix(1e9, 0)})
	for _, step := range []struct {
		hits uint64
		want string
	}{
		{7, "OK"},         // 0 → 7: within 7
		{5, "OVER_LIMIT"}, // 7 → 12, charged: over 2, near 2 (the 9th and the 10th)
		{0, "OVER_LIMIT"}, // a check in debt: nothing
		{4, "OVER_LIMIT"}, // 12 → 16: over 4
	} {
		if resp := ts.call(t, "d", withHits(desc("k=x"), step.hits)); resp.OverallCode.String() != step.want {
			t.Fatalf("%d hits: %v, want %s", step.hits, resp.OverallCode, step.want)
		}
	}
	want := strings.Join([]string{
		`ratelimit_service_rate_limit_near_limit{domain="d",key1="k"} 2`,
		`ratelimit_service_rate_limit_over_limit{domain="d",key1="k"} 6`,
		`ratelimit_service_rate_limit_total_hits{domain="d",key1="k"} 16`,
		`ratelimit_service_rate_limit_within_limit{domain="d",key1="k"} 7`,
	}, "\n")
	if got := envoySeriesLines(t, ts); got != want {
		t.Fatalf("envoy's series:\n%s\nwant:\n%s", got, want)
	}
}

// envoy's stat name sanitizing and its mapping's labels.
func TestEnvoyStatNames(t *testing.T) {
	for _, c := range []struct{ key, want string }{
		{"d.k", "d k"},
		{"d.k_v.k2_v2", "d k_v k2_v2"},
		{"d.a.b.c.e", "d a b"},
		{"d.ip_10.1.2.3", "d ip_10_1_2_3"},
		{"d.u_a:b|c", "d u_a_b_c"},
		{"d.host_example.com", "d host_example com"},
	} {
		if got := strings.Join(envoyLabels(sanitizeStat(c.key)), " "); got != c.want {
			t.Errorf("%q: %q, want %q", c.key, got, c.want)
		}
	}
}

func envoyBenchServer(tb testing.TB) *Server {
	s, err := New(Options{Config: writeConfig(tb, map[string]string{"bench.yaml": benchConfig}), NoWatch: true, EnvoyStats: true,
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Store: memstore.New(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.grpcLn.Close(); s.httpLn.Close(); s.stopWatch() })
	return s
}

// envoy's counters cost a call no allocation: it allocates as many times
// with them as without.
func TestEnvoyStatsAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	with, without := rls{envoyBenchServer(t).service}, rls{benchServer(t).service}
	for _, req := range []*pb.RateLimitRequest{
		{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{desc("user=42")}},
		{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{desc("tenant=acme"), desc("user=42")}},
		{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{desc("tenant=acme"), desc("trial=42")}},
	} {
		allocs := func(h rls) float64 {
			return testing.AllocsPerRun(500, func() {
				if _, err := h.ShouldRateLimit(context.Background(), req); err != nil {
					t.Fatal(err)
				}
			})
		}
		if w, wo := allocs(with), allocs(without); w > wo {
			t.Errorf("%v: %v allocations per call with envoy's counters, %v without", req.Descriptors, w, wo)
		}
	}
}

// BenchmarkEnvoyStats is BenchmarkShouldRateLimit's one-descriptor call
// with envoy's counters on.
func BenchmarkEnvoyStats(b *testing.B) {
	h := rls{envoyBenchServer(b).service}
	reqs := make([]*pb.RateLimitRequest, 10_000)
	for i := range reqs {
		reqs[i] = &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{desc(fmt.Sprintf("user=%d", i))}}
	}
	b.ReportAllocs()
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		i := int(n.Add(1)) * 7919
		for pb.Next() {
			i++
			if _, err := h.ShouldRateLimit(context.Background(), reqs[i%len(reqs)]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Under 64 concurrent callers envoy's counters stay exact: every hit in
// total_hits, the limit's worth within it and near it as envoy reckons
// from the counts each took, the rest over it.
func TestEnvoyStatsConcurrent(t *testing.T) {
	const limit = 1000
	dir := writeConfig(t, map[string]string{"d.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n"})
	ts := start(t, Options{Config: dir, EnvoyStats: true}, &fakeClock{t: time.Unix(1e9, 0)})
	var calls atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for calls.Add(1) <= 3*limit {
				if _, err := ts.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{desc("k=x")}}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	want := strings.Join([]string{
		`ratelimit_service_rate_limit_near_limit{domain="d",key1="k"} 200`,
		`ratelimit_service_rate_limit_over_limit{domain="d",key1="k"} 2000`,
		`ratelimit_service_rate_limit_total_hits{domain="d",key1="k"} 3000`,
		`ratelimit_service_rate_limit_within_limit{domain="d",key1="k"} 1000`,
	}, "\n")
	if got := envoySeriesLines(t, ts); got != want {
		t.Fatalf("after %d calls:\n%s\nwant:\n%s", 3*limit, got, want)
	}
}
