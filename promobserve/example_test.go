package promobserve_test

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/promobserve"
)

// An API limited to 2 requests a minute per client IP, with its decisions
// counted in Prometheus metrics and served on /metrics.
func ExampleNew() {
	reg := prometheus.NewRegistry() // or prometheus.DefaultRegisterer
	o, err := promobserve.New(reg)
	if err != nil {
		fmt.Println(err)
		return
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // a frozen clock keeps the output stable
	lim := sluice.New(memstore.New(memstore.WithClock(frozenClock(now))))
	m, err := httplimit.New(lim, []httplimit.Policy{
		{Name: "per-ip", Limit: sluice.PerMinute(2)},
	}, httplimit.WithObserver(o))
	if err != nil {
		fmt.Println(err)
		return
	}
	mux := http.NewServeMux()
	mux.Handle("/", m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{})) // not limited
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for range 3 {
		resp, err := http.Get(srv.URL + "/hello")
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
	}
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "sluice_decisions_total{") ||
			strings.HasPrefix(line, "sluice_store_latency_seconds_count") {
			fmt.Println(line)
		}
	}
	// Output:
	// sluice_decisions_total{outcome="allowed",policy="per-ip",source="http"} 2
	// sluice_decisions_total{outcome="degraded",policy="per-ip",source="http"} 0
	// sluice_decisions_total{outcome="denied",policy="per-ip",source="http"} 1
	// sluice_decisions_total{outcome="error",policy="per-ip",source="http"} 0
	// sluice_decisions_total{outcome="shadow_denied",policy="per-ip",source="http"} 0
	// sluice_store_latency_seconds_count{source="http"} 3
}
