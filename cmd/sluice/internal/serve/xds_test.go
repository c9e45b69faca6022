package serve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluice-go/sluice/cmd/sluice/internal/rlsconfig"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// xdsServer is go-control-plane's own xDS server and snapshot cache (what
// Envoy Gateway runs) on a loopback port, recording the requests it gets.
type xdsServer struct {
	cache cachev3.SnapshotCache
	addr  string
	creds credentials.TransportCredentials
	grpc  *grpc.Server
	mu    sync.Mutex
	reqs  []*discoverygrpc.DiscoveryRequest
}

// newXDSServer serves on addr ("127.0.0.1:0" for a free port) until the
// test ends or stop is called.
func newXDSServer(t *testing.T, addr string, creds credentials.TransportCredentials) *xdsServer {
	t.Helper()
	x := &xdsServer{cache: cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil), creds: creds}
	x.start(t, addr)
	t.Cleanup(x.stop)
	return x
}

func (x *xdsServer) start(t *testing.T, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	x.addr = ln.Addr().String()
	cb := serverv3.CallbackFuncs{StreamRequestFunc: func(_ int64, r *discoverygrpc.DiscoveryRequest) error {
		x.mu.Lock()
		x.reqs = append(x.reqs, r)
		x.mu.Unlock()
		return nil
	}}
	var opts []grpc.ServerOption
	if x.creds != nil {
		opts = append(opts, grpc.Creds(x.creds))
	}
	x.grpc = grpc.NewServer(opts...)
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(x.grpc, serverv3.NewServer(context.Background(), x.cache, cb))
	go x.grpc.Serve(ln)
}

func (x *xdsServer) stop() { x.grpc.Stop() }

// set serves the configs as version to node "default".
func (x *xdsServer) set(t testing.TB, version string, cfgs ...*rlsconf.RateLimitConfig) {
	t.Helper()
	x.setNode(t, "default", version, cfgs...)
}

// setNode serves the configs as version to node.
func (x *xdsServer) setNode(t testing.TB, node, version string, cfgs ...*rlsconf.RateLimitConfig) {
	t.Helper()
	res := make([]types.Resource, len(cfgs))
	for i, c := range cfgs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

// waitRequest waits for a request (an ACK or a NACK) that ok accepts.
func (x *xdsServer) waitRequest(t *testing.T, what string, ok func(*discoverygrpc.DiscoveryRequest) bool) *discoverygrpc.DiscoveryRequest {
	t.Helper()
	var found *discoverygrpc.DiscoveryRequest
	eventually(t, what, func() bool {
		x.mu.Lock()
		defer x.mu.Unlock()
		for _, r := range x.reqs {
			if ok(r) {
				found = r
				return true
			}
		}
		return false
	})
	return found
}

// eventually waits for cond, failing the test after a generous while.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s", what)
		}
	}
}

// rlc is a RateLimitConfig of domain with one rule per key: n requests a
// unit, named name.
func rlc(name, domain string, unit rlsconf.RateLimitUnit, n uint32, keys ...string) *rlsconf.RateLimitConfig {
	c := &rlsconf.RateLimitConfig{Name: name, Domain: domain}
	for _, k := range keys {
		c.Descriptors = append(c.Descriptors, &rlsconf.RateLimitDescriptor{Key: k,
			RateLimit: &rlsconf.RateLimitPolicy{Unit: unit, RequestsPerUnit: n, Name: name}})
	}
	return c
}

// startXDS runs a Server whose rules come from x.
func startXDS(t *testing.T, x *xdsServer, xo XDSOptions, clock *fakeClock) *testServer {
	t.Helper()
	xo.Server = x.addr
	if xo.BackoffMin == 0 {
		xo.BackoffMin, xo.BackoffMax = 10*time.Millisecond, 50*time.Millisecond
	}
	return start(t, Options{XDS: &xo}, clock)
}

func (ts *testServer) waitOrigin(t *testing.T, version string) {
	t.Helper()
	eventually(t, "on version "+version, func() bool { return strings.HasSuffix(ts.Config().Origin, "version "+version+")") })
}

// Before the first configuration, calls are UNAVAILABLE and the service
// not ready; a good one is ACKed and decides; a bad one is NACKed with the
// load's error, the rules in use staying; the next good one is ACKed.
func TestXDSAckNack(t *testing.T) {
	x := newXDSServer(t, "127.0.0.1:0", nil)
	ts := startXDS(t, x, XDSOptions{}, &fakeClock{t: time.Unix(1e9, 0)})

	_, err := ts.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{desc("k=a")}})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("before the first configuration: %v, want UNAVAILABLE", err)
	}
	if code, body := httpGet(t, ts.base+"/readyz"); code != 503 {
		t.Fatalf("/readyz before the first configuration: %d %s", code, body)
	}
	if o := ts.Config().Origin; !strings.Contains(o, "waiting for the first configuration") {
		t.Fatalf("origin before the first configuration: %q", o)
	}
	hc := healthpb.NewHealthClient(ts.conn)
	if h, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"}); err != nil || h.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health before the first configuration: %v %v", h, err)
	}

	x.set(t, "1", rlc("edge", "d", rlsconf.RateLimitUnit_MINUTE, 2, "k"))
	ts.waitOrigin(t, "1")
	ack := x.waitRequest(t, "ACKed", func(r *discoverygrpc.DiscoveryRequest) bool { return r.VersionInfo == "1" })
	if ack.ErrorDetail != nil || ack.ResponseNonce == "" || ack.TypeUrl != XDSTypeURL {
		t.Fatalf("ACK %v", ack)
	}
	if h, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"}); err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health after the first configuration: %v %v", h, err)
	}
	if got := codesOf(ts.call(t, "d", desc("k=a"))) + " " + codesOf(ts.call(t, "d", desc("k=a"))) + " " + codesOf(ts.call(t, "d", desc("k=a"))); got != "OK: OK OK: OK OVER_LIMIT: OVER_LIMIT" {
		t.Fatalf("version 1 decides %s", got)
	}
	if code, body := httpGet(t, ts.base+"/debug/config"); code != 200 || !strings.Contains(body, "origin: xDS "+x.addr+" (node default, version 1)") || !strings.Contains(body, "xds/edge") {
		t.Fatalf("/debug/config: %d\n%s", code, body)
	}

	// Two resources of one domain: a load error, as two such files are.
	x.set(t, "2", rlc("a", "d", rlsconf.RateLimitUnit_MINUTE, 100, "k"), rlc("b", "d", rlsconf.RateLimitUnit_MINUTE, 100, "k"))
	nack := x.waitRequest(t, "NACKed", func(r *discoverygrpc.DiscoveryRequest) bool { return r.ErrorDetail != nil })
	if nack.VersionInfo != "1" || !strings.Contains(nack.ErrorDetail.Message, "duplicate domain 'd'") || nack.ErrorDetail.Code != int32(codes.InvalidArgument) {
		t.Fatalf("NACK: version %q, detail %v", nack.VersionInfo, nack.ErrorDetail)
	}
	v := ts.Config()
	if v.LastError == nil || v.LastError.Error() != nack.ErrorDetail.Message || !strings.HasSuffix(v.Origin, "version 1)") {
		t.Fatalf("after the NACK: origin %q, last error %v", v.Origin, v.LastError)
	}
	if got := codesOf(ts.call(t, "d", desc("k=a"))); got != "OVER_LIMIT: OVER_LIMIT" {
		t.Fatalf("after the NACK version 1 still decides: %s", got)
	}

	x.set(t, "3", rlc("edge", "d", rlsconf.RateLimitUnit_MINUTE, 3, "k"))
	ts.waitOrigin(t, "3")
	if v := ts.Config(); v.LastError != nil {
		t.Fatalf("after version 3: last error %v", v.LastError)
	}
	if got := codesOf(ts.call(t, "d", desc("k=a"))); got != "OK: OK" { // the third of 3 a minute
		t.Fatalf("version 3 decides %s", got)
	}
}

// The xDS server restarts: the service serves the rules it has meanwhile,
// connects again, and takes the new server's.
func TestXDSReconnect(t *testing.T) {
	x := newXDSServer(t, "127.0.0.1:0", nil)
	x.set(t, "1", rlc("edge", "d", rlsconf.RateLimitUnit_MINUTE, 1, "k"))
	ts := startXDS(t, x, XDSOptions{}, &fakeClock{t: time.Unix(1e9, 0)})
	ts.waitOrigin(t, "1")

	x.stop()
	if got := codesOf(ts.call(t, "d", desc("k=a"))) + " " + codesOf(ts.call(t, "d", desc("k=a"))); got != "OK: OK OVER_LIMIT: OVER_LIMIT" {
		t.Fatalf("with the xDS server down: %s", got)
	}
	y := &xdsServer{cache: cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil)}
	y.set(t, "restarted", rlc("edge", "d", rlsconf.RateLimitUnit_MINUTE, 5, "k"))
	y.start(t, x.addr)
	t.Cleanup(y.stop)
	ts.waitOrigin(t, "restarted")
	y.waitRequest(t, "ACKed after the restart", func(r *discoverygrpc.DiscoveryRequest) bool { return r.VersionInfo == "restarted" })
	if got := codesOf(ts.call(t, "d", desc("k=a"))); got != "OK: OK" {
		t.Fatalf("after the restart: %s", got)
	}
}

// Mutual TLS to the xDS server, its name checked against ServerName (envoy's
// CONFIG_GRPC_XDS_SERVER_TLS_SAN); a client without the CA does not load.
func TestXDSTLS(t *testing.T) {
	caCert, caKey, _ := issue(t, "ca", nil, nil, true)
	_, _, serverPair := issue(t, "xds", caCert, caKey, false)
	_, _, clientPair := issue(t, "sluice", caCert, caKey, false)
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	srvTLS := &tls.Config{Certificates: []tls.Certificate{serverPair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	x := newXDSServer(t, "127.0.0.1:0", credentials.NewTLS(srvTLS))
	x.set(t, "1", rlc("edge", "d", rlsconf.RateLimitUnit_MINUTE, 1, "k"))

	ts := startXDS(t, x, XDSOptions{TLS: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{clientPair}, ServerName: "127.0.0.1"}}, nil)
	ts.waitOrigin(t, "1")

	// Without a client certificate the server refuses the stream: the
	// service keeps waiting and says why in its log.
	log := &testenv.SyncBuffer{}
	xo := XDSOptions{Server: x.addr, TLS: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}, BackoffMin: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond}
	bad := start(t, Options{XDS: &xo, Logger: slog.New(slog.NewTextHandler(log, nil))}, nil)
	eventually(t, "logging the refused stream", func() bool { return strings.Count(log.String(), "xDS stream ended") >= 2 })
	if v := bad.Config(); v.Loaded != (time.Time{}) {
		t.Fatalf("loaded without a client certificate: %+v", v)
	}
}

// Updates every 100 ms while 64 callers decide: every call sees one
// configuration whole (its two descriptors' limits carry the same
// version's name), and the budget, the same in every version, admits
// exactly its size in all.
func TestXDSUpdatesUnderLoad(t *testing.T) {
	t.Parallel()
	const budget, updates = 500, 20
	x := newXDSServer(t, "127.0.0.1:0", nil)
	version := func(n int) *rlsconf.RateLimitConfig {
		// "a" holds the budget; "b" is never the one to refuse. Both carry
		// the version's name, so a call that saw two versions shows it.
		name := fmt.Sprintf("v%d", n)
		c := rlc(name, "load", rlsconf.RateLimitUnit_HOUR, budget, "a")
		c.Descriptors = append(c.Descriptors, rlc(name, "load", rlsconf.RateLimitUnit_HOUR, 1<<30, "b").Descriptors...)
		return c
	}
	x.set(t, "0", version(0))
	ts := startXDS(t, x, XDSOptions{}, &fakeClock{t: time.Unix(1e9, 0)})
	ts.waitOrigin(t, "0")

	var calls, admitted atomic.Int64
	var seenMu sync.Mutex
	seen := map[string]bool{}
	var mixed atomic.Pointer[string]
	stop := load(64, func(g, i int) bool {
		resp, err := ts.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "load", Descriptors: []*rlv3.RateLimitDescriptor{desc("a=x"), desc("b=x")}})
		if err != nil {
			m := err.Error()
			mixed.CompareAndSwap(nil, &m)
			return false
		}
		calls.Add(1)
		if resp.OverallCode == pb.RateLimitResponse_OK {
			admitted.Add(1)
		}
		a, b := resp.Statuses[0].CurrentLimit.GetName(), resp.Statuses[1].CurrentLimit.GetName()
		if a != b || a == "" {
			m := fmt.Sprintf("call %d/%d saw %q and %q", g, i, a, b)
			mixed.CompareAndSwap(nil, &m)
			return false
		}
		seenMu.Lock()
		seen[a] = true
		seenMu.Unlock()
		return true
	})
	tick := time.NewTicker(100 * time.Millisecond)
	for n := 1; n <= updates; n++ {
		<-tick.C
		x.set(t, fmt.Sprint(n), version(n))
	}
	tick.Stop()
	ts.waitOrigin(t, fmt.Sprint(updates))
	stop()
	if m := mixed.Load(); m != nil {
		t.Fatal(*m)
	}
	if want := min(calls.Load(), budget); admitted.Load() != want {
		t.Fatalf("%d calls admitted %d: want %d", calls.Load(), admitted.Load(), want)
	}
	if len(seen) < 2 {
		t.Fatalf("the calls saw %d versions: want the updates among them", len(seen))
	}
	t.Logf("%d calls, %d admitted, %d versions seen of %d", calls.Load(), admitted.Load(), len(seen), updates+1)
}

// ruleText is what a rule says, for comparing two loads.
func ruleText(r *rlsconfig.Rule) string {
	return fmt.Sprintf("%s %s name=%q limit=%v unit=%q rpu=%d unlimited=%v shadow=%v detailed=%v replaces=%q",
		r.Domain, r.Path, r.Name, r.Limit, r.Unit, r.RequestsPerUnit, r.Unlimited, r.Shadow, r.DetailedMetric, r.Replaces)
}

// loadXDS loads cfgs as a response of the xDS server would be.
func loadXDS(cfgs ...*rlsconf.RateLimitConfig) (*rlsconfig.Config, error) {
	resp := &discoverygrpc.DiscoveryResponse{TypeUrl: XDSTypeURL}
	for _, c := range cfgs {
		a, err := anypb.New(c)
		if err != nil {
			return nil, err
		}
		resp.Resources = append(resp.Resources, a)
	}
	return rlsconfig.Options{}.ParseXDS(resp.Resources)
}

// A resource loads as the YAML file it stands for does, errors included.
func TestXDSLoadsAsYAML(t *testing.T) {
	d := func(key, value string, rl *rlsconf.RateLimitPolicy, sub ...*rlsconf.RateLimitDescriptor) *rlsconf.RateLimitDescriptor {
		return &rlsconf.RateLimitDescriptor{Key: key, Value: value, RateLimit: rl, Descriptors: sub}
	}
	for _, tc := range []struct {
		name string
		c    *rlsconf.RateLimitConfig
		yaml string // "" when the load fails with err
		err  string
	}{
		{"nested", &rlsconf.RateLimitConfig{Domain: "edge", Descriptors: []*rlsconf.RateLimitDescriptor{
			d("remote_address", "", &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 10}),
			d("source_cluster", "proxy", nil, d("destination_cluster", "", &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_DAY, RequestsPerUnit: 1000, Name: "daily"})),
			{Key: "plan", Value: "internal", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}},
			{Key: "path", Value: "/api", ShadowMode: true, DetailedMetric: true, RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 0,
				Replaces: []*rlsconf.RateLimitReplace{{Name: "daily"}}}},
		}}, `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: source_cluster
    value: proxy
    descriptors:
      - key: destination_cluster
        rate_limit: {unit: day, requests_per_unit: 1000, name: daily}
  - key: plan
    value: internal
    rate_limit: {unlimited: true}
  - key: path
    value: /api
    shadow_mode: true
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 0, replaces: [{name: daily}]}
`, ""},
		{"values YAML would read otherwise", &rlsconf.RateLimitConfig{Domain: "null", Descriptors: []*rlsconf.RateLimitDescriptor{
			d("yes", "~", &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: 1, Name: "&a *b: #c"}),
			d("0x10", "- [x]", &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: 2}),
		}}, `
domain: "null"
descriptors:
  - {key: "yes", value: "~", rate_limit: {unit: minute, requests_per_unit: 1, name: "&a *b: #c"}}
  - {key: "0x10", value: "- [x]", rate_limit: {unit: minute, requests_per_unit: 2}}
`, ""},
		{"no unit", &rlsconf.RateLimitConfig{Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{
			d("k", "", &rlsconf.RateLimitPolicy{RequestsPerUnit: 1})}}, "", "unit"},
		{"a unit beyond the enum", &rlsconf.RateLimitConfig{Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{
			d("k", "", &rlsconf.RateLimitPolicy{Unit: 9, RequestsPerUnit: 1})}}, "", "9"},
		{"unlimited with a unit", &rlsconf.RateLimitConfig{Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{
			d("k", "", &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, Unlimited: true})}}, "", "unlimited"},
		{"no key", &rlsconf.RateLimitConfig{Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{d("", "", nil)}}, "", "key"},
		{"no domain", &rlsconf.RateLimitConfig{}, "", "domain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := loadXDS(tc.c)
			if tc.yaml == "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one that names %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want, err := rlsconfig.Parse(map[string][]byte{"f.yaml": []byte(tc.yaml)})
			if err != nil {
				t.Fatal(err)
			}
			var g, w []string
			for _, r := range got.Rules() {
				g = append(g, ruleText(r))
			}
			for _, r := range want.Rules() {
				w = append(w, ruleText(r))
			}
			if strings.Join(g, "\n") != strings.Join(w, "\n") {
				t.Fatalf("xDS:\n%s\nYAML:\n%s", strings.Join(g, "\n"), strings.Join(w, "\n"))
			}
		})
	}
}

// Any key, value and name, YAML's special characters and all, comes
// through the conversion as it was sent: a request with that key and value
// resolves to the rule of that name.
func TestXDSStringsComeThrough(t *testing.T) {
	rng := rand.New(rand.NewPCG(testenv.Seed(t), 0))
	alphabet := []rune("ab:-?*&!|>'\"%@`#,[]{}~ \t\n\\/=.0xé\u2028")
	str := func(n int) string {
		r := make([]rune, n)
		for i := range r {
			r[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(r)
	}
	for range 300 {
		key, value, name := str(1+rng.IntN(8)), strings.ReplaceAll(str(rng.IntN(8)), "*", ""), str(rng.IntN(8))
		c := &rlsconf.RateLimitConfig{Domain: "d" + str(rng.IntN(4)), Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: key, Value: value, RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: 7, Name: name}}}}
		cfg, err := loadXDS(c)
		if err != nil {
			t.Fatalf("key %q value %q name %q: %v", key, value, name, err)
		}
		rs := cfg.Resolve(c.Domain, [][]rlsconfig.Entry{{{Key: key, Value: value}}})
		if len(rs) != 1 || rs[0] == nil || rs[0].Name != name || rs[0].RequestsPerUnit != 7 || rs[0].Domain != c.Domain {
			t.Fatalf("key %q value %q name %q domain %q: resolved %v", key, value, name, c.Domain, rs)
		}
	}
}

// With ForceStart the service answers from an empty configuration until
// the server's first arrives; a file and an xDS server together are an
// error.
func TestXDSForceStart(t *testing.T) {
	x := newXDSServer(t, "127.0.0.1:0", nil)
	ts := startXDS(t, x, XDSOptions{ForceStart: true}, &fakeClock{t: time.Unix(1e9, 0)})
	if got := codesOf(ts.call(t, "d", desc("k=a"))); got != "OK: OK" {
		t.Fatalf("before the first configuration: %s", got)
	}
	if o := ts.Config().Origin; o != "none until xDS "+x.addr+" (node default) sends one" {
		t.Fatalf("origin %q", o)
	}
	x.set(t, "1", rlc("edge", "d", rlsconf.RateLimitUnit_MINUTE, 0, "k"))
	ts.waitOrigin(t, "1")
	if got := codesOf(ts.call(t, "d", desc("k=a"))); got != "OVER_LIMIT: OVER_LIMIT" {
		t.Fatalf("version 1: %s", got)
	}

	if _, err := New(Options{Config: "rules.yaml", XDS: &XDSOptions{Server: "x:1"}}); err == nil || !strings.Contains(err.Error(), "want one") {
		t.Fatalf("a file and an xDS server: %v", err)
	}
	if _, err := New(Options{XDS: &XDSOptions{}}); err == nil || !strings.Contains(err.Error(), "no server address") {
		t.Fatalf("no xDS server: %v", err)
	}
}

// FuzzXDSResource feeds arbitrary bytes as a RateLimitConfig resource: the
// conversion and the load give a configuration or an error (a NACK's
// detail), never a panic, and what loads resolves as its rules say.
func FuzzXDSResource(f *testing.F) {
	for _, c := range []*rlsconf.RateLimitConfig{
		rlc("edge", "d", rlsconf.RateLimitUnit_MINUTE, 2, "k", "l"),
		{Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "a", Value: "1", Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "b", ShadowMode: true, RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_DAY, RequestsPerUnit: 9, Replaces: []*rlsconf.RateLimitReplace{{Name: "x"}}}}}}}},
		{Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "u", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}}}},
	} {
		b, err := proto.Marshal(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := rlsconfig.Options{}.ParseXDS([]*anypb.Any{{TypeUrl: XDSTypeURL, Value: b}})
		if err != nil {
			return
		}
		for _, r := range cfg.Rules() {
			if r.Domain == "" || r.Path == "" {
				t.Fatalf("a rule without a domain or a path: %+v", r)
			}
		}
	})
}

// writePEM writes a certificate pair's certificate and key as PEM files in
// dir, named name.crt and name.key.
func writePEM(t *testing.T, dir, name string, pair tls.Certificate) (cert, key string) {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(pair.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: pair.Certificate[0]}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// The binary with Envoy Gateway's environment (--envoy-env,
// CONFIG_TYPE=GRPC_XDS_SOTW, a node id, mutual TLS to the xDS server, its
// SAN, USE_PROMETHEUS) takes its rules from the server, decides by them
// over Redis and exports envoy's series.
func TestBinaryEnvoyEnvXDS(t *testing.T) {
	rs := redistest.Standalone(t)
	caCert, caKey, caPair := issue(t, "ca", nil, nil, true)
	_, _, serverPair := issue(t, "xds", caCert, caKey, false)
	_, _, clientPair := issue(t, "sluice", caCert, caKey, false)
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	x := newXDSServer(t, "127.0.0.1:0", credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{serverPair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}))
	x.setNode(t, "gateway", "g1", rlc("edge", "d", rlsconf.RateLimitUnit_MINUTE, 1, "k"))
	dir := t.TempDir()
	ca, _ := writePEM(t, dir, "ca", caPair)
	cert, key := writePEM(t, dir, "client", clientPair)
	for k, v := range map[string]string{
		"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": x.addr, "CONFIG_GRPC_XDS_NODE_ID": "gateway",
		"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": ca, "CONFIG_GRPC_XDS_SERVER_TLS_SAN": "127.0.0.1",
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT": cert, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": key,
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "50ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "100ms",
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": rs.Addr(), "USE_PROMETHEUS": "true", "LOG_LEVEL": "info",
	} {
		t.Setenv(k, v)
	}
	p := startProc(t, "--envoy-env")
	eventually(t, "on the xDS server's rules", func() bool {
		_, body := httpGet(t, "http://"+p.http+"/debug/config")
		return strings.Contains(body, "origin: xDS "+x.addr+" (node gateway, version g1)")
	})
	for i, want := range []string{"OK: OK", "OVER_LIMIT: OVER_LIMIT"} {
		r, err := p.call(t.Context(), "d", desc("k=a"))
		if err != nil || codesOf(r) != want {
			t.Fatalf("call %d: %v %v, want %s", i, r, err, want)
		}
	}
	_, metrics := httpGet(t, "http://"+p.http+"/metrics")
	for _, want := range []string{`ratelimit_service_rate_limit_total_hits{domain="d",key1="k"} 2`, `ratelimit_service_rate_limit_over_limit{domain="d",key1="k"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	x.waitRequest(t, "ACKed", func(r *discoverygrpc.DiscoveryRequest) bool {
		return r.VersionInfo == "g1" && r.Node.GetId() == "gateway"
	})
	if _, err := p.stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("exit after SIGTERM: %v\n%s", err, p.logText())
	}
}
