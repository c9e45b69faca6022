package promobserve_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/observe"
	"github.com/sluice-go/sluice/promobserve"
)

func mustNew(t testing.TB, reg prometheus.Registerer, opts ...promobserve.Option) *promobserve.Observer {
	t.Helper()
	o, err := promobserve.New(reg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// Events become counts per (source, policy, outcome); latency and wait are
// observed once per store call; declared policies are exported at 0.
func TestObserverMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	o := mustNew(t, reg, promobserve.WithPolicies("grpc", "quiet"),
		promobserve.WithLatencyBuckets(.001, 1), promobserve.WithWaitBuckets(1))
	for range 3 { // a two-policy composite admitted: one store call
		o.Observe(observe.Event{Source: "http", Policy: "ip", Outcome: observe.Allowed, Latency: 500 * time.Microsecond})
		o.Observe(observe.Event{Source: "http", Policy: "user", Outcome: observe.Allowed, Latency: 500 * time.Microsecond, Index: 1})
	}
	o.Observe(observe.Event{Source: "http", Policy: "ip", Outcome: observe.Denied, Latency: 2 * time.Millisecond})
	o.Observe(observe.Event{Source: "http", Policy: "user", Outcome: observe.ShadowDenied, Latency: 3 * time.Second})
	o.Observe(observe.Event{Source: "http", Policy: "user", Outcome: observe.Error}) // no store call
	o.Observe(observe.Event{Source: "http-out", Policy: "ip", Outcome: observe.Degraded, Latency: time.Millisecond, Wait: 2 * time.Second})
	o.Observe(observe.Event{Source: "http-out", Policy: "ip", Outcome: observe.Outcome(9)})
	want := `
# HELP sluice_decisions_total Rate-limit decisions, one per policy per request, by the door that made them (source), policy and outcome.
# TYPE sluice_decisions_total counter
sluice_decisions_total{outcome="allowed",policy="ip",source="http"} 3
sluice_decisions_total{outcome="denied",policy="ip",source="http"} 1
sluice_decisions_total{outcome="shadow_denied",policy="ip",source="http"} 0
sluice_decisions_total{outcome="error",policy="ip",source="http"} 0
sluice_decisions_total{outcome="degraded",policy="ip",source="http"} 0
sluice_decisions_total{outcome="allowed",policy="user",source="http"} 3
sluice_decisions_total{outcome="denied",policy="user",source="http"} 0
sluice_decisions_total{outcome="shadow_denied",policy="user",source="http"} 1
sluice_decisions_total{outcome="error",policy="user",source="http"} 1
sluice_decisions_total{outcome="degraded",policy="user",source="http"} 0
sluice_decisions_total{outcome="allowed",policy="ip",source="http-out"} 0
sluice_decisions_total{outcome="denied",policy="ip",source="http-out"} 0
sluice_decisions_total{outcome="shadow_denied",policy="ip",source="http-out"} 0
sluice_decisions_total{outcome="error",policy="ip",source="http-out"} 0
sluice_decisions_total{outcome="degraded",policy="ip",source="http-out"} 1
sluice_decisions_total{outcome="unknown",policy="ip",source="http-out"} 1
sluice_decisions_total{outcome="allowed",policy="quiet",source="grpc"} 0
sluice_decisions_total{outcome="denied",policy="quiet",source="grpc"} 0
sluice_decisions_total{outcome="shadow_denied",policy="quiet",source="grpc"} 0
sluice_decisions_total{outcome="error",policy="quiet",source="grpc"} 0
sluice_decisions_total{outcome="degraded",policy="quiet",source="grpc"} 0
# HELP sluice_store_latency_seconds How long the rate limiter's store took to decide, once per store call, by the door that called it (source).
# TYPE sluice_store_latency_seconds histogram
sluice_store_latency_seconds_bucket{source="grpc",le="0.001"} 0
sluice_store_latency_seconds_bucket{source="grpc",le="1"} 0
sluice_store_latency_seconds_bucket{source="grpc",le="+Inf"} 0
sluice_store_latency_seconds_sum{source="grpc"} 0
sluice_store_latency_seconds_count{source="grpc"} 0
sluice_store_latency_seconds_bucket{source="http",le="0.001"} 3
sluice_store_latency_seconds_bucket{source="http",le="1"} 4
sluice_store_latency_seconds_bucket{source="http",le="+Inf"} 5
sluice_store_latency_seconds_sum{source="http"} 3.0035
sluice_store_latency_seconds_count{source="http"} 5
sluice_store_latency_seconds_bucket{source="http-out",le="0.001"} 1
sluice_store_latency_seconds_bucket{source="http-out",le="1"} 1
sluice_store_latency_seconds_bucket{source="http-out",le="+Inf"} 1
sluice_store_latency_seconds_sum{source="http-out"} 0.001
sluice_store_latency_seconds_count{source="http-out"} 1
# HELP sluice_wait_seconds How long requests waited for their turn (outbound waits, leaky-bucket delays), by the door that made them wait (source).
# TYPE sluice_wait_seconds histogram
sluice_wait_seconds_bucket{source="grpc",le="1"} 0
sluice_wait_seconds_bucket{source="grpc",le="+Inf"} 0
sluice_wait_seconds_sum{source="grpc"} 0
sluice_wait_seconds_count{source="grpc"} 0
sluice_wait_seconds_bucket{source="http",le="1"} 0
sluice_wait_seconds_bucket{source="http",le="+Inf"} 0
sluice_wait_seconds_sum{source="http"} 0
sluice_wait_seconds_count{source="http"} 0
sluice_wait_seconds_bucket{source="http-out",le="1"} 0
sluice_wait_seconds_bucket{source="http-out",le="+Inf"} 1
sluice_wait_seconds_sum{source="http-out"} 2
sluice_wait_seconds_count{source="http-out"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndLint(reg); err != nil || len(n) > 0 {
		t.Errorf("lint: %v %v", n, err)
	}
}

// The Observer keeps copies of an Event's strings, not the strings.
func TestObserverCopiesNames(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	o := mustNew(t, reg)
	buf := []byte("policy-a")
	name := unsafeString(buf)
	o.Observe(observe.Event{Source: "http", Policy: name})
	copy(buf, "policy-b")
	o.Observe(observe.Event{Source: "http", Policy: "policy-a"})
	if got := policyTotal(t, reg, "policy-a"); got != 2 {
		t.Fatalf("policy-a counted %v times, want 2", got)
	}
}

// An Event of a known (source, policy) allocates nothing.
func TestObserveDoesNotAllocate(t *testing.T) {
	o := mustNew(t, prometheus.NewRegistry())
	e := observe.Event{Source: "http", Policy: "per-ip", Outcome: observe.Denied, Latency: time.Millisecond, Wait: time.Second}
	o.Observe(e)
	if n := testing.AllocsPerRun(1000, func() { o.Observe(e) }); n != 0 {
		t.Errorf("Observe allocates %v times", n)
	}
}

// Concurrent first sightings of the same and different policies count every
// Event exactly once.
func TestObserverConcurrent(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	o := mustNew(t, reg)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 200 {
				o.Observe(observe.Event{Source: "http", Policy: fmt.Sprint("p", (g+i)%8), Outcome: observe.Allowed, Latency: time.Microsecond})
			}
		})
	}
	wg.Wait()
	total := 0.0
	for p := range 8 {
		total += policyTotal(t, reg, fmt.Sprint("p", p))
	}
	if total != 16*200 {
		t.Errorf("counted %v events, want %d", total, 16*200)
	}
	if n := testutil.CollectAndCount(o, promobserve.DecisionsName); n != 8*len(observe.Outcomes) {
		t.Errorf("%d decision series, want %d", n, 8*len(observe.Outcomes))
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		reg  prometheus.Registerer
		opts []promobserve.Option
	}{
		{"nil registerer", nil, nil},
		{"no latency bucket", prometheus.NewRegistry(), []promobserve.Option{promobserve.WithLatencyBuckets()}},
		{"decreasing buckets", prometheus.NewRegistry(), []promobserve.Option{promobserve.WithWaitBuckets(1, .5)}},
		{"negative bucket", prometheus.NewRegistry(), []promobserve.Option{promobserve.WithWaitBuckets(-1)}},
		{"own label", prometheus.NewRegistry(), []promobserve.Option{promobserve.WithConstLabels(prometheus.Labels{"policy": "x"})}},
		{"empty source", prometheus.NewRegistry(), []promobserve.Option{promobserve.WithPolicies("", "p")}},
	} {
		if o, err := promobserve.New(tc.reg, tc.opts...); err == nil || o != nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	reg := prometheus.NewRegistry()
	mustNew(t, reg)
	if _, err := promobserve.New(reg); err == nil {
		t.Error("a second Observer registered its metrics on the same registry")
	}
	// Const labels of the same names tell two Observers apart on one
	// registry.
	reg2 := prometheus.NewRegistry()
	mustNew(t, reg2, promobserve.WithConstLabels(prometheus.Labels{"limiter": "a"}))
	mustNew(t, reg2, promobserve.WithConstLabels(prometheus.Labels{"limiter": "b"}))
}

// The middleware's decisions, scraped over TCP from a promhttp handler as
// Prometheus would.
func TestScrapeMiddlewareMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	o := mustNew(t, reg)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // frozen: nothing refills
	lim := sluice.New(memstore.New(memstore.WithClock(frozenClock(now))))
	m, err := httplimit.New(lim, []httplimit.Policy{
		{Name: "per-ip", Limit: sluice.PerMinute(4)},
		{Name: "shadow", Limit: sluice.PerMinute(2), Key: httplimit.Static("all"), Shadow: true},
	}, httplimit.WithObserver(o))
	if err != nil {
		t.Fatal(err)
	}
	app := httptest.NewServer(m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer app.Close()
	metrics := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer metrics.Close()
	for range 6 {
		resp, err := app.Client().Get(app.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	want := `
# HELP sluice_decisions_total Rate-limit decisions, one per policy per request, by the door that made them (source), policy and outcome.
# TYPE sluice_decisions_total counter
sluice_decisions_total{outcome="allowed",policy="per-ip",source="http"} 4
sluice_decisions_total{outcome="denied",policy="per-ip",source="http"} 2
sluice_decisions_total{outcome="shadow_denied",policy="per-ip",source="http"} 0
sluice_decisions_total{outcome="error",policy="per-ip",source="http"} 0
sluice_decisions_total{outcome="degraded",policy="per-ip",source="http"} 0
sluice_decisions_total{outcome="allowed",policy="shadow",source="http"} 2
sluice_decisions_total{outcome="denied",policy="shadow",source="http"} 0
sluice_decisions_total{outcome="shadow_denied",policy="shadow",source="http"} 4
sluice_decisions_total{outcome="error",policy="shadow",source="http"} 0
sluice_decisions_total{outcome="degraded",policy="shadow",source="http"} 0
`
	if err := testutil.ScrapeAndCompare(metrics.URL, strings.NewReader(want), promobserve.DecisionsName); err != nil {
		t.Error(err)
	}
	// 6 requests, each an enforced and a shadow store call.
	resp, err := metrics.Client().Get(metrics.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if line := `sluice_store_latency_seconds_count{source="http"} 12`; !strings.Contains(string(body), line+"\n") {
		t.Errorf("scrape lacks %q:\n%s", line, body)
	}
}

// policyTotal sums the decisions of policy in g, over sources and outcomes.
func policyTotal(t *testing.T, g prometheus.Gatherer, policy string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != promobserve.DecisionsName {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "policy" && l.GetValue() == policy {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

// unsafeString is a string over b's bytes: what a caller that reuses its
// buffer would pass.
func unsafeString(b []byte) string { return unsafe.String(&b[0], len(b)) }

// TestObserverExpired: a concurrency policy's expired lease is counted
// under outcome "expired", a series that appears only when first seen (a
// rate policy gains none).
func TestObserverExpired(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	o := mustNew(t, reg)
	o.Observe(observe.Event{Source: "http", Policy: "exports", Outcome: observe.Allowed})
	if n := testutil.CollectAndCount(o, promobserve.DecisionsName); n != len(observe.Outcomes) {
		t.Fatalf("%d series before any expiry, want %d", n, len(observe.Outcomes))
	}
	o.Observe(observe.Event{Source: "http", Policy: "exports", Outcome: observe.Expired})
	want := `
# HELP sluice_decisions_total Rate-limit decisions, one per policy per request, by the door that made them (source), policy and outcome.
# TYPE sluice_decisions_total counter
sluice_decisions_total{outcome="allowed",policy="exports",source="http"} 1
sluice_decisions_total{outcome="degraded",policy="exports",source="http"} 0
sluice_decisions_total{outcome="denied",policy="exports",source="http"} 0
sluice_decisions_total{outcome="error",policy="exports",source="http"} 0
sluice_decisions_total{outcome="expired",policy="exports",source="http"} 1
sluice_decisions_total{outcome="shadow_denied",policy="exports",source="http"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), promobserve.DecisionsName); err != nil {
		t.Fatal(err)
	}
}
