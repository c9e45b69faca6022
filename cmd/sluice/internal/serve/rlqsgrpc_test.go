package serve

import (
	"context"
	"strings"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
	"github.com/sluice-go/sluice/cmd/sluice/internal/rlqs"
)

// RLQS over gRPC, beside RLS on one listener: a stream's reports are
// answered on it, a weight travels in its metadata, a stream over the
// clients' cap is refused RESOURCE_EXHAUSTED, the health service knows
// the RLQS service, and /metrics has the budgets' series.
func TestRLQSOverGRPC(t *testing.T) {
	ts, client, ctx := startRLQS(t, 1)
	stream, err := client.StreamRateLimitQuotas(metadata.AppendToOutgoingContext(ctx, WeightHeader, "3"))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "sim", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usageOf(map[string]string{"name": "x"}, 1, 0)}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil || len(resp.GetBucketAction()) != 1 || strategyOf(resp.BucketAction[0]) != "60/1m0s 1" {
		t.Fatalf("the answer: %v, %v", resp, err)
	}
	// One stream is the cap: a second is refused.
	second, err := client.StreamRateLimitQuotas(ctx)
	if err == nil {
		_, err = second.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), capRefusal(limits.RLQSClients)[:40]) {
		t.Errorf("a second stream: %v, want ResourceExhausted naming the cap", err)
	}
	h, err := healthpb.NewHealthClient(ts.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: rlqspb.RateLimitQuotaService_ServiceDesc.ServiceName})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health of the RLQS service: %v, %v", h, err)
	}
	_, body := httpGet(t, ts.base+"/metrics")
	for _, want := range []string{`sluice_rlqs_budget_clients{domain="sim",rule="name"} 1`, `sluice_rlqs_streams 1`, `sluice_rlqs_budget_rate{domain="sim",rule="name"} 100`, `sluice_rlqs_budget_outstanding{domain="sim",rule="name"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if st := ts.rlqs.streams; len(st) != 1 {
		t.Errorf("%d streams open, want 1", len(st))
	}
	for s := range ts.rlqs.streams {
		if s.weight != 3 {
			t.Errorf("the stream's weight: %d, want 3", s.weight)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err == nil {
		t.Error("the stream goes on after the client closed it")
	}
}

// A shutdown ends the RLQS streams (UNAVAILABLE, so that clients
// reconnect) rather than waiting out its timeout for clients that never
// end them.
func TestRLQSShutdownEndsStreams(t *testing.T) {
	clock := &fakeClock{t: t0}
	ts := start(t, Options{Config: writeConfig(t, map[string]string{"r.yaml": simRules}), RLQS: &RLQSOptions{Now: clock.Now}}, clock)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := rlqspb.NewRateLimitQuotaServiceClient(ts.conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "sim", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usageOf(map[string]string{"free": "x"}, 1, 0)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- ts.stop() }()
	_, err = stream.Recv()
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "shutting down") {
		t.Errorf("the stream at shutdown: %v, want UNAVAILABLE, shutting down", err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

// A stream that names its client (x-sluice-client) replaces the client's
// stream still open: the old one ends ABORTED at once (a stream the
// client gave up on, half-open to the server, no longer takes shares
// until found silent) and the new one takes its buckets over, shares and
// leases, counted once; even at the clients' cap; another client's
// stream is left alone.
func TestRLQSClientReplacesStream(t *testing.T) {
	ts, client, ctx := startRLQS(t, 2)
	open := func(name string) rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient {
		t.Helper()
		stream, err := client.StreamRateLimitQuotas(metadata.AppendToOutgoingContext(ctx, ClientHeader, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "sim", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usageOf(map[string]string{"name": "x"}, 1, 0)}}); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatalf("%s's answer: %v", name, err)
		}
		return stream
	}
	first, other := open("envoy-a"), open("envoy-b")
	open("envoy-a") // at the cap of 2: it replaces the first
	if _, err := first.Recv(); status.Code(err) != codes.Aborted || !strings.Contains(err.Error(), `"envoy-a"`) {
		t.Errorf("the replaced stream: %v, want ABORTED naming the client", err)
	}
	ts.rlqs.mu.Lock()
	n, named := len(ts.rlqs.streams), len(ts.rlqs.clients)
	ts.rlqs.mu.Unlock()
	if n != 2 || named != 2 {
		t.Errorf("%d streams open, %d named; want 2 and 2", n, named)
	}
	// The new stream took the old one's bucket over, its share and its
	// lease: two holders, and no lease left over from the old stream.
	var holders int
	var granted, outstanding int64
	ts.rlqs.mu.Lock()
	ts.rlqs.alloc.Each(ts.rlqs.now(), func(b rlqs.BudgetStats) {
		holders += b.Holders
		granted += b.Granted
		outstanding += b.Outstanding
	})
	ts.rlqs.mu.Unlock()
	if holders != 2 || outstanding != granted {
		t.Errorf("%d clients take a share, %d granted, %d outstanding; want 2, and no lease but the grants", holders, granted, outstanding)
	}
	if err := other.Send(&rlqspb.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usageOf(map[string]string{"name": "x"}, 1, 0)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Recv(); err != nil {
		t.Errorf("the other client's stream: %v", err)
	}
}

// A client's name is at most entry-bytes long: the cap + 1 is refused
// INVALID_ARGUMENT naming the row.
func TestRLQSClientNameCap(t *testing.T) {
	s := newSim(t, simRules, RLQSOptions{}, 1)
	c := limits.EntryBytes.Default
	if _, err := s.q.open(metadata.Pairs(ClientHeader, strings.Repeat("a", int(c)))); err != nil {
		t.Errorf("a name of %d bytes: %v", c, err)
	}
	_, err := s.q.open(metadata.Pairs(ClientHeader, strings.Repeat("a", int(c)+1)))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), capRefusal(limits.EntryBytes)) || !strings.Contains(err.Error(), ClientHeader) {
		t.Errorf("a name of %d bytes: %v, want INVALID_ARGUMENT naming the cap", c+1, err)
	}
}

// startRLQS serves simRules with RLQS, at most clients streams, its clock
// past the warm-up, and returns a client of it and a context that ends
// with the test (10 s at most).
func startRLQS(t *testing.T, clients int64) (*testServer, rlqspb.RateLimitQuotaServiceClient, context.Context) {
	t.Helper()
	clock := &fakeClock{t: t0}
	lt := limits.Defaults()
	lt.RLQSClients = clients
	ts := start(t, Options{Config: writeConfig(t, map[string]string{"r.yaml": simRules}), Limits: lt, RLQS: &RLQSOptions{Now: clock.Now}}, clock)
	clock.Set(t0.Add(time.Minute)) // past the warm-up
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ts, rlqspb.NewRateLimitQuotaServiceClient(ts.conn), ctx
}
