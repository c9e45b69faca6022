package redistest

import (
	"errors"
	"fmt"
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
	// clusterNodes is the number of masters of a Cluster.
	clusterNodes = 3

	// clusterTimeout bounds how long a new cluster may take to converge.
	clusterTimeout = 20 * time.Second

	// clusterNodeTimeout is redis-server's --cluster-node-timeout, in ms.
	clusterNodeTimeout = "5000"
)

// clusterSlotRanges is the split of the 16384 hash slots over the masters,
// the same as redis-cli --cluster create makes.
var clusterSlotRanges = [clusterNodes][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}

// ClusterServer is a Redis Cluster of three masters (no replicas) on
// 127.0.0.1. Its methods are safe for concurrent use.
type ClusterServer struct {
	dir string
	tls *TLS // nil: plain

	mu     sync.Mutex
	nodes  []*process
	client *redis.ClusterClient
}

// Cluster starts three redis-server processes in cluster mode on free ports
// of 127.0.0.1, assigns them a third of the hash slots each, joins them, and
// waits (up to 20s) until every node reports cluster_state:ok and knows the
// owner of every slot. The nodes and all clients obtained from the cluster
// are stopped and closed when t finishes.
func Cluster(t testing.TB) *ClusterServer {
	t.Helper()
	return newCluster(t, nil)
}

// ClusterTLS is Cluster over TLS, with x's certificates: clients and the
// cluster bus use TLS (tls-cluster), Addrs are the TLS ports, and clients
// must present a certificate x's authority signed (x.ClientConfig does).
func ClusterTLS(t testing.TB, x *TLS) *ClusterServer {
	t.Helper()
	return newCluster(t, x)
}

func newCluster(t testing.TB, x *TLS) *ClusterServer {
	t.Helper()
	Require(t)
	c := &ClusterServer{dir: t.TempDir(), tls: x}
	t.Cleanup(func() {
		if err := c.close(); err != nil {
			t.Errorf("redistest: %v", err)
		}
	})
	if err := c.start(); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return c
}

// start starts c's nodes and joins them into a cluster; the caller stops
// them (close) whether it fails or not.
func (c *ClusterServer) start() error {
	for i := range clusterNodes {
		p, err := c.startNode(i)
		if err != nil {
			return fmt.Errorf("cluster node %d: %w", i, err)
		}
		c.nodes = append(c.nodes, p)
	}
	if err := c.create(); err != nil {
		var logs strings.Builder
		for _, p := range c.nodes {
			fmt.Fprintf(&logs, "\n%s:\n%s", p.cfg.logFile, readLogFrom(p.cfg.logFile, 0))
		}
		return fmt.Errorf("creating cluster on %v: %w; the nodes' logs:%s", c.Addrs(), err, logs.String())
	}
	return nil
}

// SharedCluster returns the Cluster shared by all tests of the test binary,
// starting it on first use: starting and joining three nodes takes a second
// or two, which a test that only decides on a cluster need not wait each
// time. Tests using it must use distinct key prefixes and must not FLUSHALL,
// stop a node, move a slot or flush the script cache (use Cluster for
// those); like Shared, it needs Main, which stops it at the end.
func SharedCluster(t testing.TB) *ClusterServer {
	t.Helper()
	Require(t)
	if !mainActive.Load() {
		t.Fatal("redistest: SharedCluster needs `func TestMain(m *testing.M) { redistest.Main(m) }` in the test package")
	}
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if sharedCluster == nil && sharedClusterErr == nil {
		sharedCluster, sharedClusterErr = startSharedCluster()
	}
	if sharedClusterErr != nil {
		t.Fatalf("redistest: shared cluster: %v", sharedClusterErr)
	}
	return sharedCluster
}

func startSharedCluster() (*ClusterServer, error) {
	dir, err := os.MkdirTemp("", "redistest-shared-cluster-")
	if err != nil {
		return nil, err
	}
	c := &ClusterServer{dir: dir}
	if err := c.start(); err != nil {
		_ = c.close()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

// stopSharedCluster stops the SharedCluster, if it was started (Main).
func stopSharedCluster() error {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	c := sharedCluster
	sharedCluster, sharedClusterErr = nil, errors.New("SharedCluster called after Main finished")
	if c == nil {
		return nil
	}
	err := c.close()
	if rmErr := os.RemoveAll(c.dir); err == nil {
		err = rmErr
	}
	return err
}

func (c *ClusterServer) startNode(i int) (*process, error) {
	var err error
	for range portAttempts {
		var ports []int
		n := 2
		if c.tls != nil {
			n = 3 // a TLS port too
		}
		if ports, err = freePorts(n); err != nil {
			return nil, err
		}
		tlsPort := 0
		if c.tls != nil {
			tlsPort = ports[2]
		}
		var p *process
		p, err = launch(procConfig{
			port:    ports[0],
			busPort: ports[1],
			tls:     c.tls, tlsPort: tlsPort, tlsBus: true,
			dir:     c.dir,
			logFile: filepath.Join(c.dir, fmt.Sprintf("node-%d.log", i)),
			extra: []string{
				"--cluster-enabled", "yes",
				"--cluster-config-file", filepath.Join(c.dir, fmt.Sprintf("nodes-%d.conf", i)),
				"--cluster-node-timeout", clusterNodeTimeout,
			},
		})
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, errAddrInUse) {
			return nil, err
		}
	}
	return nil, err
}

// create does by hand what redis-cli --cluster create does: distinct config
// epochs, slot assignment, MEET, then waits for convergence.
func (c *ClusterServer) create() error {
	for i, p := range c.nodes {
		addr := p.cfg.addr()
		if _, err := command(addr, probeTimeout, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return fmt.Errorf("%s: CLUSTER SET-CONFIG-EPOCH: %w", addr, err)
		}
		r := clusterSlotRanges[i]
		if _, err := command(addr, probeTimeout, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(r[0]), strconv.Itoa(r[1])); err != nil {
			return fmt.Errorf("%s: CLUSTER ADDSLOTSRANGE: %w", addr, err)
		}
	}
	// Every pair meets directly, instead of only the first node meeting the
	// others as redis-cli does: that way nodes need not learn about each
	// other through gossip, which takes seconds longer.
	for i, p := range c.nodes {
		addr := p.cfg.addr()
		for _, q := range c.nodes[i+1:] {
			if _, err := command(addr, probeTimeout, "CLUSTER", "MEET", "127.0.0.1",
				strconv.Itoa(q.clientPort()), strconv.Itoa(q.cfg.busPort)); err != nil {
				return fmt.Errorf("%s: CLUSTER MEET %s: %w", addr, q.cfg.addr(), err)
			}
		}
	}
	deadline := time.Now().Add(clusterTimeout)
	for {
		err := c.converged()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not converged after %v: %w", clusterTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// converged reports nil if every node sees a healthy cluster of all nodes
// with the expected slot owners.
func (c *ClusterServer) converged() error {
	for _, p := range c.nodes {
		if err := c.nodeConverged(p); err != nil {
			return err
		}
	}
	return nil
}

func (c *ClusterServer) nodeConverged(p *process) error {
	addr := p.cfg.addr()
	info, err := commandString(addr, probeTimeout, "CLUSTER", "INFO")
	if err != nil {
		return fmt.Errorf("%s: CLUSTER INFO: %w", addr, err)
	}
	fields := map[string]string{}
	for line := range strings.SplitSeq(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_slots_assigned": "16384",
		"cluster_slots_ok":       "16384",
		"cluster_known_nodes":    strconv.Itoa(clusterNodes),
		"cluster_size":           strconv.Itoa(clusterNodes),
	}
	for k, v := range want {
		if fields[k] != v {
			return fmt.Errorf("%s: CLUSTER INFO has %s:%s, want %s", addr, k, fields[k], v)
		}
	}

	nodes, err := commandString(addr, probeTimeout, "CLUSTER", "NODES")
	if err != nil {
		return fmt.Errorf("%s: CLUSTER NODES: %w", addr, err)
	}
	// <id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent> <pong-recv> <config-epoch> <link-state> <slot> ...
	seen := 0
	for line := range strings.SplitSeq(strings.TrimSpace(nodes), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return fmt.Errorf("%s: bad CLUSTER NODES line %q", addr, line)
		}
		for _, flag := range strings.Split(f[2], ",") {
			switch flag {
			case "handshake", "fail", "fail?", "noaddr":
				return fmt.Errorf("%s: CLUSTER NODES line %q has flag %s", addr, line, flag)
			}
		}
		if f[7] != "connected" {
			return fmt.Errorf("%s: CLUSTER NODES line %q is not connected", addr, line)
		}
		for i, q := range c.nodes {
			// The harness's plain connection sees plain ports (Redis 7
			// shows a TLS connection the TLS ports).
			if !strings.HasPrefix(f[1], fmt.Sprintf("%s@%d", q.cfg.addr(), q.cfg.busPort)) {
				continue
			}
			r := clusterSlotRanges[i]
			if len(f) != 9 || f[8] != fmt.Sprintf("%d-%d", r[0], r[1]) {
				return fmt.Errorf("%s: CLUSTER NODES line %q: want only slots %d-%d", addr, line, r[0], r[1])
			}
			seen++
		}
	}
	if seen != clusterNodes {
		return fmt.Errorf("%s: CLUSTER NODES knows %d of the %d nodes:\n%s", addr, seen, clusterNodes, nodes)
	}
	return nil
}

// Addrs returns the "127.0.0.1:port" addresses of the three masters, in
// slot order: the first owns slots 0-5460, the second 5461-10922, the third
// 10923-16383. Those of a ClusterTLS are its TLS ports.
func (c *ClusterServer) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, p := range c.nodes {
		addrs[i] = tlsAddr(p.clientPort())
	}
	return addrs
}

// Client returns a go-redis cluster client. Every call returns the same
// client; do not Close it, it is closed when the cluster is cleaned up.
func (c *ClusterServer) Client() *redis.ClusterClient {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.client == nil {
		c.client = redis.NewClusterClient(c.Options())
	}
	return c.client
}

// Options returns fresh go-redis cluster options for the cluster, for tests
// that need clients with special settings.
func (c *ClusterServer) Options() *redis.ClusterOptions {
	o := &redis.ClusterOptions{
		Addrs: c.Addrs(),
		// CLIENT SETINFO does not exist before Redis 7.2.
		DisableIdentity: true,
	}
	if c.tls != nil {
		o.TLSConfig = c.tls.ClientConfig()
	}
	return o
}

// NewClient returns a new go-redis cluster client, closed when t finishes.
// configure, if not nil, may change the options first.
func (c *ClusterServer) NewClient(t testing.TB, configure func(*redis.ClusterOptions)) *redis.ClusterClient {
	t.Helper()
	opt := c.Options()
	if configure != nil {
		configure(opt)
	}
	cc := redis.NewClusterClient(opt)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func (c *ClusterServer) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.client != nil {
		_ = c.client.Close()
		c.client = nil
	}
	var errs []error
	for _, p := range c.nodes {
		errs = append(errs, p.stop())
	}
	return errors.Join(errs...)
}
