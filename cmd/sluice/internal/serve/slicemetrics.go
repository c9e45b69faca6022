package serve

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-go/sluice/redisstore"
	"github.com/sluice-go/sluice/store"
)

// sliceCollector exports the slices of the service's Redis stores
// (redisstore.WithSlices, --store-slices), read at each scrape: the units
// held now (spent in Redis, not yet admitted: what another instance may be
// refused while this one holds them), the decisions made from slices and
// in Redis, and the fate of the slices' units.
//
// It also exports the same figures under their names of before slices
// were called slices (sluice_serve_lease_*), marked deprecated in their
// help, until the next minor release.
type sliceCollector struct {
	stores                map[string]*redisstore.Store // by label: main, per_second
	held, decisions, fate *prometheus.Desc
	// old are the deprecated names' (held, decisions, fate).
	old [3]*prometheus.Desc
}

// slicingStores returns main and perSecond, by label (main, per_second),
// when they are Redis stores with slices; nil when neither is.
func slicingStores(main, perSecond store.Store) map[string]*redisstore.Store {
	var out map[string]*redisstore.Store
	for label, st := range map[string]store.Store{"main": main, "per_second": perSecond} {
		if rs, ok := st.(*redisstore.Store); ok && rs.Slicing() {
			if out == nil {
				out = map[string]*redisstore.Store{}
			}
			out[label] = rs
		}
	}
	return out
}

// The slice series' names, and the deprecated ones they replace.
const (
	sliceHeld         = "sluice_serve_slice_held_units"
	sliceDecisions    = "sluice_serve_slice_decisions_total"
	sliceUnits        = "sluice_serve_slice_units_total"
	oldSliceHeld      = "sluice_serve_lease_held_units"
	oldSliceDecisions = "sluice_serve_lease_decisions_total"
	oldSliceUnits     = "sluice_serve_lease_units_total"
)

// newSliceCollector returns the collector of stores' slices
// (slicingStores), or nil when there are none.
func newSliceCollector(stores map[string]*redisstore.Store) prometheus.Collector {
	if len(stores) == 0 {
		return nil
	}
	c := &sliceCollector{stores: stores}
	c.held = prometheus.NewDesc(sliceHeld, "Units this instance's slices hold now, by store (main, per_second): spent in Redis, not yet admitted.", []string{"store"}, nil)
	c.decisions = prometheus.NewDesc(sliceDecisions, "Decisions on keys that may be sliced, by store and where they were made (slice: in memory from a slice; redis).", []string{"store", "where"}, nil)
	c.fate = prometheus.NewDesc(sliceUnits, "Units of the slices, by store and fate (taken: from Redis; given_back; expired: dropped unused, the under-admission).", []string{"store", "fate"}, nil)
	deprecated := func(now string) string {
		return "Deprecated, removed in the next minor release: use " + now + ", the same figures (where=\"lease\" there is where=\"slice\", fate=\"leased\" is fate=\"taken\")."
	}
	c.old[0] = prometheus.NewDesc(oldSliceHeld, deprecated(sliceHeld), []string{"store"}, nil)
	c.old[1] = prometheus.NewDesc(oldSliceDecisions, deprecated(sliceDecisions), []string{"store", "where"}, nil)
	c.old[2] = prometheus.NewDesc(oldSliceUnits, deprecated(sliceUnits), []string{"store", "fate"}, nil)
	return c
}

func (c *sliceCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.held
	ch <- c.decisions
	ch <- c.fate
	for _, d := range c.old {
		ch <- d
	}
}

func (c *sliceCollector) Collect(ch chan<- prometheus.Metric) {
	for label, rs := range c.stores {
		st := rs.SliceStats()
		for _, s := range []struct {
			held, decisions, fate *prometheus.Desc
			slice, taken          string // the where of a decision from a slice, the fate of units taken
		}{
			{c.held, c.decisions, c.fate, "slice", "taken"},
			{c.old[0], c.old[1], c.old[2], "lease", "leased"},
		} {
			ch <- prometheus.MustNewConstMetric(s.held, prometheus.GaugeValue, float64(st.Held), label)
			ch <- prometheus.MustNewConstMetric(s.decisions, prometheus.CounterValue, float64(st.Local), label, s.slice)
			ch <- prometheus.MustNewConstMetric(s.decisions, prometheus.CounterValue, float64(st.Store), label, "redis")
			ch <- prometheus.MustNewConstMetric(s.fate, prometheus.CounterValue, float64(st.Sliced), label, s.taken)
			ch <- prometheus.MustNewConstMetric(s.fate, prometheus.CounterValue, float64(st.GivenBack), label, "given_back")
			ch <- prometheus.MustNewConstMetric(s.fate, prometheus.CounterValue, float64(st.Expired), label, "expired")
		}
	}
}

// StoreSlices is one store's slices (Server.Slices).
type StoreSlices struct {
	// Store is the store's label on /metrics: main, per_second.
	Store string
	Stats redisstore.SliceStats
	// Top are the keys whose slices hold the most units now.
	Top []redisstore.KeySlices
}

// Slices reports the slices of the service's Redis stores with slices
// (--store-slices), main first, each with its n keys holding the most;
// nil when no store slices budgets.
func (s *Server) Slices(n int) []StoreSlices {
	var out []StoreSlices
	for _, label := range []string{"main", "per_second"} {
		if rs := s.sliceStores[label]; rs != nil {
			out = append(out, StoreSlices{Store: label, Stats: rs.SliceStats(), Top: rs.Slices(n)})
		}
	}
	return out
}
