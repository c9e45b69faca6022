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
)

// RLQS over gRPC, beside RLS on one listener: a stream's reports are
// answered on it, a weight travels in its metadata, a stream over the
// clients' cap is refused RESOURCE_EXHAUSTED, the health service knows
// the RLQS service, and /metrics has the budgets' series.
func TestRLQSOverGRPC(t *testing.T) {
	clock := &fakeClock{t: t0}
	lt := limits.Defaults()
	lt.RLQSClients = 1
	ts := start(t, Options{Config: writeConfig(t, map[string]string{"r.yaml": simRules}), Limits: lt, RLQS: &RLQSOptions{Now: clock.Now}}, clock)
	clock.Set(t0.Add(time.Minute)) // past the warm-up
	client := rlqspb.NewRateLimitQuotaServiceClient(ts.conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
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
