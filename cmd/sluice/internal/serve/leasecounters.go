package serve

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-go/sluice/cmd/sluice/internal/rlsconfig"
)

// What came of a lease call on a configured concurrency limit, the
// outcome label of sluice_serve_concurrency_leases_total.
const (
	leaseHeld     = iota // an acquire holds its lease
	leaseRefused         // an acquire was refused (the limit, or its rate limit)
	leaseReleased        // a release gave back a lease still held
	leaseExtended        // an extension moved a lease still held
	leaseNotHeld         // a release or an extension found nothing held: the lease had come back by itself, or was released already
	leaseErrored         // the store could not decide
	leaseOutcomes
)

var leaseOutcomeNames = [leaseOutcomes]string{"held", "refused", "released", "extended", "not_held", "error"}

// leaseCounters are one concurrency limit's lease counters, by outcome.
type leaseCounters [leaseOutcomes]prometheus.Counter

// concSeries are the lease counters of a configuration's concurrency
// limits, resolved when it is loaded.
type concSeries map[*rlsconfig.Concurrency]*leaseCounters

// count counts one outcome of cc.
func (cs concSeries) count(cc *rlsconfig.Concurrency, outcome int) {
	if c := cs[cc]; c != nil {
		c[outcome].Inc()
	}
}

func newConcurrencyVec() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_serve_concurrency_leases_total",
		Help: "Lease calls on configured concurrency limits, by domain, concurrency (its name, else its descriptor path) and outcome (held, refused, released, extended, not_held: a release or an extension that found nothing held, the lease come back by itself or released already; error).",
	}, []string{"domain", "concurrency", "outcome"})
}

// forConcurrencies resolves the lease counters of a configuration's
// concurrency limits, bounded as the rules' decision series are (the
// first maxRuleSeries label sets their own, the rest otherLabel's), and
// drops the series of the limits the configuration before had and this
// one has not. A load calls it, under loads.mu.
func (m *metrics) forConcurrencies(concs []*rlsconfig.Concurrency) concSeries {
	out := make(concSeries, len(concs))
	labels := map[[2]string]*leaseCounters{}
	for _, cc := range concs {
		l := [2]string{cc.Domain, concName(cc)}
		if labels[l] == nil && len(labels) >= maxRuleSeries {
			l = [2]string{otherLabel, otherLabel}
		}
		c := labels[l]
		if c == nil {
			c = new(leaseCounters)
			for i, o := range leaseOutcomeNames {
				c[i] = m.concurrency.WithLabelValues(l[0], l[1], o)
			}
			labels[l] = c
		}
		out[cc] = c
	}
	for l := range m.concLabels {
		if labels[l] == nil {
			for _, o := range leaseOutcomeNames {
				m.concurrency.DeleteLabelValues(l[0], l[1], o)
			}
		}
	}
	m.concLabels = labels
	return out
}

// checkConcurrencies reports a configuration whose leases this service
// cannot take as configured (see checkLeases).
func (s *service) checkConcurrencies(cfg *rlsconfig.Config) error {
	return checkLeases(cfg, s.lim2 != nil)
}

// checkLeases reports a configuration whose leases a service cannot take
// as configured: with a per-second store (Options.PerSecondStore), a
// concurrency limit whose descriptor's rate limit is kept there while
// leases are held in the main store, which cannot decide both at once.
func checkLeases(cfg *rlsconfig.Config, perSecondStore bool) error {
	if !perSecondStore {
		return nil
	}
	for _, cc := range cfg.Concurrencies() {
		if r := cc.Rate; r != nil && !r.Unlimited && r.Limit.Rate > 0 && perSecond(r.Limit) {
			return fmt.Errorf("%s: descriptor %s: its rate_limit is kept in the per-second store and its concurrency in the main store: a lease cannot take both at once (give the concurrency a descriptor of its own, or the rate limit a longer unit)", cc.Domain, cc.Path)
		}
	}
	return nil
}

// CheckConfig checks o as New would, without binding a listener or
// watching a file: its settings and the listeners' addresses, then the
// configuration's files (Config, MergeDomains) loaded and checked against
// its stores (a PerSecondStore). It returns the configuration: what
// `sluice serve --check` reports. An empty Config is the empty
// configuration.
func CheckConfig(o Options) (*rlsconfig.Config, error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	for _, a := range []struct{ name, addr string }{{"gRPC", o.GRPCAddr}, {"HTTP", o.HTTPAddr}} {
		if err := checkAddr(a.addr); err != nil {
			return nil, fmt.Errorf("%s listener: %w", a.name, err)
		}
	}
	if o.Config == "" {
		return rlsconfig.Parse(map[string][]byte{})
	}
	cfg, err := o.rulesOptions().Load(o.Config)
	if err == nil {
		err = checkLeases(cfg, o.PerSecondStore != nil)
	}
	if err == nil {
		_, err = ruleMetadata(cfg.Rules())
	}
	return cfg, err
}
