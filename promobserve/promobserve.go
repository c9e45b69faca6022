// Package promobserve makes Prometheus metrics of the decisions sluice's
// doors report (package observe): give an *Observer to
// httplimit.WithObserver, the gRPC interceptors or the service.
//
//	o, err := promobserve.New(prometheus.DefaultRegisterer)
//	if err != nil { ... }
//	m, err := httplimit.New(lim, policies, httplimit.WithObserver(o))
//
// It exports three metrics, with no key in any label (a key is per client,
// and would give an unbounded number of series):
//
//   - sluice_decisions_total{source,policy,outcome}, a counter: one per
//     policy per decision; outcome is allowed, denied, shadow_denied, error
//     or degraded (observe.Outcome's labels). The five series of a (source,
//     policy) appear together, at 0, when it is first seen or declared
//     (WithPolicies). A concurrency policy's "expired" (a lease that came
//     back before its request ended) appears when first counted.
//   - sluice_store_latency_seconds{source}, a histogram: how long the store
//     took, once per store call (the call's first Event, observe.Event.Index
//     0), from 25µs to 2.5s.
//   - sluice_wait_seconds{source}, a histogram: how long requests waited for
//     their turn (an outbound client's waits, a leaky bucket's delays), once
//     per request that waited, from 1ms to 1m.
//
// Of the library's packages only this one imports the Prometheus client: the
// root package, its stores, observe and httplimit compile without it.
package promobserve

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-go/sluice/observe"
)

// The metrics' names.
const (
	DecisionsName    = "sluice_decisions_total"
	StoreLatencyName = "sluice_store_latency_seconds"
	WaitName         = "sluice_wait_seconds"
)

// DefaultLatencyBuckets are sluice_store_latency_seconds's buckets: an
// in-process store's microseconds to a struggling Redis's seconds.
var DefaultLatencyBuckets = []float64{
	25e-6, 50e-6, 100e-6, 250e-6, 500e-6,
	.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5,
}

// DefaultWaitBuckets are sluice_wait_seconds's buckets, from 1ms to 1m.
var DefaultWaitBuckets = []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// maxSeries bounds the (source, policy) pairs whose series are kept ready:
// names are set by configuration, so a real door stays far below; past it,
// series are looked up on each Event.
const maxSeries = 4096

// Observer is an observe.Observer that counts decisions and times the store
// in Prometheus metrics. It is also a prometheus.Collector of them, which
// New registers. It is safe for concurrent use.
type Observer struct {
	decisions        *prometheus.CounterVec
	latency, waiting *prometheus.HistogramVec

	// series maps a (source, policy) to its ready series. It is copied on
	// write under mu, so that Observe reads it without a lock.
	series atomic.Pointer[map[seriesKey]*series]
	mu     sync.Mutex
}

type seriesKey struct{ source, policy string }

// series are one (source, policy)'s counters, one per outcome, and its
// source's histograms.
type series struct {
	outcomes         [len(observe.Outcomes)]prometheus.Counter
	latency, waiting prometheus.Observer
}

// Option configures an Observer.
type Option func(*config) error

type config struct {
	latency, wait []float64
	labels        prometheus.Labels
	declared      []seriesKey
}

// WithLatencyBuckets sets sluice_store_latency_seconds's bucket bounds
// (default DefaultLatencyBuckets), in seconds, increasing.
func WithLatencyBuckets(bounds ...float64) Option {
	return withBuckets("WithLatencyBuckets", bounds, func(c *config) *[]float64 { return &c.latency })
}

// WithWaitBuckets sets sluice_wait_seconds's bucket bounds (default
// DefaultWaitBuckets), in seconds, increasing.
func WithWaitBuckets(bounds ...float64) Option {
	return withBuckets("WithWaitBuckets", bounds, func(c *config) *[]float64 { return &c.wait })
}

// withBuckets is the option named name that sets the bounds field() points
// to.
func withBuckets(name string, bounds []float64, field func(*config) *[]float64) Option {
	return func(c *config) error {
		if len(bounds) == 0 {
			return fmt.Errorf("%s: no bucket", name)
		}
		for i := range bounds {
			if bounds[i] != bounds[i] || bounds[i] <= 0 || (i > 0 && bounds[i] <= bounds[i-1]) { // x != x: NaN
				return fmt.Errorf("%s: bounds %v: want positive and increasing", name, bounds)
			}
		}
		*field(c) = bounds
		return nil
	}
}

// WithConstLabels adds labels with fixed values to every series (an
// instance, a region); they must not be source, policy or outcome.
func WithConstLabels(labels prometheus.Labels) Option {
	return func(c *config) error {
		for k := range labels {
			if k == "source" || k == "policy" || k == "outcome" {
				return fmt.Errorf("WithConstLabels: label %q is the Observer's own", k)
			}
		}
		c.labels = labels
		return nil
	}
}

// WithPolicies declares a source's policies, so that their series are
// exported, at 0, before their first decision (a rate over them then starts
// at the start).
func WithPolicies(source string, policies ...string) Option {
	return func(c *config) error {
		if source == "" {
			return errors.New("WithPolicies: empty source")
		}
		for _, p := range policies {
			c.declared = append(c.declared, seriesKey{source, p})
		}
		return nil
	}
}

// New returns an Observer whose metrics are registered with reg (for
// example prometheus.DefaultRegisterer). The error says which option is
// wrong, or why reg refused the metrics (another Observer registered there
// already).
func New(reg prometheus.Registerer, opts ...Option) (*Observer, error) {
	if reg == nil {
		return nil, errors.New("promobserve: New: nil Registerer (prometheus.DefaultRegisterer is the default registry's)")
	}
	c := config{latency: DefaultLatencyBuckets, wait: DefaultWaitBuckets}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&c); err != nil {
			return nil, fmt.Errorf("promobserve: %w", err)
		}
	}
	o := &Observer{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        DecisionsName,
			Help:        "Rate-limit decisions, one per policy per request, by the door that made them (source), policy and outcome.",
			ConstLabels: c.labels,
		}, []string{"source", "policy", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:        StoreLatencyName,
			Help:        "How long the rate limiter's store took to decide, once per store call, by the door that called it (source).",
			Buckets:     c.latency,
			ConstLabels: c.labels,
		}, []string{"source"}),
		waiting: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:        WaitName,
			Help:        "How long requests waited for their turn (outbound waits, leaky-bucket delays), by the door that made them wait (source).",
			Buckets:     c.wait,
			ConstLabels: c.labels,
		}, []string{"source"}),
	}
	o.series.Store(&map[seriesKey]*series{})
	for _, k := range c.declared {
		o.lookup(k)
	}
	if err := reg.Register(o); err != nil {
		return nil, fmt.Errorf("promobserve: registering the metrics: %w", err)
	}
	return o, nil
}

// Describe sends the metrics' descriptions (prometheus.Collector).
func (o *Observer) Describe(ch chan<- *prometheus.Desc) {
	o.decisions.Describe(ch)
	o.latency.Describe(ch)
	o.waiting.Describe(ch)
}

// Collect sends the metrics (prometheus.Collector).
func (o *Observer) Collect(ch chan<- prometheus.Metric) {
	o.decisions.Collect(ch)
	o.latency.Collect(ch)
	o.waiting.Collect(ch)
}

// Observe counts e under its source, policy and outcome, and observes its
// latency and wait once per store call (observe.Event.Index 0). For a
// (source, policy) seen before it does not allocate.
func (o *Observer) Observe(e observe.Event) {
	s := (*o.series.Load())[seriesKey{e.Source, e.Policy}]
	if s == nil {
		s = o.lookup(seriesKey{e.Source, e.Policy})
	}
	if int(e.Outcome) < len(s.outcomes) {
		s.outcomes[e.Outcome].Inc()
	} else {
		o.decisions.WithLabelValues(e.Source, e.Policy, e.Outcome.String()).Inc()
	}
	if e.Index == 0 {
		if e.Latency > 0 {
			s.latency.Observe(e.Latency.Seconds())
		}
		if e.Wait > 0 {
			s.waiting.Observe(e.Wait.Seconds())
		}
	}
}

// lookup returns k's series, making them (and keeping them, while there are
// fewer than maxSeries) when they are new.
func (o *Observer) lookup(k seriesKey) *series {
	o.mu.Lock()
	defer o.mu.Unlock()
	old := *o.series.Load()
	if s := old[k]; s != nil {
		return s
	}
	// The Event's strings may not outlive the call (observe.Observer):
	// the series and the map keep copies.
	k = seriesKey{strings.Clone(k.source), strings.Clone(k.policy)}
	s := &series{latency: o.latency.WithLabelValues(k.source), waiting: o.waiting.WithLabelValues(k.source)}
	for _, oc := range observe.Outcomes {
		s.outcomes[oc] = o.decisions.WithLabelValues(k.source, k.policy, oc.String())
	}
	if len(old) < maxSeries {
		next := maps.Clone(old)
		next[k] = s
		o.series.Store(&next)
	}
	return s
}
