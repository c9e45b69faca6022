package serve

import (
	"math"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-go/sluice/cmd/sluice/internal/rlsconfig"
)

// DefaultNearLimitRatio is envoy's NEAR_LIMIT_RATIO default: a hit that
// takes a window's count above this share of its limit, and within it, is
// near the limit.
const DefaultNearLimitRatio = 0.8

// envoyFamilies are envoyproxy/ratelimit's per-rule series, as its
// Prometheus sink (statsd_exporter and its default mapping) names them.
var envoyFamilies = [...]string{
	"ratelimit_service_rate_limit_total_hits",
	"ratelimit_service_rate_limit_over_limit",
	"ratelimit_service_rate_limit_near_limit",
	"ratelimit_service_rate_limit_within_limit",
	"ratelimit_service_rate_limit_shadow_mode",
}

const (
	totalHits = iota
	overLimit
	nearLimit
	withinLimit
	shadowMode
)

// envoyStats counts each rule's hits as envoyproxy/ratelimit does
// (Options.EnvoyStats), so that dashboards and alerts built on its
// Prometheus output work unchanged: per stat name (rlsconfig.Rule.StatKey,
// sanitized as envoy does), its hits in total, over the limit, near it
// (above the near-limit ratio of the limit and within it), within it, and
// over it in shadow mode. A Prometheus collector, it exports each counter
// once it is not zero, as envoy's sink does.
type envoyStats struct {
	ratio  float32
	mu     sync.Mutex // creates series
	series sync.Map   // sanitized stat name → *envoySeries
	n      int        // series, under mu
	max    int        // the stat-series cap: detailed_metric and value_to_metric name series by the values sent
	full   atomic.Bool
}

// envoySeries is one stat name's counters and its Prometheus labels.
type envoySeries struct {
	labels []string // domain, key1[, key2]
	c      [len(envoyFamilies)]atomic.Uint64
}

func newEnvoyStats(ratio float64, max int64) *envoyStats {
	return &envoyStats{ratio: float32(ratio), max: int(max)}
}

// forKey is the series of stat name key (unsanitized), nil when the bound
// is reached.
func (e *envoyStats) forKey(key string) *envoySeries {
	name := sanitizeStat(key)
	if s, ok := e.series.Load(name); ok {
		return s.(*envoySeries)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if s, ok := e.series.Load(name); ok {
		return s.(*envoySeries)
	}
	if e.n >= e.max {
		e.full.Store(true)
		return nil
	}
	s := &envoySeries{labels: envoyLabels(name)}
	e.series.Store(name, s)
	e.n++
	return s
}

// ruleSeries is a state's series per rule, for the rules whose stat name
// the configuration fixes (no detailed_metric, value_to_metric or
// override): found once per configuration.
type ruleSeries struct{ m sync.Map } // *rlsconfig.Rule → *envoySeries

// record counts a decided call's descriptors that have a limit.
func (e *envoyStats) record(st *state, p *plan) {
	for i := range p.desc {
		ds := &p.desc[i]
		if ds.kind == kindNone || ds.kind == kindRefund || ds.kind == kindUnlimited {
			continue
		}
		_, fixed := st.counters[ds.rule]
		e.count(st.envoyRules, ds.rule, p.entries[i], fixed, cost(p.req, p.req.Descriptors[i]), ds.res.Remaining, ds.over, ds.shadow(), ds.kind == kindCharge && !ds.zero)
	}
}

// count counts one descriptor's hits, decided (over: refused) with
// remaining left in its window (after the hits when granted), as envoy's
// limiter does: hits are over the limit, near it or within it by where
// they take the window's count, which envoy raises even for refused hits.
// fixed: the configuration fixes r's stat name (state.counters has r).
// charged: the hits were charged whatever the answer, and remaining (less
// than 0 in debt) is after them, refused or not: they took the count from
// limit − remaining − hits to limit − remaining, over it past the limit.
func (e *envoyStats) count(rs *ruleSeries, r *rlsconfig.Rule, entries []rlsconfig.Entry, fixed bool, hits, remaining int64, over, shadow, charged bool) {
	var s *envoySeries
	if fixed {
		if v, ok := rs.m.Load(r); ok {
			s = v.(*envoySeries)
		}
	}
	if s == nil {
		if s = e.forKey(r.StatKey(entries)); s == nil {
			return
		}
		if fixed {
			rs.m.Store(r, s)
		}
	}
	limit := uint64(max(r.RequestsPerUnit, 0))
	h := uint64(max(hits, 0))
	left := uint64(min(max(remaining, 0), int64(limit)))
	near := uint64(math.Floor(float64(float32(limit) * e.ratio)))
	var before, after uint64
	switch {
	case charged:
		after = limit + uint64(max(-remaining, 0)) - left
		before = after - min(h, after)
		over = after > limit
	case over:
		before = limit - left
		after = before + h
	default:
		after = limit - left
		before = after - min(h, after)
	}
	s.c[totalHits].Add(h)
	switch {
	case over && before >= limit:
		s.c[overLimit].Add(h)
	case over:
		s.c[overLimit].Add(after - limit)
		s.c[nearLimit].Add(limit - max(near, before))
	case after > near && before >= near:
		s.c[nearLimit].Add(h)
		s.c[withinLimit].Add(h)
	case after > near:
		s.c[nearLimit].Add(after - near)
		s.c[withinLimit].Add(h)
	default:
		s.c[withinLimit].Add(h)
	}
	if over && shadow {
		if before >= limit {
			s.c[shadowMode].Add(h)
		} else {
			s.c[shadowMode].Add(after - limit)
		}
	}
}

// Describe describes nothing: the series' labels vary (two or three), as
// envoy's do, so the collector is unchecked.
func (e *envoyStats) Describe(chan<- *prometheus.Desc) {}

// Collect exports each series' counters that are not zero.
func (e *envoyStats) Collect(ch chan<- prometheus.Metric) {
	descs := map[int]*[len(envoyFamilies)]*prometheus.Desc{}
	e.series.Range(func(_, v any) bool {
		s := v.(*envoySeries)
		d := descs[len(s.labels)]
		if d == nil {
			d = new([len(envoyFamilies)]*prometheus.Desc)
			names := []string{"domain", "key1", "key2"}[:len(s.labels)]
			for i, f := range envoyFamilies {
				d[i] = prometheus.NewDesc(f, "envoyproxy/ratelimit's "+strings.TrimPrefix(f, "ratelimit_service_rate_limit_")+" (--envoy-stats)", names, nil)
			}
			descs[len(s.labels)] = d
		}
		for i := range envoyFamilies {
			if n := s.c[i].Load(); n != 0 {
				ch <- prometheus.MustNewConstMetric(d[i], prometheus.CounterValue, float64(n), s.labels...)
			}
		}
		return true
	})
}

// ipv4 is envoy's pattern for an address in a stat name, whose dots it
// replaces.
var ipv4 = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

// sanitizeStat is envoy's SanitizeStatName: ':' and '|' become '_', and
// so do the dots of an IPv4 address.
func sanitizeStat(s string) string {
	s = strings.NewReplacer(":", "_", "|", "_").Replace(s)
	return ipv4.ReplaceAllStringFunc(s, func(ip string) string { return strings.ReplaceAll(ip, ".", "_") })
}

// envoyLabels are the labels envoy's default statsd mapping gives a stat
// name's parts: domain and key1 for two, domain, key1 and key2 for more
// (the rest dropped).
func envoyLabels(name string) []string {
	parts := strings.SplitN(name, ".", 4)
	if len(parts) > 3 {
		parts = parts[:3]
	}
	return parts
}
