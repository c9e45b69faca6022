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

// leasingStores returns main and perSecond, by label (main, per_second),
// when they are Redis stores with leases; nil when neither is.
func leasingStores(main, perSecond sluice.Store) map[string]*redisstore.Store {
	var out map[string]*redisstore.Store
	for label, st := range map[string]sluice.Store{"main": main, "per_second": perSecond} {
		if rs, ok := st.(*redisstore.Store); ok && rs.Leasing() {
			if out == nil {
				out = map[string]*redisstore.Store{}
			}
			out[label] = rs
		}
	}
	return out
}

// newLeaseCollector returns the collector of stores' leases (leasingStores),
// or nil when there are none.
func newLeaseCollector(stores map[string]*redisstore.Store) prometheus.Collector {
	if len(stores) == 0 {
		return nil
	}
	c := &leaseCollector{stores: stores}
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

// StoreLeases is one store's leases (Server.Leases).
type StoreLeases struct {
	// Store is the store's label on /metrics: main, per_second.
	Store string
	Stats redisstore.LeaseStats
	// Top are the keys whose slices hold the most units now.
	Top []redisstore.KeyLease
}

// Leases reports the leases of the service's Redis stores with leases
// (--store-leases), main first, each with its n keys holding the most; nil
// when no store leases.
func (s *Server) Leases(n int) []StoreLeases {
	var out []StoreLeases
	for _, label := range []string{"main", "per_second"} {
		if rs := s.leaseStores[label]; rs != nil {
			out = append(out, StoreLeases{Store: label, Stats: rs.LeaseStats(), Top: rs.Leases(n)})
		}
	}
	return out
}
