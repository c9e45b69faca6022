package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice/cmd/sluice/internal/console"
	"github.com/sluice-go/sluice/cmd/sluice/internal/rlqs"
	"github.com/sluice-go/sluice/cmd/sluice/internal/serve"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// With --rlqs, the console's /console/api/rlqs shows the budget an RLQS
// client reports: its rule, rate, leases and room, and the client's
// share, demand and lease.
func TestServeConsoleRLQS(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "r.yaml")
	if err := os.WriteFile(cfg, []byte("domain: sim\ndescriptors:\n  - key: name\n    rate_limit: {unit: minute, requests_per_unit: 6000}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var skew atomic.Int64 // the service's clock runs ahead by it: past the warm-up
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	base, addr := serveWithConsoleAddrs(t, serve.Options{Config: cfg, RLQS: &serve.RLQSOptions{Now: now}})
	skew.Store(int64(time.Minute))
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		skew.Add(int64(2 * time.Second)) // a demand is estimated from a second of reports on
		usage := &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqspb.BucketId{Bucket: map[string]string{"name": "x"}},
			TimeElapsed: durationpb.New(2 * time.Second), NumRequestsAllowed: 40}
		if err := stream.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "sim", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage}}); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatalf("report %d: %v", i, err)
		}
	}
	resp, body := testenv.Do(t, http.DefaultClient, "GET", base+"/console/api/rlqs", "")
	var v console.RLQS
	if err := json.Unmarshal([]byte(body), &v); resp.StatusCode != 200 || err != nil {
		t.Fatalf("%d %v %.300s", resp.StatusCode, err, body)
	}
	if v.Budgets != 1 || v.Clients != 1 || len(v.Top) != 1 || v.Bytes <= 0 || v.Bytes > v.MaxBytes {
		t.Fatalf("the view: %s", body)
	}
	b := v.Top[0]
	if b.Domain != "sim" || b.Rule != "name" || b.Key != "sim/name=x" || b.Rate != 6000 || b.FillS != 60 || b.Clients != 1 ||
		b.Outstanding <= 0 || b.Room != b.Rate-b.Outstanding || len(b.Shares) != 1 {
		t.Fatalf("the budget: %s", body)
	}
	if s := b.Shares[0]; s.State != "active" || s.Demand == nil || *s.Demand <= 0 || s.Granted <= 0 || s.Granted != b.Granted || s.Outstanding != b.Outstanding || s.LeaseEndsUS <= 0 {
		t.Errorf("the share: %s", body)
	}
	stream.CloseSend()
}

// --rlqs-ttl and --rlqs-steady-ttl set the RLQS assignments' TTLs, and
// the service's allocator takes them; without them its defaults hold.
func TestServeRLQSTTLFlags(t *testing.T) {
	for _, c := range []struct {
		args        []string
		ttl, steady time.Duration
	}{
		{[]string{"--rlqs"}, 3 * time.Second, 8 * time.Second},
		{[]string{"--rlqs", "--rlqs-ttl", "4s", "--rlqs-steady-ttl", "10s"}, 4 * time.Second, 10 * time.Second},
		{[]string{"--rlqs", "--rlqs-ttl", "9s"}, 9 * time.Second, 9 * time.Second},
	} {
		var f serveFlags
		if err := f.define().Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if err := f.check(); err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		o, done, err := f.options(io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		done()
		a, err := rlqs.New(o.RLQS.Config)
		if err != nil {
			t.Fatal(err)
		}
		if got := a.Config(); got.TTL != c.ttl || got.SteadyTTL != c.steady {
			t.Errorf("%v: TTL %v, steady %v; want %v and %v", c.args, got.TTL, got.SteadyTTL, c.ttl, c.steady)
		}
	}
}
