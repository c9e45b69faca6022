package serve

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/memstore"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" && buildErr == nil {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// fakeClock is a settable clock for the store and the server.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// Sleep returns at once: the service waits for nothing on its own.
func (c *fakeClock) Sleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

// testServer is a Server running in process on free loopback ports.
type testServer struct {
	*Server
	client pb.RateLimitServiceClient
	conn   *grpc.ClientConn
	base   string // http://127.0.0.1:port
	stop   func() error
}

// writeConfig writes files (name → content) into a new directory and
// returns it.
func writeConfig(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// start runs a Server with o (free ports, a quiet logger, a memstore on
// clock when given, the key form on) until the test ends.
func start(t testing.TB, o Options, clock *fakeClock) *testServer {
	t.Helper()
	o.GRPCAddr, o.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	o.KeyForm = true
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if clock != nil {
		if o.Store == nil {
			o.Store = memstore.New(memstore.WithClock(clock))
		}
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	conn, err := grpc.NewClient(s.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	var serr error
	ts := &testServer{Server: s, client: pb.NewRateLimitServiceClient(conn), conn: conn, base: "http://" + s.HTTPAddr().String()}
	ts.stop = func() error {
		once.Do(func() { cancel(); serr = <-done; conn.Close() })
		return serr
	}
	t.Cleanup(func() {
		if err := ts.stop(); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ts
}

// desc builds a descriptor from key, value pairs ("key=value", or "key"
// alone for an empty value).
func desc(kvs ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

// withHits sets a descriptor's own hits_addend.
func withHits(d *rlv3.RateLimitDescriptor, n uint64) *rlv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func (ts *testServer) call(t testing.TB, domain string, ds ...*rlv3.RateLimitDescriptor) *pb.RateLimitResponse {
	t.Helper()
	resp, err := ts.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: domain, Descriptors: ds})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s): %v", domain, err)
	}
	return resp
}

// codesOf is a response's overall code and its statuses' codes, as text:
// "OVER_LIMIT: OK OVER_LIMIT".
func codesOf(r *pb.RateLimitResponse) string {
	var b strings.Builder
	b.WriteString(r.OverallCode.String())
	b.WriteString(":")
	for _, s := range r.Statuses {
		b.WriteString(" ")
		b.WriteString(s.Code.String())
	}
	return b.String()
}

func httpGet(t testing.TB, url string, hdr ...string) (int, string) {
	t.Helper()
	resp, body := httpDo(t, "GET", url, "", hdr...)
	return resp.StatusCode, body
}

func httpPost(t testing.TB, url, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	return httpDo(t, "POST", url, body, hdr...)
}

// httpDo makes one request with the headers given as name, value pairs and
// returns the response and its body.
func httpDo(t testing.TB, method, url, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	return testenv.Do(t, nil, method, url, body, hdr...)
}

// load runs n goroutines, each calling f(g, i) for i = 0, 1, … until f
// returns false or stop is called; stop waits for them.
func load(n int, f func(g, i int) bool) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				if !f(g, i) {
					return
				}
			}
		}()
	}
	var once sync.Once
	return func() { once.Do(func() { close(done) }); wg.Wait() }
}
