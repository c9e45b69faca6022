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
	// Path is Options.Config ("" for the empty configuration).
	Path string
	// Sources are the files the configuration was read from.
	Sources []string
	// Domains and Rules are the configuration's.
	Domains []string
	Rules   []*rlsconfig.Rule
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
	metadata map[*rlsconfig.Rule]*structpb.Struct // the rules' metadata, for dynamic metadata
	loaded   time.Time
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
		v.Sources, v.Domains, v.Rules, v.Loaded = st.cfg.Sources(), st.cfg.Domains(), st.cfg.Rules(), st.loaded
	}
	s.loads.errMu.Lock()
	v.LastError, v.LastErrorAt = s.loads.lastErr, s.loads.lastErrTime
	s.loads.errMu.Unlock()
	return v
}

// reload loads the configuration again (Server.Reload).
func (s *service) reload() error {
	s.loads.mu.Lock()
	defer s.loads.mu.Unlock()
	var cfg *rlsconfig.Config
	var err error
	if s.opts.Config == "" {
		cfg, err = rlsconfig.Parse(map[string][]byte{})
	} else {
		cfg, err = rlsconfig.Options{MergeDomains: s.opts.MergeDomains}.Load(s.opts.Config)
	}
	var meta map[*rlsconfig.Rule]*structpb.Struct
	if err == nil {
		meta, err = ruleMetadata(cfg.Rules())
	}
	now := time.Now()
	if err != nil {
		s.metrics.loads.WithLabelValues("failed").Inc()
		s.loads.errMu.Lock()
		s.loads.lastErr, s.loads.lastErrTime = err, now
		s.loads.errMu.Unlock()
		if s.state.Load() != nil {
			s.log.Error("configuration rejected; the previous one stays in use", "path", s.opts.Config, "err", err)
		}
		return err
	}
	counters, shared := s.metrics.forRules(cfg.Rules())
	st := &state{cfg: cfg, counters: counters, metadata: meta, loaded: now}
	s.state.Store(st)
	s.loads.errMu.Lock()
	s.loads.lastErr = nil
	s.loads.errMu.Unlock()
	s.metrics.loads.WithLabelValues("ok").Inc()
	s.metrics.lastLoad.Set(float64(now.UnixNano()) / 1e9)
	s.metrics.rules.Set(float64(len(cfg.Rules())))
	if s.opts.Config == "" {
		s.log.Info("no --config given: serving an empty configuration (every descriptor OK, no limit)")
	} else {
		s.log.Info("configuration loaded", "path", s.opts.Config, "domains", len(cfg.Domains()), "rules", len(cfg.Rules()), "files", len(cfg.Sources()))
	}
	if shared > 0 {
		s.log.Warn("rules beyond the first ones are counted together in sluice_serve_rule_decisions_total{rule=\""+otherLabel+"\"}", "series", maxRuleSeries, "rules_together", shared)
	}
	return nil
}
