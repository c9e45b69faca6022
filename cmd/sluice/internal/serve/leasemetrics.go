package serve

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/redisstore"
)

// leaseCollector exports the leases of the service's Redis stores
// (redisstore.WithLeases, --store-leases), read at each scrape: the units
// held now (spent in Redis, not yet admitted: what another instance may be
// refused while this one holds them), the decisions made from slices and
// in Redis, and the fate of the units leased.
type leaseCollector struct {
	stores                map[string]*redisstore.Store // by label: main, per_second
	held, decisions, fate *prometheus.Desc
}

// newLeaseCollector returns the collector of main's and perSecond's leases,
// or nil when neither is a Redis store with leases.
func newLeaseCollector(main, perSecond sluice.Store) prometheus.Collector {
	c := &leaseCollector{stores: map[string]*redisstore.Store{}}
	for label, st := range map[string]sluice.Store{"main": main, "per_second": perSecond} {
		if rs, ok := st.(*redisstore.Store); ok && rs.Leasing() {
			c.stores[label] = rs
		}
	}
	if len(c.stores) == 0 {
		return nil
	}
	c.held = prometheus.NewDesc("sluice_serve_lease_held_units", "Units this instance's leases hold now, by store (main, per_second): spent in Redis, not yet admitted.", []string{"store"}, nil)
	c.decisions = prometheus.NewDesc("sluice_serve_lease_decisions_total", "Decisions on leasable keys, by store and where they were made (lease: in memory from a slice; redis).", []string{"store", "where"}, nil)
	c.fate = prometheus.NewDesc("sluice_serve_lease_units_total", "Units of the slices, by store and fate (leased: taken from Redis; given_back; expired: dropped unused, the under-admission).", []string{"store", "fate"}, nil)
	return c
}

func (c *leaseCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.held
	ch <- c.decisions
	ch <- c.fate
}

func (c *leaseCollector) Collect(ch chan<- prometheus.Metric) {
	for label, rs := range c.stores {
		st := rs.LeaseStats()
		ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(st.Held), label)
		ch <- prometheus.MustNewConstMetric(c.decisions, prometheus.CounterValue, float64(st.Local), label, "lease")
		ch <- prometheus.MustNewConstMetric(c.decisions, prometheus.CounterValue, float64(st.Store), label, "redis")
		ch <- prometheus.MustNewConstMetric(c.fate, prometheus.CounterValue, float64(st.Leased), label, "leased")
		ch <- prometheus.MustNewConstMetric(c.fate, prometheus.CounterValue, float64(st.GivenBack), label, "given_back")
		ch <- prometheus.MustNewConstMetric(c.fate, prometheus.CounterValue, float64(st.Expired), label, "expired")
	}
}
