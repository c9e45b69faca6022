package serve

import (
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-go/sluice/cmd/sluice/internal/rlsconfig"
)

// ConfigView is the configuration a Server is using and the outcome of its
// last load.
type ConfigView struct {
	// Path is Options.Config ("" for the empty configuration or xDS).
	Path string
	// Origin says where the rules came from: "file PATH", "xDS SERVER
	// (node ID, version V)", or "none" for the empty configuration; "xDS
	// SERVER (node ID): waiting for the first configuration" before the
	// first arrives.
	Origin string
	// Sources are the files the configuration was read from.
	Sources []string
	// Domains and Rules are the configuration's.
	Domains []string
	Rules   []*rlsconfig.Rule
	// Concurrencies are its concurrency limits.
	Concurrencies []*rlsconfig.Concurrency
	// Loaded is when it was loaded.
	Loaded time.Time
	// LastError is the last failed load's error (nil when the last load
	// succeeded), LastErrorAt its time.
	LastError   error
	LastErrorAt time.Time
}

// state is one loaded configuration and what calls need of it; a call reads
// one state, so it sees one configuration.
type state struct {
	cfg      *rlsconfig.Config
	counters map[*rlsconfig.Rule]*ruleCounters
	// concCounters are the lease counters of the concurrency limits.
	concCounters concSeries
	metadata     map[*rlsconfig.Rule]*structpb.Struct // the rules' metadata, for dynamic metadata
	loaded       time.Time
	origin       string // ConfigView.Origin
	// envoyRules are the rules' series of Options.EnvoyStats, found as
	// calls come.
	envoyRules *ruleSeries
}

// loads serializes a service's loads and keeps the last one's error.
type loads struct {
	mu          sync.Mutex // serializes loads
	errMu       sync.Mutex
	lastErr     error
	lastErrTime time.Time
}

// config returns the configuration in use and the last load's outcome.
func (s *service) config() ConfigView {
	st := s.state.Load()
	v := ConfigView{Path: s.opts.Config}
	if st != nil {
		v.Sources, v.Domains, v.Rules, v.Loaded, v.Origin = st.cfg.Sources(), st.cfg.Domains(), st.cfg.Rules(), st.loaded, st.origin
		v.Concurrencies = st.cfg.Concurrencies()
	} else if s.opts.XDS != nil {
		v.Origin = s.opts.XDS.origin("") + ": waiting for the first configuration"
	}
	s.loads.errMu.Lock()
	v.LastError, v.LastErrorAt = s.loads.lastErr, s.loads.lastErrTime
	s.loads.errMu.Unlock()
	return v
}

// rulesOptions are how o's rules load, from files or xDS.
func (o *Options) rulesOptions() rlsconfig.Options {
	return rlsconfig.Options{MergeDomains: o.MergeDomains, Limits: o.Limits}
}

// reload loads the configuration again (Server.Reload). The rules of an
// xDS server are not reloaded: it sends them when they change.
func (s *service) reload() error {
	if s.opts.XDS != nil {
		s.log.Info("the configuration comes from xDS: nothing to reload", "server", s.opts.XDS.Server)
		return nil
	}
	s.loads.mu.Lock()
	defer s.loads.mu.Unlock()
	var cfg *rlsconfig.Config
	var err error
	origin := "file " + s.opts.Config
	if s.opts.Config == "" {
		cfg, err = rlsconfig.Parse(map[string][]byte{})
		origin = "none"
	} else {
		cfg, err = s.opts.rulesOptions().Load(s.opts.Config)
	}
	if err = s.install(cfg, err, origin); err != nil {
		return err
	}
	if s.opts.Config == "" {
		s.log.Info("no --config given: serving an empty configuration (every descriptor OK, no limit)")
	} else {
		s.log.Info("configuration loaded", "path", s.opts.Config, "domains", len(cfg.Domains()), "rules", len(cfg.Rules()), "files", len(cfg.Sources()))
	}
	return nil
}

// install puts cfg in use, whole, as one state: the outcome of a load
// (loaded from origin, or failed with err), from a file or an xDS server
// alike. A failed load, or a configuration whose metadata cannot be sent,
// leaves the configuration in use as it is, counted and kept as the last
// error. The caller holds loads.mu.
func (s *service) install(cfg *rlsconfig.Config, err error, origin string) error {
	var meta map[*rlsconfig.Rule]*structpb.Struct
	if err == nil {
		meta, err = ruleMetadata(cfg.Rules())
	}
	if err == nil {
		err = s.checkConcurrencies(cfg)
	}
	now := time.Now()
	if err != nil {
		s.metrics.loads.WithLabelValues("failed").Inc()
		s.loads.errMu.Lock()
		s.loads.lastErr, s.loads.lastErrTime = err, now
		s.loads.errMu.Unlock()
		if s.state.Load() != nil {
			s.log.Error("configuration rejected; the previous one stays in use", "origin", origin, "err", err)
		}
		return err
	}
	counters, shared := s.metrics.forRules(cfg.Rules())
	st := &state{cfg: cfg, counters: counters, concCounters: s.metrics.forConcurrencies(cfg.Concurrencies()), metadata: meta, loaded: now, origin: origin, envoyRules: &ruleSeries{}}
	s.state.Store(st)
	s.loads.errMu.Lock()
	s.loads.lastErr = nil
	s.loads.errMu.Unlock()
	s.metrics.loads.WithLabelValues("ok").Inc()
	for _, d := range cfg.Deprecations() {
		s.log.Warn("the configuration uses a deprecated name", "where", d, "origin", origin)
	}
	s.metrics.lastLoad.Set(float64(now.UnixNano()) / 1e9)
	s.metrics.rules.Set(float64(len(cfg.Rules())))
	if shared > 0 {
		s.log.Warn("rules beyond the first ones are counted together in sluice_serve_rule_decisions_total{rule=\""+otherLabel+"\"}", "series", maxRuleSeries, "rules_together", shared)
	}
	return nil
}
