package redistest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a standalone redis-server listening on 127.0.0.1. Its methods
// are safe for concurrent use, but those taking a testing.TB must be called
// from the test's goroutine.
type Server struct {
	shared bool
	cfg    procConfig // port is fixed after the first successful start

	mu     sync.Mutex
	proc   *process // nil while stopped
	client *redis.Client
	closed bool
}

// Standalone starts a redis-server on a free port of 127.0.0.1 with an
// empty data set, no persistence and its working directory in t.TempDir(),
// and waits until it answers PING. DEBUG is enabled for local clients
// (DEBUG SLEEP can simulate a slow server). The server and all clients
// obtained from it are stopped and closed when t finishes.
func Standalone(t testing.TB) *Server {
	t.Helper()
	return newStandalone(t, nil)
}

// StandaloneTLS is Standalone with TLS as well, on a port of its own
// (TLSAddr), with x's certificates: clients must present a certificate x's
// authority signed (x.ClientConfig does).
func StandaloneTLS(t testing.TB, x *TLS) *Server {
	t.Helper()
	return newStandalone(t, x)
}

func newStandalone(t testing.TB, x *TLS) *Server {
	t.Helper()
	Require(t)
	s := &Server{cfg: procConfig{dir: t.TempDir(), tls: x}}
	s.cfg.logFile = filepath.Join(s.cfg.dir, "redis.log")
	if err := s.startFresh(); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(func() {
		if err := s.close(); err != nil {
			t.Errorf("redistest: %v", err)
		}
	})
	return s
}

// TLSAddr returns the "127.0.0.1:port" address of a StandaloneTLS server's
// TLS port.
func (s *Server) TLSAddr() string { return tlsAddr(s.cfg.tlsPort) }

// startFresh starts the server on a newly picked free port (two with TLS),
// retrying with others if one is taken meanwhile.
func (s *Server) startFresh() error {
	var err error
	n := 1
	if s.cfg.tls != nil {
		n = 2
	}
	for range portAttempts {
		var ports []int
		if ports, err = freePorts(n); err != nil {
			return err
		}
		cfg := s.cfg
		cfg.port = ports[0]
		if n == 2 {
			cfg.tlsPort = ports[1]
		}
		var p *process
		if p, err = launch(cfg); err == nil {
			s.cfg = cfg
			s.proc = p
			return nil
		}
		if !errors.Is(err, errAddrInUse) {
			return err
		}
	}
	return err
}

// Addr returns the server's "127.0.0.1:port" address. It stays the same
// across Stop, Start and Restart.
func (s *Server) Addr() string { return s.cfg.addr() }

// Pid returns the process id of the running redis-server, or 0 if it is
// stopped.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.pid()
}

// Client returns a go-redis client for the server. Every call returns the
// same client; do not Close it, it is closed when the server is cleaned up.
// It keeps working across Restart (go-redis redials broken connections).
func (s *Server) Client() *redis.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		s.client = redis.NewClient(s.Options())
	}
	return s.client
}

// Options returns fresh go-redis options for the server, for tests that
// need clients with special settings (timeouts, pool size, ...).
func (s *Server) Options() *redis.Options {
	return &redis.Options{
		Addr: s.Addr(),
		// CLIENT SETINFO does not exist before Redis 7.2.
		DisableIdentity: true,
	}
}

// NewClient returns a new go-redis client for the server, closed when t
// finishes. configure, if not nil, may change the options first.
func (s *Server) NewClient(t testing.TB, configure func(*redis.Options)) *redis.Client {
	t.Helper()
	opt := s.Options()
	if configure != nil {
		configure(opt)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Stop kills the server (SIGKILL) and waits for it to exit: existing
// connections break and new ones are refused until Start. Stopping a
// stopped server does nothing. Stop fails the test on a Shared server.
//
// With go-redis's default options a command to a stopped server fails only
// after about 2s of retries (MaxRetries 3, DialerRetries 5 with 100ms
// pauses); fault tests usually want a client from NewClient with
// o.MaxRetries = -1 and o.DialerRetries = 1, which fails within about 100ms.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if s.shared {
		t.Fatal("redistest: Stop on the Shared server; use Standalone for fault tests")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	err := s.proc.stop()
	s.proc = nil
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
}

// Start starts a stopped server again on the same address, with an empty
// data set, and waits until it answers PING. Starting a running server does
// nothing. Start fails the test on a Shared server.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	if s.shared {
		t.Fatal("redistest: Start on the Shared server; use Standalone for fault tests")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		t.Fatal("redistest: Start after the server was cleaned up")
	}
	if s.proc != nil {
		return
	}
	var err error
	// The port was released by Stop, but a concurrent freePorts elsewhere
	// may hold it for a moment.
	for range portAttempts {
		var p *process
		if p, err = launch(s.cfg); err == nil {
			s.proc = p
			return
		}
		if !errors.Is(err, errAddrInUse) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("redistest: restart on %s: %v", s.Addr(), err)
}

// Restart stops the server and starts it again on the same address with an
// empty data set. Restart fails the test on a Shared server.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop(t)
	s.Start(t)
}

// close stops the server for good and closes its clients.
func (s *Server) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.client != nil {
		_ = s.client.Close()
		s.client = nil
	}
	if s.proc == nil {
		return nil
	}
	err := s.proc.stop()
	s.proc = nil
	return err
}

var (
	mainActive atomic.Bool

	sharedMu         sync.Mutex
	sharedServer     *Server
	sharedCluster    *ClusterServer // SharedCluster's
	sharedClusterErr error
	sharedErr        error
)

// Shared returns the standalone server shared by all tests of the test
// binary, starting it on first use. Tests using it must use distinct key
// prefixes (or databases) and must not FLUSHALL, Stop, Start or Restart it.
//
// The package must run its tests through Main, which stops the shared
// server at the end:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
//
// Shared fails the test if Main is not in use.
func Shared(t testing.TB) *Server {
	t.Helper()
	Require(t)
	if !mainActive.Load() {
		t.Fatal("redistest: Shared needs `func TestMain(m *testing.M) { redistest.Main(m) }` in the test package")
	}
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if sharedServer == nil && sharedErr == nil {
		sharedServer, sharedErr = startShared()
	}
	if sharedErr != nil {
		t.Fatalf("redistest: shared server: %v", sharedErr)
	}
	return sharedServer
}

func startShared() (*Server, error) {
	dir, err := os.MkdirTemp("", "redistest-shared-")
	if err != nil {
		return nil, err
	}
	s := &Server{shared: true, cfg: procConfig{dir: dir, logFile: filepath.Join(dir, "redis.log")}}
	if err := s.startFresh(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// Main runs the tests of a package and then stops the Shared server and
// the SharedCluster, those that were started, and exits with the tests'
// exit code. Use it as
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
func Main(m *testing.M) {
	mainActive.Store(true)
	code := m.Run()
	mainActive.Store(false)
	if err := errors.Join(stopShared(), stopSharedCluster()); err != nil {
		fmt.Fprintf(os.Stderr, "redistest: stopping the shared servers: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func stopShared() error {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	s := sharedServer
	sharedServer, sharedErr = nil, errors.New("Shared called after Main finished")
	if s == nil {
		return nil
	}
	err := s.close()
	if rmErr := os.RemoveAll(s.cfg.dir); err == nil {
		err = rmErr
	}
	return err
}
