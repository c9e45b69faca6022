package redistest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// SentinelMaster is the name the Sentinel monitors its master by.
	SentinelMaster = "sluice"

	// sentinelDownAfter is Sentinel's down-after-milliseconds: how long the
	// master must not answer before Sentinel fails over.
	sentinelDownAfter = "500"

	// failoverTimeout bounds how long Failover waits for the replica's
	// promotion, and AfterFailover for a client to find it. It bounds a
	// wait, not the time it takes: a healthy failover is done in about a
	// second, but on a busy machine the Sentinel's timers and the
	// processes' start fall behind (20 s was once not enough in a full run).
	failoverTimeout = 2 * time.Minute
)

// SentinelServer is a master, its replica and one Sentinel (quorum 1)
// watching them, on 127.0.0.1. Its methods are safe for concurrent use,
// but those taking a testing.TB must be called from the test's goroutine.
type SentinelServer struct {
	dir string
	tls *TLS // nil: plain

	mu       sync.Mutex
	master   *process
	replica  *process
	sentinel *process
	graves   []net.Listener // the killed masters' ports, held
}

// Sentinel starts a master, a replica of it and a Sentinel that monitors
// the master as SentinelMaster (failing over once it has not answered for
// 500 ms), on free ports of 127.0.0.1, and waits until the Sentinel knows
// the replica. The processes are stopped when t finishes.
func Sentinel(t testing.TB) *SentinelServer {
	t.Helper()
	return newSentinel(t, nil)
}

// SentinelTLS is Sentinel over TLS, with x's certificates: the Sentinel,
// the master and the replica serve TLS (SentinelAddrs and the addresses the
// Sentinel gives are the TLS ports), replication and the Sentinel's links
// use it, and clients must present a certificate x's authority signed
// (Options does).
func SentinelTLS(t testing.TB, x *TLS) *SentinelServer {
	t.Helper()
	return newSentinel(t, x)
}

func newSentinel(t testing.TB, x *TLS) *SentinelServer {
	t.Helper()
	Require(t)
	s := &SentinelServer{dir: t.TempDir(), tls: x}
	t.Cleanup(func() {
		if err := s.close(); err != nil {
			t.Errorf("redistest: %v", err)
		}
	})
	var err error
	// The master sends the replica its data at once: by default it waits
	// 5 s for more replicas to come (repl-diskless-sync-delay).
	if s.master, err = s.start("master", []string{"--repl-diskless-sync-delay", "0"}, ""); err != nil {
		t.Fatalf("redistest: sentinel's master: %v", err)
	}
	host, port := "127.0.0.1", strconv.Itoa(s.master.clientPort())
	if s.replica, err = s.start("replica", []string{"--replicaof", host, port}, ""); err != nil {
		t.Fatalf("redistest: sentinel's replica: %v", err)
	}
	// The replica in sync before the Sentinel starts: the Sentinel then
	// finds it in the master's INFO at once, where it would otherwise wait
	// for its next look (every 10 s) to learn of it.
	if err := s.waitSynced(); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	conf := filepath.Join(s.dir, "sentinel.conf")
	lines := fmt.Sprintf("sentinel monitor %[1]s %[2]s %[3]s 1\nsentinel down-after-milliseconds %[1]s %[4]s\nsentinel failover-timeout %[1]s 5000\n",
		SentinelMaster, host, port, sentinelDownAfter)
	if err := os.WriteFile(conf, []byte(lines), 0o644); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	if s.sentinel, err = s.start("sentinel", nil, conf); err != nil {
		t.Fatalf("redistest: sentinel: %v", err)
	}
	if err := s.waitReplica(); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return s
}

// start launches one process of the set, on a fresh port (two with TLS).
func (s *SentinelServer) start(name string, extra []string, conf string) (*process, error) {
	var err error
	n := 1
	if s.tls != nil {
		n = 2
	}
	for range portAttempts {
		var ports []int
		if ports, err = freePorts(n); err != nil {
			return nil, err
		}
		cfg := procConfig{port: ports[0], dir: s.dir, logFile: filepath.Join(s.dir, name+".log"), sentinel: conf, extra: extra}
		if s.tls != nil {
			cfg.tls, cfg.tlsPort, cfg.tlsReplication = s.tls, ports[1], true
		}
		var p *process
		p, err = launch(cfg)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, errAddrInUse) {
			return nil, err
		}
	}
	return nil, err
}

// waitSynced waits until the replica is in sync with the master.
func (s *SentinelServer) waitSynced() error {
	deadline := time.Now().Add(failoverTimeout)
	for {
		info, err := commandString(s.replica.cfg.addr(), probeTimeout, "INFO", "replication")
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the sentinel's replica did not come up in sync within %v (last error: %v)", failoverTimeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitReplica waits until the replica is in sync and the Sentinel lists
// it: only then can it fail over.
func (s *SentinelServer) waitReplica() error {
	deadline := time.Now().Add(failoverTimeout)
	for {
		info, err := commandString(s.replica.cfg.addr(), probeTimeout, "INFO", "replication")
		known := false
		if err == nil && strings.Contains(info, "master_link_status:up") {
			var v any
			if v, err = command(s.sentinel.cfg.addr(), probeTimeout, "SENTINEL", "REPLICAS", SentinelMaster); err == nil {
				list, _ := v.([]any)
				known = len(list) > 0
			}
		}
		if known {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the sentinel's replica did not come up in sync within %v (last error: %v)", failoverTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// SentinelAddrs returns the Sentinel's address (its TLS port with TLS).
func (s *SentinelServer) SentinelAddrs() []string {
	return []string{tlsAddr(s.sentinel.clientPort())}
}

// MasterAddr returns the plain address of the server that is master now.
func (s *SentinelServer) MasterAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.master.cfg.addr()
}

// Options returns fresh go-redis failover options for the set.
func (s *SentinelServer) Options() *redis.FailoverOptions {
	o := &redis.FailoverOptions{
		MasterName:    SentinelMaster,
		SentinelAddrs: s.SentinelAddrs(),
		// CLIENT SETINFO does not exist before Redis 7.2.
		DisableIdentity: true,
	}
	if s.tls != nil {
		o.TLSConfig = s.tls.ClientConfig()
	}
	return o
}

// NewClient returns a new go-redis failover client for the set, closed when
// t finishes. configure, if not nil, may change the options first.
func (s *SentinelServer) NewClient(t testing.TB, configure func(*redis.FailoverOptions)) *redis.Client {
	t.Helper()
	o := s.Options()
	if configure != nil {
		configure(o)
	}
	c := redis.NewFailoverClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// WaitReplicated waits until the replica has every write the master has
// taken: until the replica's offset (the replication stream it has
// applied) reaches the master's offset at the call. A failover then loses
// none of them. (WAIT would not do: it waits only for the writes of its own
// connection, and the test's writes came on others.)
func (s *SentinelServer) WaitReplicated(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	master, replica := s.master, s.replica
	s.mu.Unlock()
	if replica == nil {
		t.Fatal("redistest: WaitReplicated after Failover: there is no replica")
	}
	offset := func(p *process, field string) int64 {
		t.Helper()
		text, err := commandString(p.cfg.addr(), probeTimeout, "INFO", "replication")
		if err != nil {
			t.Fatalf("redistest: INFO replication on %s: %v", p.cfg.addr(), err)
		}
		for line := range strings.SplitSeq(text, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
				if n, err := strconv.ParseInt(v, 10, 64); err == nil {
					return n
				}
			}
		}
		t.Fatalf("redistest: INFO replication on %s has no %s:\n%s", p.cfg.addr(), field, text)
		return 0
	}
	want := offset(master, "master_repl_offset")
	deadline := time.Now().Add(failoverTimeout)
	for {
		got := offset(replica, "slave_repl_offset")
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: the replica is at offset %d after %v, the master was at %d", got, failoverTimeout, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Failover kills the master (SIGKILL) and waits until the Sentinel has
// promoted the replica and names it as the master. The killed master stays
// down.
func (s *SentinelServer) Failover(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	old, next := s.master, s.replica
	s.mu.Unlock()
	if next == nil {
		t.Fatal("redistest: Failover twice: there is no replica left")
	}
	if err := old.stop(); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	s.hold(t, old.cfg.addr())
	if old.cfg.tls != nil {
		s.hold(t, tlsAddr(old.cfg.tlsPort))
	}
	want := tlsAddr(next.clientPort()) // what the Sentinel gives
	deadline := time.Now().Add(failoverTimeout)
	for {
		v, err := command(s.sentinel.cfg.addr(), probeTimeout, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMaster)
		if pair, ok := v.([]any); err == nil && ok && len(pair) == 2 && fmt.Sprint(pair[0])+":"+fmt.Sprint(pair[1]) == want {
			if role, err := command(next.cfg.addr(), probeTimeout, "ROLE"); err == nil {
				if r, ok := role.([]any); ok && len(r) > 0 && r[0] == "master" {
					break
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: the Sentinel did not promote %s within %v (last: %v, %v)", want, failoverTimeout, v, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.mu.Lock()
	s.master, s.replica = next, nil
	s.mu.Unlock()
}

// AfterFailover calls f until it returns nil, or failoverTimeout has passed,
// and returns its last error: a client finds the promoted master after a
// failed call or more, the more on a busy machine.
func AfterFailover(f func() error) error {
	deadline := time.Now().Add(failoverTimeout)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// hold keeps the killed master's address from another test's server, which
// would answer the clients that still dial it from another data set: it
// listens there and closes every connection at once, so such a client fails
// there as it would on the dead master.
func (s *SentinelServer) hold(t testing.TB, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Logf("redistest: cannot hold the killed master's address %s (%v): a client that still knows it may reach another server", addr, err)
		return
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	s.mu.Lock()
	s.graves = append(s.graves, ln)
	s.mu.Unlock()
}

func (s *SentinelServer) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ln := range s.graves {
		ln.Close()
	}
	var errs []error
	for _, p := range []*process{s.sentinel, s.replica, s.master} {
		if p != nil {
			errs = append(errs, p.stop())
		}
	}
	return errors.Join(errs...)
}
