package serve

import (
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluice-go/sluice/cmd/sluice/internal/rlsconfig"
	"github.com/sluice-go/sluice/internal/fastclock"
	"github.com/sluice-go/sluice/observe"
)

// metrics are the service's Prometheus collectors, in a registry of the
// server's own.
type metrics struct {
	reg          *prometheus.Registry
	calls        *prometheus.CounterVec   // door, code
	latency      *prometheus.HistogramVec // door
	decisions    *prometheus.CounterVec   // domain, rule, outcome
	unitsCharged *prometheus.CounterVec   // domain, rule
	concurrency  *prometheus.CounterVec   // domain, concurrency, outcome
	storeErrors  prometheus.Counter
	degraded     prometheus.Counter
	globalShadow prometheus.Counter
	loads        *prometheus.CounterVec // result
	lastLoad     prometheus.Gauge
	rules        prometheus.Gauge
	mayEvict     prometheus.Gauge
	// the gRPC door's series, resolved once
	grpcOK, grpcOver prometheus.Counter
	grpcLatency      prometheus.Observer

	// ruleLabels are the (domain, rule) label values of the configured
	// rules' decision series, so that a reload drops those of the rules it
	// no longer has. Only a load touches it, under loads.mu.
	ruleLabels map[[2]string]bool
	// concLabels are the (domain, concurrency) label values of the
	// configured concurrency limits' lease series; only a load touches it.
	concLabels map[[2]string]*leaseCounters
	// values holds the decision series of detailed_metric and
	// value_to_metric rules, one per stat name sent, up to maxValues (the
	// value-series cap), then otherLabel's.
	valuesMu  sync.RWMutex
	values    map[[2]string]*outcomeCounters
	maxValues int
}

// The decision series (sluice_serve_rule_decisions_total) are bounded
// whatever the configuration holds (up to the limit rules, 10,000) and
// whatever values are sent: the first maxRuleSeries rules of a
// configuration, in its order, and the first value-series (limits) stat names of
// detailed_metric and value_to_metric rules have series of their own; the
// others are counted together under otherLabel, as domain and rule.
const (
	maxRuleSeries = 1000
	otherLabel    = "(other)"
)

// outcomeCounters are one label set's decision counters, by outcome.
type outcomeCounters [len(observe.Outcomes)]prometheus.Counter

func newMetrics(maxValues int64) *metrics {
	m := &metrics{
		maxValues: int(maxValues),
		reg:       prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_serve_calls_total", Help: "Calls answered, by door (grpc, json, take, charge, settle, acquire, release, extend) and code (ok, over_limit, invalid, unavailable, error; not_held: a release or an extension that found nothing held; a charge or a settle is over_limit when units were forgiven past the debt allowance).",
		}, []string{"door", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_serve_call_duration_seconds", Help: "Time to answer a call, by door.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"door"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_serve_rule_decisions_total",
			Help: "Descriptors decided, by domain, rule (its name, else its descriptor path; with detailed_metric or value_to_metric envoy's stat name with the values sent; \"override\" for a request's limit override) and outcome.",
		}, []string{"domain", "rule", "outcome"}),
		unitsCharged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_serve_units_charged_total",
			Help: "Units charged whatever the answer (a charge rule's hits, /v1/charge, /v1/settle), by domain and rule (named as in sluice_serve_rule_decisions_total, but by the rule's name or path for detailed_metric and value_to_metric rules).",
		}, []string{"domain", "rule"}),
		concurrency: newConcurrencyVec(),
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
		mayEvict: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_serve_store_may_evict", Help: "1 when a store's Redis may evict the limiter's keys (its maxmemory-policy is not noeviction: an evicted key forgets what was spent), as last checked, at start and by each /readyz.",
		}),
	}
	m.reg.MustRegister(m.calls, m.latency, m.decisions, m.unitsCharged, m.concurrency, m.storeErrors, m.degraded, m.globalShadow, m.loads, m.lastLoad, m.rules, m.mayEvict,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.grpcOK, m.grpcOver = m.calls.WithLabelValues("grpc", "ok"), m.calls.WithLabelValues("grpc", "over_limit")
	m.grpcLatency = m.latency.WithLabelValues("grpc")
	for _, r := range []string{"ok", "failed"} {
		m.loads.WithLabelValues(r)
	}
	m.ruleLabels = map[[2]string]bool{}
	m.values = map[[2]string]*outcomeCounters{}
	return m
}

// series resolves one label set's decision counters.
func (m *metrics) series(domain, rule string) outcomeCounters {
	var c outcomeCounters
	for i, o := range observe.Outcomes {
		c[i] = m.decisions.WithLabelValues(domain, rule, o.String())
	}
	return c
}

// ruleCounters are one rule's decision counters and its name in Events,
// resolved when its configuration is loaded so that a call does no label
// lookup and builds no string.
type ruleCounters struct {
	by   outcomeCounters
	name string // domain.name, or domain.path
	// label is the (domain, rule) of its series; charged its units
	// charged, resolved with the others for a rule that charges or owes
	// (a charge rule, or one with a debt allowance), else at its first
	// charge (/v1/charge), so that the other rules show no series of 0.
	label   [2]string
	charged prometheus.Counter
}

// forRules resolves the counters of a configuration's rules (but those
// that name their series by the values sent), the first maxRuleSeries
// label sets their own and the rest otherLabel's, and drops the series of
// the rules the configuration before had and this one has not. It returns
// the counters and how many rules share otherLabel's. A load calls it,
// under loads.mu.
func (m *metrics) forRules(rules []*rlsconfig.Rule) (map[*rlsconfig.Rule]*ruleCounters, int) {
	out := make(map[*rlsconfig.Rule]*ruleCounters, len(rules))
	labels := map[[2]string]bool{}
	var other *outcomeCounters
	shared := 0
	for _, r := range rules {
		if r.DetailedMetric || r.ValueToMetric {
			continue
		}
		c := &ruleCounters{name: r.Domain + "." + policyName(r)}
		l := [2]string{r.Domain, policyName(r)}
		switch {
		case labels[l] || len(labels) < maxRuleSeries:
			labels[l] = true
			c.by = m.series(l[0], l[1])
		default:
			if other == nil {
				other = new(outcomeCounters)
				*other = m.series(otherLabel, otherLabel)
			}
			c.by = *other
			l = [2]string{otherLabel, otherLabel}
			shared++
		}
		c.label = l
		if r.Charge || r.Limit.Debt > 0 {
			c.charged = m.unitsCharged.WithLabelValues(l[0], l[1])
		}
		out[r] = c
	}
	for l := range m.ruleLabels {
		if !labels[l] {
			for _, o := range observe.Outcomes {
				m.decisions.DeleteLabelValues(l[0], l[1], o.String())
			}
			m.unitsCharged.DeleteLabelValues(l[0], l[1])
		}
	}
	m.ruleLabels = labels
	return out, shared
}

// valueSeries returns the counters of a stat name sent to a
// detailed_metric or value_to_metric rule: its own while fewer than
// maxValues names have series, else otherLabel's (the first time,
// full reports it).
func (m *metrics) valueSeries(domain, stat string) (c *outcomeCounters, full bool) {
	k := [2]string{domain, stat}
	m.valuesMu.RLock()
	c = m.values[k]
	m.valuesMu.RUnlock()
	if c != nil {
		return c, false
	}
	m.valuesMu.Lock()
	defer m.valuesMu.Unlock()
	if c = m.values[k]; c != nil {
		return c, false
	}
	if len(m.values) >= m.maxValues {
		k = [2]string{otherLabel, otherLabel}
		if c = m.values[k]; c != nil {
			return c, false
		}
		full = true
	}
	c = new(outcomeCounters)
	*c = m.series(k[0], k[1])
	m.values[k] = c
	return c, full
}

// observe counts one descriptor's outcome and passes it to the options'
// observer; idx is its place among the call's Events.
func (s *service) observe(st *state, domain string, r *rlsconfig.Rule, entries []rlsconfig.Entry, o observe.Outcome, latency time.Duration, idx int) {
	c := st.counters[r]
	switch {
	case r.DetailedMetric || r.ValueToMetric:
		// the values sent, as envoy names them: asked for by the rule
		vc, full := s.metrics.valueSeries(domain, r.StatKey(entries))
		vc[o].Inc()
		if full {
			s.log.Warn("detailed_metric and value_to_metric values beyond the first ones are counted together in sluice_serve_rule_decisions_total{rule=\""+otherLabel+"\"}", "series", s.metrics.maxValues, "cap", "--limit value-series=N raises it")
		}
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

// observeCharge counts the units a descriptor of rule r charged, and
// passes them to Options.Charged.
func (s *service) observeCharge(st *state, domain string, r *rlsconfig.Rule, units int64) {
	c := st.counters[r]
	switch {
	case c != nil && c.charged != nil:
		c.charged.Add(float64(units))
	case c != nil:
		s.metrics.unitsCharged.WithLabelValues(c.label[0], c.label[1]).Add(float64(units))
	case r.DetailedMetric || r.ValueToMetric:
		s.metrics.unitsCharged.WithLabelValues(domain, policyName(r)).Add(float64(units))
	default: // a limit override
		s.metrics.unitsCharged.WithLabelValues(domain, "override").Add(float64(units))
	}
	if s.opts.Charged != nil {
		name := r.Domain + "." + policyName(r)
		if c != nil {
			name = c.name
		}
		s.opts.Charged(name, units)
	}
}

// observeError counts a failed call's limited descriptors as errors.
func (s *service) observeError(st *state, p *plan, err error, latency time.Duration) {
	if _, bad := err.(*requestError); !bad {
		s.metrics.storeErrors.Inc()
		s.logStoreError(err)
	}
	n := 0
	for i := range p.desc {
		if ds := &p.desc[i]; ds.kind == kindEnforced || ds.kind == kindShadow || ds.kind == kindQuota || ds.kind == kindCharge {
			s.observe(st, p.req.Domain, ds.rule, p.entries[i], observe.Error, latency, n)
			n++
		}
	}
}

// logStoreError logs a store's failure at most once a second, with the
// number of failures since the last line, so that an outage does not flood
// the log.
func (s *service) logStoreError(err error) {
	n := s.storeErrs.Add(1)
	now := fastclock.Micros()
	last := s.storeErrLogged.Load()
	if now-last < 1_000_000 || !s.storeErrLogged.CompareAndSwap(last, now) {
		return
	}
	s.storeErrs.Add(-n)
	s.log.Warn("the store could not decide", "err", err, "failures", n)
}
