package serve

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluice-go/sluice/internal/fastclock"
	"github.com/sluice-go/sluice/internal/rlsconfig"
	"github.com/sluice-go/sluice/observe"
)

// metrics are the service's Prometheus collectors, in a registry of the
// server's own.
type metrics struct {
	reg          *prometheus.Registry
	calls        *prometheus.CounterVec   // door, code
	latency      *prometheus.HistogramVec // door
	decisions    *prometheus.CounterVec   // domain, rule, outcome
	storeErrors  prometheus.Counter
	degraded     prometheus.Counter
	globalShadow prometheus.Counter
	loads        *prometheus.CounterVec // result
	lastLoad     prometheus.Gauge
	rules        prometheus.Gauge
	// the gRPC door's series, resolved once
	grpcOK, grpcOver prometheus.Counter
	grpcLatency      prometheus.Observer
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_serve_calls_total", Help: "Calls answered, by door (grpc, json, take) and code (ok, over_limit, invalid, unavailable, error).",
		}, []string{"door", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_serve_call_duration_seconds", Help: "Time to answer a call, by door.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"door"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_serve_rule_decisions_total",
			Help: "Descriptors decided, by domain, rule (its name, else its descriptor path; with detailed_metric or value_to_metric envoy's stat name with the values sent; \"override\" for a request's limit override) and outcome.",
		}, []string{"domain", "rule", "outcome"}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_serve_store_errors_total", Help: "Decisions the store could not make (the call failed, or a shadow rule was skipped).",
		}),
		degraded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_serve_degraded_total", Help: "Calls decided by the store's failure policy (fail open, local fallback) while it was unavailable.",
		}),
		globalShadow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_serve_global_shadow_total", Help: "Calls over the limit answered OK because of --shadow.",
		}),
		loads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_serve_config_loads_total", Help: "Configuration loads, by result (ok, failed).",
		}, []string{"result"}),
		lastLoad: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_serve_config_last_load_timestamp_seconds", Help: "When the configuration in use was loaded.",
		}),
		rules: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_serve_config_rules", Help: "Rules in the configuration in use.",
		}),
	}
	m.reg.MustRegister(m.calls, m.latency, m.decisions, m.storeErrors, m.degraded, m.globalShadow, m.loads, m.lastLoad, m.rules,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.grpcOK, m.grpcOver = m.calls.WithLabelValues("grpc", "ok"), m.calls.WithLabelValues("grpc", "over_limit")
	m.grpcLatency = m.latency.WithLabelValues("grpc")
	for _, r := range []string{"ok", "failed"} {
		m.loads.WithLabelValues(r)
	}
	return m
}

// ruleCounters are one rule's decision counters and its name in Events,
// resolved when its configuration is loaded so that a call does no label
// lookup and builds no string.
type ruleCounters struct {
	by   [len(observe.Outcomes)]prometheus.Counter
	name string // domain.name, or domain.path
}

func (m *metrics) ruleCounters(r *rlsconfig.Rule) *ruleCounters {
	c := ruleCounters{name: r.Domain + "." + policyName(r)}
	for i, o := range observe.Outcomes {
		c.by[i] = m.decisions.WithLabelValues(r.Domain, policyName(r), o.String())
	}
	return &c
}

// observe counts one descriptor's outcome and passes it to the options'
// observer; idx is its place among the call's Events.
func (s *Server) observe(st *state, domain string, r *rlsconfig.Rule, entries []rlsconfig.Entry, o observe.Outcome, latency time.Duration, idx int) {
	c := st.counters[r]
	switch {
	case r.DetailedMetric || r.ValueToMetric:
		// the values sent, as envoy names them: asked for by the rule
		s.metrics.decisions.WithLabelValues(domain, r.StatKey(entries), o.String()).Inc()
	case c != nil:
		c.by[o].Inc()
	default: // a limit override: one series per domain
		s.metrics.decisions.WithLabelValues(domain, "override", o.String()).Inc()
	}
	if s.opts.Observer == nil && (o != observe.Denied || s.opts.Refused == nil) {
		return
	}
	var name string
	if c != nil {
		name = c.name
	} else {
		name = r.Domain + "." + policyName(r)
	}
	if s.opts.Observer != nil {
		s.opts.Observer.Observe(observe.Event{Source: "serve", Policy: name, Outcome: o, Latency: latency, Index: idx})
	}
	if o == observe.Denied && s.opts.Refused != nil {
		var b strings.Builder
		for i, e := range entries {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(e.Key)
			b.WriteByte('=')
			b.WriteString(e.Value)
		}
		s.opts.Refused(name, b.String())
	}
}

// observeError counts a failed call's limited descriptors as errors.
func (s *Server) observeError(st *state, domain string, sc *scratch, err error, latency time.Duration) {
	if _, bad := err.(*requestError); !bad {
		s.metrics.storeErrors.Inc()
		s.logStoreError(err)
	}
	n := 0
	for i := range sc.desc {
		if ds := &sc.desc[i]; ds.kind == kindEnforced || ds.kind == kindShadow || ds.kind == kindQuota {
			s.observe(st, domain, ds.rule, sc.entries[i], observe.Error, latency, n)
			n++
		}
	}
}

// logStoreError logs a store's failure at most once a second, with the
// number of failures since the last line, so that an outage does not flood
// the log.
func (s *Server) logStoreError(err error) {
	n := s.storeErrs.Add(1)
	now := fastclock.Micros()
	last := s.storeErrLogged.Load()
	if now-last < 1_000_000 || !s.storeErrLogged.CompareAndSwap(last, now) {
		return
	}
	s.storeErrs.Add(-n)
	s.log.Warn("the store could not decide", "err", err, "failures", n)
}
