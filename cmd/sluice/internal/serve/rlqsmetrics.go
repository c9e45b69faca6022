package serve

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-go/sluice/cmd/sluice/internal/rlqs"
)

// rlqsMetrics are the RLQS service's series: its streams, reports and
// actions as counters, and each budget family's (rule's) figures read
// from the allocator at each scrape.
type rlqsMetrics struct {
	q                        *rlqsService
	streams                  prometheus.Gauge
	reports, pushes, dropped prometheus.Counter
	sliceFailures            prometheus.Counter
	actions, refused         *prometheus.CounterVec
	// the actions' counters, by action (the rounds count one per bucket)
	tokenBucket, denyAll, abandon prometheus.Counter

	rate, demand, granted, outstanding, clients, slice *prometheus.Desc
}

func newRLQSMetrics(q *rlqsService) *rlqsMetrics {
	family := []string{"domain", "rule"}
	m := &rlqsMetrics{q: q,
		streams:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_rlqs_streams", Help: "RLQS streams open: clients."}),
		reports:       prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_rlqs_bucket_reports_total", Help: "Bucket usage reports received."}),
		pushes:        prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_rlqs_pushes_total", Help: "Messages the rounds sent between reports (cuts, rises, refreshes)."}),
		dropped:       prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_rlqs_pushes_dropped_total", Help: "Round messages dropped because the client's stream had no room (a slow client; its grant is resent at its next report)."}),
		sliceFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_rlqs_slice_renewals_failed_total", Help: "Budgets whose slice this replica could not renew from the store (it grants from the slice it holds until that ends, then DENY_ALL)."}),
		actions:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_rlqs_actions_total", Help: "Bucket actions sent, by action (token_bucket, allow_all, deny_all, abandon)."}, []string{"action"}),
		refused:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_rlqs_refused_total", Help: "Bucket reports refused, by the limit they were over (a bucket is answered DENY_ALL; rlqs-reports ends the stream)."}, []string{"limit"}),

		rate:        prometheus.NewDesc("sluice_rlqs_budget_rate", "The rate the rule's budgets share, per second, summed over its budgets.", family, nil),
		demand:      prometheus.NewDesc("sluice_rlqs_budget_demand", "The clients' estimated demand (allowed + denied) per second, summed over the rule's budgets.", family, nil),
		granted:     prometheus.NewDesc("sluice_rlqs_budget_granted", "The rate granted to the clients, per second, summed over the rule's budgets.", family, nil),
		outstanding: prometheus.NewDesc("sluice_rlqs_budget_outstanding", "The rate leased (granted, and cut but not yet expired), per second, summed over the rule's budgets: never above the rate.", family, nil),
		clients:     prometheus.NewDesc("sluice_rlqs_budget_clients", "Clients holding a share of the rule's budgets.", family, nil),
		slice:       prometheus.NewDesc("sluice_rlqs_budget_slice", "The rate this replica grants from, per second, summed over the rule's budgets: the rate, or over Redis its slice of it.", family, nil),
	}
	q.s.metrics.reg.MustRegister(m.streams, m.reports, m.pushes, m.dropped, m.sliceFailures, m.actions, m.refused, m)
	m.actions.WithLabelValues("allow_all")
	m.tokenBucket, m.denyAll, m.abandon = m.actions.WithLabelValues("token_bucket"), m.actions.WithLabelValues("deny_all"), m.actions.WithLabelValues("abandon")
	return m
}

// Describe sends the per-family descriptions.
func (m *rlqsMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.rate, m.demand, m.granted, m.outstanding, m.clients, m.slice} {
		ch <- d
	}
}

// familyFigures are one family's figures, per second.
type familyFigures struct {
	rate, demand, granted, outstanding, clients, slice float64
}

// Collect reads every budget's figures and sends them summed by family,
// the first maxRuleSeries families their own, the rest otherLabel's.
func (m *rlqsMetrics) Collect(ch chan<- prometheus.Metric) {
	q := m.q
	byFamily := map[string]*familyFigures{}
	var order []string
	q.mu.Lock()
	q.alloc.Each(q.now(), func(b rlqs.BudgetStats) {
		f := byFamily[b.Family]
		if f == nil {
			if len(order) >= maxRuleSeries {
				b.Family = otherLabel + "\x00" + otherLabel
				f = byFamily[b.Family]
			}
			if f == nil {
				f = &familyFigures{}
				byFamily[b.Family] = f
				order = append(order, b.Family)
			}
		}
		perSecond := 1 / b.Fill.Seconds()
		f.rate += float64(b.Rate) * perSecond
		f.demand += b.Demand * perSecond
		f.granted += float64(b.Granted) * perSecond
		f.outstanding += float64(b.Outstanding) * perSecond
		f.clients += float64(b.Holders)
		f.slice += float64(b.Slice) * perSecond
	})
	q.mu.Unlock()
	for _, fam := range order {
		f := byFamily[fam]
		domain, rule, _ := strings.Cut(fam, "\x00")
		for _, v := range []struct {
			d *prometheus.Desc
			v float64
		}{{m.rate, f.rate}, {m.demand, f.demand}, {m.granted, f.granted}, {m.outstanding, f.outstanding}, {m.clients, f.clients}, {m.slice, f.slice}} {
			ch <- prometheus.MustNewConstMetric(v.d, prometheus.GaugeValue, v.v, domain, rule)
		}
	}
}
