package serve

import (
	"context"
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

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/sluice-go/sluice/cmd/sluice/internal/rlsconfig"
)

// Server is a running rate-limit service: the listeners, the gRPC and HTTP
// servers on them, the health service and what reloads the configuration
// (SIGHUP, the files' changes), around the service that decides.
type Server struct {
	*service
	grpcLn, httpLn net.Listener
	grpcSrv        *grpc.Server
	httpSrv        *http.Server
	root           atomic.Pointer[http.Handler]
	health         *health.Server
	changes        <-chan struct{} // the configuration's files changed
	stopWatch      func()
	hup            chan os.Signal // SIGHUP, from New on
	xds            *xdsClient     // the xDS server's stream (Options.XDS), nil without
}

// New loads the configuration and binds the listeners; Serve serves.
func New(o Options) (*Server, error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	s := &Server{service: newService(o)}
	if o.RLQS != nil {
		q, err := newRLQSService(s.service, o.RLQS)
		if err != nil {
			return nil, err
		}
		s.rlqs = q
	}
	if o.Handler != nil {
		s.SetHandler(o.Handler)
	}
	if err := s.firstLoad(); err != nil {
		return nil, err
	}
	if err := s.bind(); err != nil {
		if s.xds != nil {
			s.xds.conn.Close()
		}
		return nil, err
	}
	s.watchConfig()
	s.grpcSrv = s.newGRPCServer()
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(s.grpcSrv, s.health)
	s.httpSrv = &http.Server{
		Handler:           s.httpHandler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		TLSConfig:         s.opts.HTTPTLS,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// firstLoad loads the configuration's files, or readies the xDS client,
// whose rules come once Serve runs (an empty configuration meanwhile with
// XDSOptions.ForceStart).
func (s *Server) firstLoad() error {
	if s.opts.XDS == nil {
		return s.reload()
	}
	var err error
	if s.xds, err = newXDSClient(s); err != nil {
		return err
	}
	if s.opts.XDS.ForceStart {
		s.loads.mu.Lock()
		defer s.loads.mu.Unlock()
		cfg, err := rlsconfig.Parse(map[string][]byte{})
		return s.install(cfg, err, "none until "+s.opts.XDS.origin("")+" sends one")
	}
	return nil
}

// setServing sets the gRPC health of the server and its services.
func (s *Server) setServing(st healthpb.HealthCheckResponse_ServingStatus) {
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(pb.RateLimitService_ServiceDesc.ServiceName, st)
	s.health.SetServingStatus("ratelimit", st) // envoyproxy/ratelimit's name
	if s.rlqs != nil {
		s.health.SetServingStatus(rlqspb.RateLimitQuotaService_ServiceDesc.ServiceName, st)
	}
}

// bind takes the listeners given in the options, or listens on their
// addresses.
func (s *Server) bind() error {
	var err error
	if s.grpcLn = s.opts.GRPCListener; s.grpcLn == nil {
		if s.grpcLn, err = listen(s.opts.GRPCAddr); err != nil {
			return fmt.Errorf("gRPC listener: %w", err)
		}
	}
	if s.httpLn = s.opts.HTTPListener; s.httpLn == nil {
		if s.httpLn, err = listen(s.opts.HTTPAddr); err != nil {
			s.grpcLn.Close()
			return fmt.Errorf("HTTP listener: %w", err)
		}
	}
	return nil
}

// watchConfig has SIGHUP and (unless NoWatch) changes to the
// configuration's files reload it, once Serve runs (watch).
func (s *Server) watchConfig() {
	s.hup = make(chan os.Signal, 1)
	signal.Notify(s.hup, syscall.SIGHUP)
	s.stopWatch = func() {}
	if s.opts.Config != "" && !s.opts.NoWatch {
		c, stop, err := watchFiles(s.opts.Config, s.log)
		if err != nil {
			s.log.Warn("not watching the configuration's files (SIGHUP still reloads)", "err", err)
		} else {
			s.changes, s.stopWatch = c, stop
		}
	}
}

// newGRPCServer is the gRPC server, with the RLS service on it.
func (s *Server) newGRPCServer() *grpc.Server {
	o := &s.opts
	gopts := []grpc.ServerOption{
		grpc.ForceServerCodecV2(newCodec()),
		grpc.NumStreamWorkers(streamWorkers()),
		// Fixed flow-control windows turn off the bandwidth estimator's
		// pings, a frame each way every round trip; rate-limit calls are
		// small, so the windows never limit them.
		grpc.InitialWindowSize(1 << 20),
		grpc.InitialConnWindowSize(1 << 20),
		grpc.MaxRecvMsgSize(int(o.Limits.RequestBytes)),
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
	srv := grpc.NewServer(gopts...)
	pb.RegisterRateLimitServiceServer(srv, rls{s.service})
	if s.rlqs != nil {
		rlqspb.RegisterRateLimitQuotaServiceServer(srv, rlqsServer{s.rlqs})
	}
	return srv
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

// checkAddr reports why listen could not take addr by its form alone
// (HOST:PORT, PORT a number or a service's name, or unix:PATH), nil when
// only binding it can tell.
func checkAddr(addr string) error {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		if strings.TrimPrefix(path, "//") == "" {
			return fmt.Errorf("%q: no socket path after the unix: prefix", addr)
		}
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = net.LookupPort("tcp", port)
	}
	if err != nil {
		return fmt.Errorf("%q: want HOST:PORT or unix:PATH: %w", addr, err)
	}
	return nil
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
func (s *Server) Config() ConfigView { return s.config() }

// Reload loads the configuration again. A configuration that fails to load
// is rejected whole: the error is returned, logged and counted, and the one in
// use stays.
func (s *Server) Reload() error { return s.reload() }

// Serve serves until ctx ends, reloading on SIGHUP and (unless NoWatch) when
// the configuration's files change; then it shuts down gracefully and returns
// nil, or the error that stopped a listener.
func (s *Server) Serve(ctx context.Context) error {
	errc := make(chan error, 2)
	if s.state.Load() != nil {
		s.setServing(healthpb.HealthCheckResponse_SERVING)
	} else {
		s.setServing(healthpb.HealthCheckResponse_NOT_SERVING) // until the xDS server's first rules
	}
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
	if s.xds != nil {
		wg.Add(1)
		go func() { defer wg.Done(); s.xds.run(wctx) }()
	}
	go func() { defer wg.Done(); s.watch(wctx) }()
	if s.rlqs != nil {
		wg.Add(1)
		go func() { defer wg.Done(); s.rlqs.run(wctx) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); s.sweepStores(wctx, sweepEvery) }()
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

// shutdown stops both listeners, waits for the calls in flight up to the
// shutdown timeout, then closes what is left.
func (s *Server) shutdown() {
	s.health.Shutdown()
	if s.rlqs != nil {
		s.rlqs.shutdown() // its streams last as long as their clients
	}
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
