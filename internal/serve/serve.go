// Package serve is `sluice serve`: a rate-limit service that speaks Envoy's
// RLS v3 gRPC protocol (envoy.service.ratelimit.v3.RateLimitService) and an
// HTTP API, configured by envoyproxy/ratelimit's YAML files (package
// rlsconfig) and deciding with a sluice.Limiter over any store.
//
// The descriptors of one call are decided together: every limited,
// non-shadow descriptor is a part of one sluice composite, so a call is
// admitted only if all of them grant and a refused call spends nothing
// (envoyproxy/ratelimit counts each descriptor on its own and counts
// refused hits).
//
// Run starts it and serves until its context ends; New and Server.Serve do
// the same in two steps, for callers who need the bound addresses or the
// Server's accessors (Config, Registry) before serving.
package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/rlsconfig"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/observe"
	"github.com/sluice-go/sluice/redisstore"
)

// Default listen addresses: loopback only.
const (
	DefaultGRPCAddr = "127.0.0.1:8081"
	DefaultHTTPAddr = "127.0.0.1:8080"
)

// Options configure a Server. The zero Options serve an empty configuration
// from an in-memory store on the default addresses.
type Options struct {
	// Config is a YAML file or a directory of them; "" serves an empty
	// configuration (every descriptor OK, no limit).
	Config string
	// NoWatch turns off reloading when Config's files change (SIGHUP and
	// Server.Reload still reload).
	NoWatch bool
	// MergeDomains merges Config's files that configure one domain, as
	// envoy's MERGE_DOMAIN_CONFIG does (rlsconfig.Options.MergeDomains);
	// without it they are a load error.
	MergeDomains bool
	// Store keeps the budgets; nil is a new memstore.
	Store sluice.Store
	// PerSecondStore, when not nil, keeps the budgets of the limits counted
	// per second (an epoch-aligned window of one second: envoy's unit
	// second), as envoy's REDIS_PERSECOND keeps them on a second Redis.
	// A call whose descriptors are in both stores is decided in each in
	// turn: the per-second parts first, then the others, the per-second
	// parts given back when the others refuse (not one atomic step: a
	// concurrent call may be refused while they are held).
	PerSecondStore sluice.Store
	// Ping reports whether the store is reachable, for /readyz; nil is
	// always reachable.
	Ping func(context.Context) error
	// StoreName names the store in the start line: the URL it was opened
	// with, credentials removed (the caller removes them). "" names a
	// memstore "memory", another store by its type.
	StoreName string

	// GRPCAddr and HTTPAddr are the listen addresses (default
	// DefaultGRPCAddr and DefaultHTTPAddr; port 0 picks a free one), HOST:PORT
	// or unix:PATH for a Unix domain socket (a sidecar's, as envoy's
	// GRPC_UDS; a socket file left by a process that is gone is replaced,
	// and the file is removed on shutdown). A listener given in GRPCListener
	// or HTTPListener is used instead.
	GRPCAddr, HTTPAddr         string
	GRPCListener, HTTPListener net.Listener
	// GRPCTLS and HTTPTLS, when set, serve TLS (with ClientAuth set,
	// mutual TLS).
	GRPCTLS, HTTPTLS *tls.Config
	// HTTPToken, when set, is the bearer token every HTTP endpoint but
	// /healthz and /readyz requires. The console (/ and /console/) also
	// takes a session cookie a browser gets by posting the token to
	// /console/login, from the form it is shown instead of a 401.
	HTTPToken string
	// Handler, when set, answers the HTTP paths the server does not (it is
	// mounted at "/"). See also Server.SetHandler.
	Handler http.Handler
	// ConsolePath is the path of the web console Handler serves, "" when
	// it serves none: the start line gives the console's URL.
	ConsolePath string

	// Headers chooses the rate-limit headers of a response (default none).
	Headers Headers
	// HeaderNames renames HeadersEnvoy's headers.
	HeaderNames EnvoyHeaderNames
	// GlobalShadow answers OK to every call, deciding and counting as usual.
	GlobalShadow bool
	// GlobalQuota decides every descriptor as a quota_mode rule, as envoy's
	// QUOTA_MODE does: each descriptor that is not unlimited counts as a
	// quota descriptor, those without a rule and those in shadow_mode among
	// them (they always pass), and a call is over the limit only when every
	// one is.
	GlobalQuota bool
	// DynamicMetadata sets each response's dynamic_metadata, as envoy's
	// RESPONSE_DYNAMIC_METADATA does: the domain, the descriptors, the
	// hits_addend and the metadata of the rules that passed.
	DynamicMetadata bool
	// DomainSlot puts every key of a domain in one Redis Cluster hash slot
	// ("{domain}/…"), so that the descriptors of a call are decided in one
	// script, atomically, on a cluster too; all of a domain's traffic then
	// goes to one master. Without it each descriptor's key hashes on its
	// own, and a call whose keys land in different slots is decided part by
	// part (see redisstore's Routing). On one Redis server it changes
	// nothing but the keys' names.
	DomainSlot bool

	// MaxRequestBytes bounds a request's encoded size (default 64 KiB);
	// MaxDescriptors the descriptors of a call (default 64); MaxEntries the
	// entries of a descriptor (default 32); MaxEntryBytes a domain, key or
	// value (default 1024).
	MaxRequestBytes, MaxDescriptors, MaxEntries, MaxEntryBytes int

	// GRPCMaxConnectionAge closes a gRPC connection (GOAWAY, then the calls
	// in flight get GRPCMaxConnectionAgeGrace to finish) once it is that old,
	// give or take 10%, so that clients reconnect and spread over the
	// instances behind a load balancer, as envoy's GRPC_MAX_CONNECTION_AGE
	// does. Zero is envoy's default, 24h (grace 1h); negative, never.
	GRPCMaxConnectionAge, GRPCMaxConnectionAgeGrace time.Duration

	// ShutdownTimeout bounds how long in-flight calls are waited for once the
	// context ends (default 10s).
	ShutdownTimeout time.Duration
	// Logger receives the service's log (default slog.Default()).
	Logger *slog.Logger
	// Observer, when set, sees every limited descriptor's outcome (Source
	// "serve", Policy the rule's name or path).
	Observer observe.Observer
	// Refused, when set, is called with each refused descriptor's policy
	// (the Observer's Event.Policy) and its entries, "key=value" joined by
	// ", " (the web console's most refused keys).
	Refused func(policy, key string)
}

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

// Server is a running rate-limit service.
type Server struct {
	opts    Options
	lim     *sluice.Limiter
	lim2    *sluice.Limiter  // Options.PerSecondStore's; nil without one
	now     func() time.Time // the store's clock, when it was given one; nil: fastclock
	state   atomic.Pointer[state]
	metrics *metrics
	log     *slog.Logger

	loadMu      sync.Mutex // serializes loads
	errMu       sync.Mutex
	lastErr     error
	lastErrTime time.Time

	grpcLn, httpLn net.Listener
	grpcSrv        *grpc.Server
	httpSrv        *http.Server
	root           atomic.Pointer[http.Handler]
	health         *health.Server
	changes        <-chan struct{} // the configuration's files changed
	stopWatch      func()
	hup            chan os.Signal         // SIGHUP, from New on
	answered       atomic.Int64           // calls answered, on every door
	storeErrs      atomic.Int64           // store failures not yet logged
	storeProblems  atomic.Pointer[string] // what the last check of the stores found (checkStores)
	storeErrLogged atomic.Int64           // when the last was logged, fastclock µs
	local          bool                   // the store is in this process (see each)
	// togetherMain and togetherSec: decideTogether may decide a call's
	// enforced and shadow parts in one TakeEach on the store, or on the
	// per-second store: a Redis store, where that saves a round trip (in
	// memory it saves nothing), and one whose TakeEach says exactly which
	// parts refused (not a Store from outside this module).
	togetherMain, togetherSec bool
}

// Run starts a Server with o and serves until ctx ends, then shuts down
// gracefully: it stops accepting, finishes the calls in flight (up to
// o.ShutdownTimeout) and returns nil. A configuration that fails its first
// load, or an address that cannot be bound, is an error.
func Run(ctx context.Context, o Options) error {
	s, err := New(o)
	if err != nil {
		return err
	}
	return s.Serve(ctx)
}

// New loads the configuration and binds the listeners; Serve serves.
func New(o Options) (*Server, error) {
	if o.GRPCAddr == "" {
		o.GRPCAddr = DefaultGRPCAddr
	}
	if o.HTTPAddr == "" {
		o.HTTPAddr = DefaultHTTPAddr
	}
	if o.MaxRequestBytes <= 0 {
		o.MaxRequestBytes = 64 << 10
	}
	if o.MaxDescriptors <= 0 {
		o.MaxDescriptors = 64
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = 32
	}
	if o.MaxEntryBytes <= 0 {
		o.MaxEntryBytes = 1024
	}
	var err error
	if o.HeaderNames, err = o.HeaderNames.withDefaults(); err != nil {
		return nil, err
	}
	if o.GRPCMaxConnectionAge == 0 {
		o.GRPCMaxConnectionAge = 24 * time.Hour
	}
	if o.GRPCMaxConnectionAgeGrace == 0 {
		o.GRPCMaxConnectionAgeGrace = time.Hour
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = 10 * time.Second
	}
	if o.Store == nil {
		o.Store = memstore.New()
	}
	s := &Server{opts: o, lim: sluice.New(o.Store), metrics: newMetrics(), log: o.Logger}
	if o.PerSecondStore != nil {
		s.lim2 = sluice.New(o.PerSecondStore)
	}
	_, s.local = o.Store.(*memstore.Store)
	s.togetherMain = together(o.Store)
	s.togetherSec = o.PerSecondStore != nil && together(o.PerSecondStore)
	// An epoch-aligned window's reset is read on the store's clock when it
	// was given one (a test's), else on the fast system clock.
	if c := s.lim.Clock(); c != (storelink.SystemClock{}) {
		s.now = c.Now
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if o.Handler != nil {
		s.SetHandler(o.Handler)
	}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	s.hup = make(chan os.Signal, 1)
	signal.Notify(s.hup, syscall.SIGHUP)
	s.stopWatch = func() {}
	if o.Config != "" && !o.NoWatch {
		c, stop, err := watchFiles(o.Config, s.log)
		if err != nil {
			s.log.Warn("not watching the configuration's files (SIGHUP still reloads)", "err", err)
		} else {
			s.changes, s.stopWatch = c, stop
		}
	}
	if s.grpcLn = o.GRPCListener; s.grpcLn == nil {
		if s.grpcLn, err = listen(o.GRPCAddr); err != nil {
			s.stopWatch()
			signal.Stop(s.hup)
			return nil, fmt.Errorf("gRPC listener: %w", err)
		}
	}
	if s.httpLn = o.HTTPListener; s.httpLn == nil {
		if s.httpLn, err = listen(o.HTTPAddr); err != nil {
			s.grpcLn.Close()
			s.stopWatch()
			signal.Stop(s.hup)
			return nil, fmt.Errorf("HTTP listener: %w", err)
		}
	}
	gopts := []grpc.ServerOption{
		grpc.ForceServerCodecV2(newCodec()),
		grpc.NumStreamWorkers(streamWorkers()),
		// Fixed flow-control windows turn off the bandwidth estimator's
		// pings, a frame each way every round trip; rate-limit calls are
		// small, so the windows never limit them.
		grpc.InitialWindowSize(1 << 20),
		grpc.InitialConnWindowSize(1 << 20),
		grpc.MaxRecvMsgSize(o.MaxRequestBytes),
	}
	if o.GRPCMaxConnectionAge > 0 {
		ka := keepalive.ServerParameters{MaxConnectionAge: o.GRPCMaxConnectionAge, MaxConnectionAgeGrace: o.GRPCMaxConnectionAgeGrace}
		if ka.MaxConnectionAgeGrace < 0 {
			ka.MaxConnectionAgeGrace = 0 // grpc's infinity
		}
		gopts = append(gopts, grpc.KeepaliveParams(ka))
	}
	if o.GRPCTLS != nil {
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(o.GRPCTLS)))
	}
	s.grpcSrv = grpc.NewServer(gopts...)
	pb.RegisterRateLimitServiceServer(s.grpcSrv, rls{s})
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(s.grpcSrv, s.health)
	s.httpSrv = &http.Server{
		Handler:           s.httpHandler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		TLSConfig:         o.HTTPTLS,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// listen listens on addr: HOST:PORT, or unix:PATH.
func listen(addr string) (net.Listener, error) {
	path, ok := strings.CutPrefix(addr, "unix:")
	if !ok {
		return net.Listen("tcp", addr)
	}
	path = strings.TrimPrefix(path, "//") // unix:///run/x.sock
	ln, err := net.Listen("unix", path)
	if err != nil && staleSocket(path) {
		if os.Remove(path) == nil {
			ln, err = net.Listen("unix", path)
		}
	}
	return ln, err
}

// staleSocket reports whether path is a Unix socket nothing listens on.
func staleSocket(path string) bool {
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&os.ModeSocket == 0 {
		return false
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// streamWorkers is the number of goroutines kept to run gRPC calls. A call
// waits on the store most of its time, so the calls in flight outnumber the
// CPUs, and a call that finds no idle worker runs on a new goroutine, whose
// stack grows again from its smallest size. But idle workers take calls in
// turn, the one idle longest first, so each worker kept beyond the calls in
// flight only adds a stack gone cold in the caches to the rotation: 64 per
// CPU.
func streamWorkers() uint32 {
	return uint32(64 * runtime.GOMAXPROCS(0))
}

// together reports whether decideTogether decides in one TakeEach on st:
// a redisstore, whose TakeEach is one script and says exactly which parts
// refused. A memstore's says so too, but in memory one TakeEach saves
// nothing over a Take a part; a Store from outside this module only
// approximates which parts refused (sluice.Limiter.TakeEach).
func together(st sluice.Store) bool {
	_, ok := st.(*redisstore.Store)
	return ok
}

// GRPCAddr is the gRPC listener's address.
func (s *Server) GRPCAddr() net.Addr { return s.grpcLn.Addr() }

// HTTPAddr is the HTTP listener's address.
func (s *Server) HTTPAddr() net.Addr { return s.httpLn.Addr() }

// Registry is the server's Prometheus registry (served at /metrics), for
// adapters that add collectors.
func (s *Server) Registry() *prometheus.Registry { return s.metrics.reg }

// SetHandler mounts h at "/" of the HTTP listener: it answers every path the
// server does not.
func (s *Server) SetHandler(h http.Handler) { s.root.Store(&h) }

// Config returns the configuration in use and the last load's outcome.
func (s *Server) Config() ConfigView {
	st := s.state.Load()
	v := ConfigView{Path: s.opts.Config}
	if st != nil {
		v.Sources, v.Domains, v.Rules, v.Loaded = st.cfg.Sources(), st.cfg.Domains(), st.cfg.Rules(), st.loaded
	}
	s.errMu.Lock()
	v.LastError, v.LastErrorAt = s.lastErr, s.lastErrTime
	s.errMu.Unlock()
	return v
}

// Reload loads the configuration again. A configuration that fails to load
// is rejected whole: the error is returned, logged and counted, and the one in
// use stays.
func (s *Server) Reload() error {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
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
		s.errMu.Lock()
		s.lastErr, s.lastErrTime = err, now
		s.errMu.Unlock()
		if s.state.Load() != nil {
			s.log.Error("configuration rejected; the previous one stays in use", "path", s.opts.Config, "err", err)
		}
		return err
	}
	counters, shared := s.metrics.forRules(cfg.Rules())
	st := &state{cfg: cfg, counters: counters, metadata: meta, loaded: now}
	s.state.Store(st)
	s.errMu.Lock()
	s.lastErr = nil
	s.errMu.Unlock()
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

// Serve serves until ctx ends, reloading on SIGHUP and (unless NoWatch) when
// the configuration's files change; then it shuts down gracefully and returns
// nil, or the error that stopped a listener.
func (s *Server) Serve(ctx context.Context) error {
	errc := make(chan error, 2)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(pb.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus("ratelimit", healthpb.HealthCheckResponse_SERVING) // envoyproxy/ratelimit's name
	go func() {
		err := s.grpcSrv.Serve(s.grpcLn)
		if errors.Is(err, grpc.ErrServerStopped) {
			err = nil
		}
		errc <- err
	}()
	go func() {
		var err error
		if s.opts.HTTPTLS != nil {
			err = s.httpSrv.ServeTLS(s.httpLn, "", "")
		} else {
			err = s.httpSrv.Serve(s.httpLn)
		}
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		errc <- err
	}()
	start := []any{"grpc", s.GRPCAddr().String(), "http", s.HTTPAddr().String(),
		"grpc_tls", s.opts.GRPCTLS != nil, "http_tls", s.opts.HTTPTLS != nil, "store", s.storeName()}
	if s.opts.ConsolePath != "" {
		start = append(start, "console", s.consoleURL())
	}
	s.log.Info("serving", start...)

	wctx, stopWatch := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.watch(wctx) }()
	go func() {
		defer wg.Done()
		if _, err := s.checkStores(wctx); err != nil && wctx.Err() == nil {
			s.log.Warn("the store does not answer at start: until it does, decisions follow its failure policy", "store", s.storeName(), "err", err)
		}
	}()

	var err error
	received := 0
	select {
	case <-ctx.Done():
	case err = <-errc:
		received++
	}
	stopWatch()
	wg.Wait()
	s.shutdown()
	for ; received < 2; received++ {
		if e := <-errc; err == nil {
			err = e
		}
	}
	s.log.Info("stopped", "calls_answered", s.answered.Load())
	return err
}

// storeName is Options.StoreName, or what the store is.
func (s *Server) storeName() string {
	switch {
	case s.opts.StoreName != "":
		return s.opts.StoreName
	case s.local:
		return "memory"
	}
	return fmt.Sprintf("%T", s.opts.Store)
}

// consoleURL is where the web console (Options.ConsolePath) is served: a
// URL on the HTTP listener, localhost for an address that listens on every
// interface.
func (s *Server) consoleURL() string {
	addr := s.HTTPAddr()
	if addr.Network() == "unix" {
		return s.opts.ConsolePath + " on unix:" + addr.String()
	}
	scheme := "http"
	if s.opts.HTTPTLS != nil {
		scheme = "https"
	}
	host, port, err := net.SplitHostPort(addr.String())
	if ip := net.ParseIP(host); err == nil && ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return scheme + "://" + net.JoinHostPort(host, port) + s.opts.ConsolePath
}

// checkStores asks each Redis store whether its servers keep the
// limiter's keys (redisstore.Store.CheckConfig): one whose
// maxmemory-policy may evict them forgets what was spent, and its next
// decision admits as on a fresh key. It returns one line per problem
// found, sets sluice_serve_store_may_evict and logs the problems when they
// differ from the last check's; unreachable is the error of the stores
// that did not answer (they are not checked). Serve checks at start,
// /readyz at each probe.
func (s *Server) checkStores(ctx context.Context) (problems []string, unreachable error) {
	evict, checked := false, false
	for _, st := range []struct {
		name  string
		store sluice.Store
	}{{"store", s.opts.Store}, {"per-second store", s.opts.PerSecondStore}} {
		rs, ok := st.store.(*redisstore.Store)
		if !ok {
			continue
		}
		err := rs.CheckConfig(ctx)
		switch {
		case errors.Is(err, sluice.ErrStoreUnavailable):
			unreachable = errors.Join(unreachable, fmt.Errorf("%s: %w", st.name, err))
			continue
		case errors.Is(err, redisstore.ErrEvictingPolicy):
			evict = true
			problems = append(problems, st.name+": "+err.Error())
		case errors.Is(err, redisstore.ErrConfigUnreadable):
			problems = append(problems, st.name+": "+err.Error())
		case err != nil:
			continue // closed, or the caller gone: nothing learnt
		}
		checked = true
	}
	if !checked {
		return problems, unreachable
	}
	if evict {
		s.metrics.mayEvict.Set(1)
	} else {
		s.metrics.mayEvict.Set(0)
	}
	now := strings.Join(problems, "\n")
	if last := s.storeProblems.Swap(&now); last == nil || *last != now {
		for _, p := range problems {
			s.log.Warn("the store may not keep the limiter's budgets", "problem", p)
		}
		if len(problems) == 0 && last != nil {
			s.log.Info("the store keeps the limiter's budgets again (maxmemory-policy noeviction)")
		}
	}
	return problems, unreachable
}

// shutdown stops both listeners, waits for the calls in flight up to the
// shutdown timeout, then closes what is left.
func (s *Server) shutdown() {
	s.health.Shutdown()
	s.log.Info("shutting down: finishing calls in flight", "timeout", s.opts.ShutdownTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		done := make(chan struct{})
		go func() { s.grpcSrv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			s.grpcSrv.Stop()
			<-done
		}
	}()
	go func() {
		defer wg.Done()
		if err := s.httpSrv.Shutdown(ctx); err != nil {
			s.httpSrv.Close()
		}
	}()
	wg.Wait()
}

// watch reloads on SIGHUP and on changes to the configuration's files until
// ctx ends.
func (s *Server) watch(ctx context.Context) {
	hup := s.hup
	defer signal.Stop(hup)
	defer s.stopWatch()
	changes := s.changes
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			s.log.Info("SIGHUP: reloading the configuration")
			_ = s.Reload()
		case <-changes:
			s.log.Info("configuration files changed: reloading")
			_ = s.Reload()
		}
	}
}
