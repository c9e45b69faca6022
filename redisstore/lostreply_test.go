package redisstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/redisstore"
)

// loser makes connections that lose one reply on purpose: once armed, the
// next connection to write a script call (EVALSHA or EVAL; calls of them in
// one write) lets Redis run it and answer, reads the answer, and then
// reports a broken connection instead of it, as a connection that breaks
// between Redis's reply and the client does.
type loser struct {
	armed atomic.Bool
	lost  atomic.Int32 // replies lost
	err   error        // what the broken connection reports
	calls int          // the script calls a write needs to lose its replies (0: 1)
}

func (l *loser) dial(next func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &losingConn{Conn: c, l: l}, nil
	}
}

type losingConn struct {
	net.Conn
	l    *loser
	lose bool // the reply to come is to be lost
	gone bool // it was: the connection is broken
}

func (c *losingConn) Write(b []byte) (int, error) {
	low := bytes.ToLower(b)
	n := bytes.Count(low, []byte("evalsha")) + bytes.Count(low, []byte("\r\neval\r\n"))
	if n > 0 && n >= c.l.calls && c.l.armed.CompareAndSwap(true, false) {
		c.lose = true
	}
	return c.Conn.Write(b)
}

func (c *losingConn) Read(b []byte) (int, error) {
	switch {
	case c.gone:
		return 0, c.l.err
	case !c.lose:
		return c.Conn.Read(b)
	}
	// Redis answers. An error first (NOSCRIPT: the script is not loaded
	// yet) means the call did not run: it passes, and the next one is lost.
	// Otherwise the call ran: drop its reply and the connection.
	n, err := c.Conn.Read(b)
	if err != nil {
		return n, err
	}
	if b[0] == '-' {
		c.lose = false
		c.l.armed.Store(true)
		return n, nil
	}
	c.l.lost.Add(1)
	c.gone = true
	_ = c.Conn.Close()
	return 0, c.l.err
}

// lostCase is a client whose connections lose one reply when armed, and
// whether go-redis sends the lost call again through it (it spends twice).
type lostCase struct {
	name    string
	client  func(t *testing.T, l *loser) redis.UniversalClient
	resends bool
}

// lostClients makes lostCase clients of a standalone server and a cluster.
type lostClients struct {
	srv *redistest.Server
	cl  *redistest.ClusterServer
}

// plainDial dials without TLS, as go-redis's own dialer does.
var plainDial = (&net.Dialer{Timeout: 5 * time.Second}).DialContext

// single is a redis.Client with MaxRetries retries, set up by SendOnce when
// once.
func (lc lostClients) single(retries int, once bool) func(t *testing.T, l *loser) redis.UniversalClient {
	return func(t *testing.T, l *loser) redis.UniversalClient {
		return lc.srv.NewClient(t, func(o *redis.Options) {
			o.MaxRetries = retries
			o.Dialer = l.dial(redis.NewDialer(o))
			if once {
				redisstore.SendOnce(o)
			}
		})
	}
}

// cluster is a redis.ClusterClient with MaxRetries retries, set up by
// SendOnceCluster when once.
func (lc lostClients) cluster(retries int, once bool) func(t *testing.T, l *loser) redis.UniversalClient {
	return func(t *testing.T, l *loser) redis.UniversalClient {
		return lc.cl.NewClient(t, func(o *redis.ClusterOptions) {
			o.MaxRetries = retries
			o.Dialer = l.dial(plainDial)
			if once {
				redisstore.SendOnce(o)
			}
		})
	}
}

// ring is a one-shard redis.Ring, set up by SendOnceRing when once.
func (lc lostClients) ring(once bool) func(t *testing.T, l *loser) redis.UniversalClient {
	return func(t *testing.T, l *loser) redis.UniversalClient {
		o := &redis.RingOptions{Addrs: map[string]string{"a": lc.srv.Addr()}, DisableIdentity: true, Dialer: l.dial(plainDial)}
		if once {
			redisstore.SendOnce(o)
		}
		r := redis.NewRing(o)
		t.Cleanup(func() { _ = r.Close() })
		return r
	}
}

// spentAfterLostReply takes once (loading the scripts, spending 1), loses
// the reply of the next take (which Redis runs), and then counts what is
// left of a bucket of 6: 4 when the lost call ran once, 3 when it ran twice.
// It returns that and the lost call's error.
func spentAfterLostReply(t *testing.T, c redis.UniversalClient, l *loser, batched bool) (left int, lostErr error) {
	t.Helper()
	opts := []redisstore.Option{redisstore.WithPrefix(fmt.Sprintf("lost:%d:", time.Now().UnixNano())), redisstore.WithTimeout(5 * time.Second)}
	if !batched {
		opts = append(opts, redisstore.WithoutBatching())
	}
	st := newGoRedis(t, c, opts...)
	defer st.Close()
	p := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: hour, Burst: 6}
	take := func() (sluice.Result, error) {
		return take(context.Background(), st, storelink.Request{Key: "k", Params: p, Cost: 1, MaxDelay: algo.Never})
	}
	if r, err := take(); err != nil || !r.Allowed {
		t.Fatalf("first take: %+v, %v", r, err)
	}
	l.armed.Store(true)
	_, lostErr = take()
	if l.armed.Load() || l.lost.Load() != 1 {
		t.Fatalf("the reply was not lost (armed %v, lost %d)", l.armed.Load(), l.lost.Load())
	}
	for {
		r, err := take()
		if err != nil {
			t.Fatalf("take after the lost reply: %v", err)
		}
		if !r.Allowed {
			return left, lostErr
		}
		left++
	}
}

// A decision whose reply is lost (Redis ran it, then the connection broke)
// runs once through a client set up by SendOnce, SendOnceCluster or
// SendOnceRing, whether the connection reports an EOF or a reset, alone or
// batched; the caller gets ErrReplyLost as an outage. Without them, go-redis
// sends it again and it spends twice (the first cases: they show the fault
// is real), on a cluster even with MaxRetries -1.
func TestLostReply(t *testing.T) {
	lc := lostClients{redistest.Shared(t), redistest.SharedCluster(t)}
	for _, c := range []lostCase{
		{"client", lc.single(0, false), true},
		{"client MaxRetries -1", lc.single(-1, false), false},
		{"cluster MaxRetries -1", lc.cluster(-1, false), true},
		{"ring", lc.ring(false), true},
		{"client SendOnce", lc.single(0, true), false},
		{"client SendOnce MaxRetries -1", lc.single(-1, true), false},
		{"cluster SendOnceCluster", lc.cluster(0, true), false},
		{"ring SendOnceRing", lc.ring(true), false},
	} {
		for _, batched := range []bool{false, true} {
			for _, e := range []error{io.EOF, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}} {
				t.Run(fmt.Sprintf("%s/batched=%v/%v", c.name, batched, e), func(t *testing.T) {
					l := &loser{err: e}
					left, err := spentAfterLostReply(t, c.client(t, l), l, batched)
					switch {
					case c.resends && left != 3:
						t.Errorf("%d left of 6 after one take and a lost one; want 3 (the lost one sent again): the fault did not happen as the test expects", left)
					case !c.resends && left != 4:
						t.Errorf("%d left of 6 after one take and a lost one; want 4 (the lost one ran once)", left)
					case !c.resends && !(errors.Is(err, sluice.ErrStoreUnavailable) && (errors.Is(err, redisstore.ErrReplyLost) || !strings.Contains(c.name, "SendOnce"))):
						t.Errorf("the lost call's error: %v; want ErrStoreUnavailable (and ErrReplyLost with SendOnce)", err)
					}
				})
			}
		}
	}
}

// A pipeline whose replies are lost runs each of its calls once with
// SendOnce and SendOnceCluster: go-redis sends such a pipeline again whole
// (a cluster client even the calls it had read the replies of), so without
// them some of its decisions spend twice.
func TestLostPipelineReply(t *testing.T) {
	lc := lostClients{redistest.Shared(t), redistest.SharedCluster(t)}
	for _, c := range []lostCase{
		{"client", lc.single(0, false), true},
		{"cluster MaxRetries -1", lc.cluster(-1, false), true},
		{"client SendOnce", lc.single(0, true), false},
		{"cluster SendOnceCluster", lc.cluster(0, true), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := &loser{err: io.EOF, calls: 2}
			client := c.client(t, l)
			twice := 0
			// The calls race into pipelines; a round loses one pipeline of
			// two script calls or more, if the race made one.
			for round := 0; l.lost.Load() == 0; round++ {
				if round == 20 {
					t.Fatal("no pipeline of two script calls or more in 20 rounds")
				}
				twice += lostPipelineRound(t, client, l)
			}
			switch {
			case c.resends && twice == 0:
				t.Errorf("no decision spent twice: the fault did not happen as the test expects")
			case !c.resends && twice > 0:
				t.Errorf("%d decisions spent twice", twice)
			}
		})
	}
}

// lostPipelineRound takes once on each of 32 keys (two algorithms, so that
// even one server gets several script calls in a pipeline), arms l, takes
// again on every key at once, and returns how many keys spent more than the
// two takes (a bucket of 6: 4 left).
func lostPipelineRound(t *testing.T, c redis.UniversalClient, l *loser) (twice int) {
	t.Helper()
	st := newGoRedis(t, c, redisstore.WithPrefix(fmt.Sprintf("lostp:%d:", time.Now().UnixNano())), redisstore.WithTimeout(5*time.Second))
	defer st.Close()
	const keys = 32
	req := func(i int) storelink.Request {
		kind := algo.TokenBucket
		if i%2 == 1 {
			kind = algo.GCRA
		}
		return storelink.Request{Key: fmt.Sprintf("k%d", i), Params: algo.Params{Kind: kind, Rate: 1, Period: hour, Burst: 6}, Cost: 1, MaxDelay: algo.Never}
	}
	for i := range keys {
		if _, err := take(context.Background(), st, req(i)); err != nil {
			t.Fatalf("first take: %v", err)
		}
	}
	l.armed.Store(true)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range keys {
		wg.Go(func() {
			<-start
			_, _ = take(context.Background(), st, req(i))
		})
	}
	close(start)
	wg.Wait()
	l.armed.Store(false)
	for i := range keys {
		left := 0
		for ; ; left++ {
			r, err := take(context.Background(), st, req(i))
			if err != nil {
				t.Fatalf("take after the round: %v", err)
			}
			if !r.Allowed {
				break
			}
		}
		if left < 4 {
			twice++
		}
	}
	return twice
}

// The dialers SendOnce and SendOnceFailover install (over go-redis's own
// when none is set): a read from a connection the server closed fails with
// ErrReplyLost, a dial that fails keeps its own error (go-redis retries it:
// nothing was sent), and a TCP connection still offers its socket for
// go-redis's health check of pooled connections.
func TestSendOnceDialers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := refused.Addr().String()
	_ = refused.Close()
	defer ln.Close()
	o := &redis.Options{}
	redisstore.SendOnce(o)
	fo := &redis.FailoverOptions{}
	redisstore.SendOnce(fo)
	for name, dial := range map[string]func(context.Context, string, string) (net.Conn, error){"SendOnce": o.Dialer, "SendOnceFailover": fo.Dialer} {
		c, err := dial(context.Background(), "tcp", ln.Addr().String())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, ok := c.(syscall.Conn); !ok {
			t.Errorf("%s: the connection hides its socket", name)
		}
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, redisstore.ErrReplyLost) {
			t.Errorf("%s: a read from a closed connection: %v, want ErrReplyLost", name, err)
		}
		_ = c.Close()
		if _, err := dial(context.Background(), "tcp", gone); err == nil || errors.Is(err, redisstore.ErrReplyLost) {
			t.Errorf("%s: a refused dial: %v, want its own error", name, err)
		}
	}
}

// A client set up by SendOnceCluster still follows the cluster's
// redirections, which run nothing where they are answered: a decision on a
// key whose slot is being migrated (ASK: the key has moved already) and then
// has moved (MOVED: the client's map is stale) is made once, on the node
// that holds the key, and the budget carries over.
func TestSendOnceClusterRedirects(t *testing.T) {
	t.Parallel() // a cluster of its own: its start overlaps the other parallel tests'
	cl := redistest.Cluster(t)
	client := func() *redisstore.Store {
		c := cl.NewClient(t, func(o *redis.ClusterOptions) {
			o.ContextTimeoutEnabled = true
			redisstore.SendOnce(o)
		})
		st := newGoRedis(t, c, redisstore.WithPrefix("mv:"), redisstore.WithTimeout(5*time.Second))
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	// Two clients: one meets the migration (ASK); the other, whose map is
	// loaded before it and not used until the slot has moved, meets MOVED.
	// (One client alone may have reloaded its map by then.)
	asked, moved := client(), client()
	ctx := context.Background()
	p := algo.Params{Kind: algo.TokenBucket, Rate: 1, Period: hour, Burst: 5}
	take := func(st *redisstore.Store, cost, want int64) {
		t.Helper()
		r, err := take(ctx, st, storelink.Request{Key: "k", Params: p, Cost: cost, MaxDelay: algo.Never})
		if err != nil || !r.Allowed || r.Remaining != want {
			t.Fatalf("take %d: %+v, %v; want allowed with %d left", cost, r, err, want)
		}
	}
	take(asked, 1, 4)
	take(moved, 0, 4) // a look: its map is loaded
	key := "mv:k"
	slot := redisrun.Slot(key)
	nodes := map[string]*redis.Client{}
	ids := map[string]string{}
	var src, dst string
	for _, addr := range cl.Addrs() {
		n := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
		t.Cleanup(func() { _ = n.Close() })
		nodes[addr] = n
		id, err := n.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatal(err)
		}
		ids[addr] = id
		if n, _ := n.Exists(ctx, key).Result(); n == 1 {
			src = addr
		}
	}
	for _, addr := range cl.Addrs() {
		if addr != src {
			dst = addr
			break
		}
	}
	if src == "" {
		t.Fatalf("no node holds %s", key)
	}
	host, port, _ := net.SplitHostPort(dst)
	must := func(cmd *redis.Cmd) {
		t.Helper()
		if err := cmd.Err(); err != nil {
			t.Fatalf("%v: %v", cmd.Args(), err)
		}
	}
	must(nodes[dst].Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[src]))
	must(nodes[src].Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[dst]))
	must(nodes[src].Do(ctx, "MIGRATE", host, port, "", 0, 5000, "KEYS", key))
	take(asked, 1, 3) // the source answers ASK
	for _, addr := range cl.Addrs() {
		must(nodes[addr].Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", ids[dst]))
	}
	take(moved, 1, 2) // the source answers MOVED
	if n, _ := nodes[dst].Exists(ctx, key).Result(); n != 1 {
		t.Errorf("%s is not on the node it moved to", key)
	}
	// The redirections happened: the source counts the errors it replied.
	stats, err := nodes[src].Info(ctx, "errorstats").Result()
	if err != nil || !strings.Contains(stats, "errorstat_ASK:count=") || !strings.Contains(stats, "errorstat_MOVED:count=") {
		t.Errorf("the source's error replies: %q, %v; want ASK and MOVED among them", stats, err)
	}
}
