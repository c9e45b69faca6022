package promobserve_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-go/sluice/observe"
	"github.com/sluice-go/sluice/promobserve"
)

// BenchmarkObserve measures one Event of a known policy: the first of its
// store call (a counter and the latency histogram) and a later one (the
// counter only), on one goroutine and on all.
func BenchmarkObserve(b *testing.B) {
	o, err := promobserve.New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		e    observe.Event
	}{
		{"first", observe.Event{Source: "http", Policy: "per-ip", Outcome: observe.Allowed, Latency: 80 * time.Microsecond}},
		{"later", observe.Event{Source: "http", Policy: "per-user", Outcome: observe.Denied, Latency: 80 * time.Microsecond, Index: 1}},
	} {
		o.Observe(tc.e)
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				o.Observe(tc.e)
			}
		})
		b.Run(tc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					o.Observe(tc.e)
				}
			})
		})
	}
}
