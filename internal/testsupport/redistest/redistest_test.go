package redistest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/internal/testsupport/childproc"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func TestStandalone(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := redistest.Standalone(t)
	t.Logf("standalone start-up took %v", time.Since(start))
	ctx := context.Background()
	c := s.Client()
	if c != s.Client() {
		t.Error("Client returned different clients")
	}
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") {
		t.Errorf("Addr = %q, want 127.0.0.1:port", s.Addr())
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k = %q, %v; want v", got, err)
	}

	addr, pid := s.Addr(), s.Pid()
	start = time.Now()
	s.Restart(t)
	t.Logf("restart took %v", time.Since(start))
	if s.Addr() != addr {
		t.Errorf("Addr after Restart = %s, want %s", s.Addr(), addr)
	}
	if s.Pid() == pid || s.Pid() == 0 {
		t.Errorf("Pid after Restart = %d, before %d", s.Pid(), pid)
	}
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET k after Restart: err = %v, want redis.Nil (data lost)", err)
	}
	if err := c.Set(ctx, "k2", "v2", 0).Err(); err != nil {
		t.Fatalf("SET after Restart: %v", err)
	}
}

func TestStopStart(t *testing.T) {
	t.Parallel()
	s := redistest.Standalone(t)
	ctx := context.Background()
	c := s.NewClient(t, func(o *redis.Options) {
		// Fail fast: go-redis defaults retry for ~2s against a dead server.
		o.MaxRetries = -1
		o.DialerRetries = 1
	})
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	s.Stop(t)
	if s.Pid() != 0 {
		t.Errorf("Pid after Stop = %d, want 0", s.Pid())
	}
	s.Stop(t) // no-op
	// The pooled connection is broken and redialing is refused.
	for i := range 3 {
		start := time.Now()
		if err := c.Ping(ctx).Err(); err == nil {
			t.Fatalf("PING %d after Stop succeeded", i)
		}
		if d := time.Since(start); d > time.Second && testenv.Timing(t, "PING fails within 1s") {
			t.Errorf("PING %d after Stop took %v to fail", i, d)
		}
	}
	s.Start(t)
	s.Start(t) // no-op
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Start: %v", err)
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	start := time.Now()
	cl := redistest.Cluster(t)
	t.Logf("cluster start-up took %v", time.Since(start))
	if n := len(cl.Addrs()); n != 3 {
		t.Fatalf("Addrs() has %d addresses, want 3", n)
	}
	ctx := context.Background()
	c := cl.Client()
	slots := map[int64]bool{}
	for i := range 30 {
		k := fmt.Sprintf("key-%d", i)
		slot, err := c.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots[slot] = true
		if err := c.Set(ctx, k, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	if len(slots) < 3 {
		t.Errorf("keys used only %d slots", len(slots))
	}
	for i := range 30 {
		k := fmt.Sprintf("key-%d", i)
		if got, err := c.Get(ctx, k).Int(); err != nil || got != i {
			t.Fatalf("GET %s = %d, %v; want %d", k, got, err, i)
		}
	}
	// Every master got some of the keys.
	for _, addr := range cl.Addrs() {
		n := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
		size, err := n.DBSize(ctx).Result()
		n.Close()
		if err != nil || size == 0 {
			t.Errorf("DBSIZE on %s = %d, %v; want > 0", addr, size, err)
		}
	}
	// Multi-key commands within one slot work.
	if err := c.MSet(ctx, "{u1}a", 1, "{u1}b", 2).Err(); err != nil {
		t.Errorf("MSET in one slot: %v", err)
	}
}

func TestShared(t *testing.T) {
	t.Parallel()
	s := redistest.Shared(t)
	if s2 := redistest.Shared(t); s2 != s {
		t.Fatal("Shared returned two servers")
	}
	ctx := context.Background()
	if err := s.Client().Set(ctx, "TestShared:k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Client().Get(ctx, "TestShared:k").Result(); err != nil || got != "v" {
		t.Fatalf("GET = %q, %v", got, err)
	}
}

func TestSharedCluster(t *testing.T) {
	t.Parallel()
	c := redistest.SharedCluster(t)
	if c2 := redistest.SharedCluster(t); c2 != c {
		t.Fatal("SharedCluster returned two clusters")
	}
	ctx := context.Background()
	for _, k := range []string{"TestSharedCluster:a", "TestSharedCluster:b", "TestSharedCluster:c"} {
		if err := c.Client().Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if got, err := c.Client().Get(ctx, k).Result(); err != nil || got != "v" {
			t.Fatalf("GET %s = %q, %v", k, got, err)
		}
	}
}

// helperEnv makes the test binary run one of the helper tests below.
const helperEnv = "REDISTEST_HELPER"

// runHelper runs this test binary with only the helper test name selected
// and env added to the environment.
func runHelper(t *testing.T, name string, env ...string) (string, error) {
	t.Helper()
	return childproc.Run(t, name, append([]string{helperEnv + "=1"}, env...)...)
}

func TestHelperRequire(t *testing.T) {
	if _, ok := childproc.Config(helperEnv); !ok {
		t.Skip("helper for TestRequire")
	}
	redistest.Standalone(t)
	t.Log("REACHED")
}

func TestRequire(t *testing.T) {
	t.Parallel()
	out, err := runHelper(t, "TestHelperRequire", "PATH=", redistest.RequireEnv+"=")
	if err != nil || !strings.Contains(out, "--- SKIP") ||
		!strings.Contains(out, "redis-server not found: SKIPPING Redis tests") || strings.Contains(out, "REACHED") {
		t.Errorf("without redis-server: err = %v, output:\n%s", err, out)
	}
	out, err = runHelper(t, "TestHelperRequire", "PATH=", redistest.RequireEnv+"=1")
	if err == nil || !strings.Contains(out, "--- FAIL") ||
		!strings.Contains(out, "redis-server not found on PATH") || strings.Contains(out, "REACHED") {
		t.Errorf("without redis-server, %s=1: err = %v, output:\n%s", redistest.RequireEnv, err, out)
	}
}

// A Sentinel set serves through a failover client, and after Failover the
// client reaches the promoted replica, which kept the replicated writes.
func TestSentinel(t *testing.T) {
	s := redistest.Sentinel(t)
	c := s.NewClient(t, nil)
	ctx := context.Background()
	first := s.MasterAddr()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through the sentinel: %v", err)
	}
	s.WaitReplicated(t)
	s.Failover(t)
	if s.MasterAddr() == first {
		t.Fatalf("the master is still %s after Failover", first)
	}
	var got string
	err := redistest.AfterFailover(func() (err error) {
		got, err = c.Get(ctx, "k").Result()
		return err
	})
	if err != nil || got != "v" {
		t.Fatalf("GET after the failover: %q, %v", got, err)
	}
}

// A TLS server and a TLS cluster answer a client with the authority's
// certificate and refuse one without its client certificate.
func TestTLS(t *testing.T) {
	x := redistest.NewTLS(t)
	ctx := context.Background()
	s := redistest.StandaloneTLS(t, x)
	c := redis.NewClient(&redis.Options{Addr: s.TLSAddr(), TLSConfig: x.ClientConfig(), DisableIdentity: true})
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET over TLS: %v", err)
	}
	bare := x.ClientConfig()
	bare.Certificates = nil
	nocert := redis.NewClient(&redis.Options{Addr: s.TLSAddr(), TLSConfig: bare, DisableIdentity: true, MaxRetries: -1})
	defer nocert.Close()
	if err := nocert.Ping(ctx).Err(); err == nil {
		t.Fatal("PING over TLS without a client certificate: no error")
	}
	cl := redistest.ClusterTLS(t, x)
	cc := cl.Client()
	for i := range 20 { // keys on every master
		if err := cc.Set(ctx, fmt.Sprint("k", i), "v", 0).Err(); err != nil {
			t.Fatalf("SET over TLS on the cluster: %v", err)
		}
	}
	st := redistest.SentinelTLS(t, x)
	sc := st.NewClient(t, nil)
	if err := sc.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET over TLS through the sentinel: %v", err)
	}
	st.WaitReplicated(t)
	st.Failover(t)
	var got string
	err := redistest.AfterFailover(func() (err error) {
		got, err = sc.Get(ctx, "k").Result()
		return err
	})
	if err != nil || got != "v" {
		t.Fatalf("GET over TLS after the failover: %q, %v", got, err)
	}
}
