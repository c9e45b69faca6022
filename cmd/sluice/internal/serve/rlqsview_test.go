package serve

import (
	"context"
	"strings"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
)

const viewRules = `domain: sim
descriptors:
  - key: name
    rate_limit: {unit: minute, requests_per_unit: 6000}
`

// startRLQSView serves viewRules with RLQS under lt and connects three
// clients over gRPC, weights 1 to 3: each reports name=x twice, two
// seconds apart (so that its demand is estimated), 10·weight requests a
// second; the first also reports name=y, a request a second.
func startRLQSView(t *testing.T, lt limits.Table) *testServer {
	t.Helper()
	clock := &fakeClock{t: t0}
	ts := start(t, Options{Config: writeConfig(t, map[string]string{"r.yaml": viewRules}), Limits: lt, RLQS: &RLQSOptions{Now: clock.Now}}, clock)
	clock.Set(t0.Add(time.Minute)) // past the warm-up
	client := rlqspb.NewRateLimitQuotaServiceClient(ts.conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	var streams []rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient
	for _, w := range []string{"1", "2", "3"} {
		st, err := client.StreamRateLimitQuotas(metadata.AppendToOutgoingContext(ctx, WeightHeader, w))
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, st)
	}
	for round := range 2 {
		clock.Set(t0.Add(time.Minute + time.Duration(round)*2*time.Second))
		for i, st := range streams {
			n := uint64(20 * (i + 1))
			usages := []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usageOf(map[string]string{"name": "x"}, n, 0)}
			if i == 0 {
				usages = append(usages, usageOf(map[string]string{"name": "y"}, 2, 0))
			}
			if err := st.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "sim", BucketQuotaUsages: usages}); err != nil {
				t.Fatal(err)
			}
			// its answer, or what another's report pushed before it
			if resp, err := st.Recv(); err != nil || len(resp.GetBucketAction()) == 0 {
				t.Fatalf("client %d round %d: %v, %v", i, round, resp, err)
			}
		}
	}
	// The last reports are answered once each client's demand is known.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		v, _ := ts.RLQS(10, 10)
		known := 0
		for _, b := range v.Top {
			for _, sh := range b.Shares {
				if sh.DemandKnown {
					known++
				}
			}
		}
		if known == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the clients' demands not all known after 10s: %+v", v)
		}
	}
	return ts
}

// The RLQS view lists the budgets whose clients demand the most, with
// their rate, leases, room and clients, and the largest shares; n
// and m bound it.
func TestRLQSView(t *testing.T) {
	ts := startRLQSView(t, limits.Defaults())
	v, ok := ts.RLQS(10, 10)
	if !ok || v.Budgets != 2 || v.Clients != 3 || len(v.Top) != 2 || v.Bound != nil || v.Bytes <= 0 {
		t.Fatalf("the view: %+v, %v; want 2 budgets, 3 clients, both shown", v, ok)
	}
	x, y := v.Top[0], v.Top[1]
	if x.Key != "sim/name=x" || y.Key != "sim/name=y" || x.Domain != "sim" || x.Rule != "name" || x.Demand <= y.Demand {
		t.Fatalf("the budgets: %q (%s %s, demand %v), %q (demand %v); want name=x, the hotter, first", x.Key, x.Domain, x.Rule, x.Demand, y.Key, y.Demand)
	}
	if x.Rate != 6000 || x.Fill != time.Minute || x.Clients != 3 || x.Holders != 3 || len(x.Shares) != 3 || x.Room != x.Rate-x.Outstanding || x.Outstanding <= 0 || x.Outstanding > x.Rate {
		t.Errorf("name=x: %+v", x.BucketView)
	}
	var leased, granted int64
	for i, s := range x.Shares {
		leased += s.Outstanding
		granted += s.Granted
		if s.State != "active" || !s.DemandKnown || s.Demand <= 0 || s.Granted <= 0 || s.GrantEnds <= 0 || s.LeaseEnds < s.GrantEnds {
			t.Errorf("name=x share %d: %+v", i, s)
		}
		if i > 0 && s.Granted > x.Shares[i-1].Granted {
			t.Errorf("name=x share %d: %d granted, more than the one before's %d", i, s.Granted, x.Shares[i-1].Granted)
		}
	}
	if leased != x.Outstanding || granted != x.Granted {
		t.Errorf("name=x: shares lease %d and grant %d, the budget says %d and %d", leased, granted, x.Outstanding, x.Granted)
	}
	if v, _ := ts.RLQS(1, 2); len(v.Top) != 1 || len(v.Top[0].Shares) != 2 || v.Top[0].Key != "sim/name=x" {
		t.Errorf("one budget, two shares: %+v", v.Top)
	}
}

// The view's bytes are bounded by view-bytes: a budget that would take
// it past the cap is left out, and the view says why.
func TestRLQSViewBytesCap(t *testing.T) {
	ts := startRLQSView(t, limits.Defaults())
	all, _ := ts.RLQS(10, 10)
	lt := limits.Defaults()
	lt.ViewBytes = all.Bytes - 1 // the cap + 1 is what both budgets take
	v := ts.rlqs.view(&lt, 10, 10)
	if len(v.Top) != 1 || v.Bytes > lt.ViewBytes || v.Bound == nil || !strings.Contains(v.Bound.Error(), limits.ViewBytes.Name) {
		t.Errorf("with view-bytes %d: %d budgets in %d bytes, bound %v; want 1, and the cap named", lt.ViewBytes, len(v.Top), v.Bytes, v.Bound)
	}
}

// Without --rlqs there is no view.
func TestRLQSViewOff(t *testing.T) {
	ts := start(t, Options{Config: writeConfig(t, map[string]string{"r.yaml": viewRules})}, &fakeClock{t: t0})
	if _, ok := ts.RLQS(10, 10); ok {
		t.Error("a view without --rlqs")
	}
}

// A stream whose client goes away ends on the server, whichever of its
// sender and receiver sees it first: a sender that ended first once left
// the handler waiting for it forever, and a graceful stop with it.
func TestRLQSStreamEndsWhenClientCancels(t *testing.T) {
	clock := &fakeClock{t: t0}
	ts := start(t, Options{Config: writeConfig(t, map[string]string{"r.yaml": viewRules}), RLQS: &RLQSOptions{Now: clock.Now}}, clock)
	client := rlqspb.NewRateLimitQuotaServiceClient(ts.conn)
	for i := range 30 {
		ctx, cancel := context.WithCancel(context.Background())
		st, err := client.StreamRateLimitQuotas(ctx)
		if err == nil {
			err = st.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "sim", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usageOf(map[string]string{"free": "x"}, 1, 0)}})
		}
		if err == nil {
			_, err = st.Recv()
		}
		cancel()
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ts.rlqs.mu.Lock()
		n := len(ts.rlqs.streams)
		ts.rlqs.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 30 streams still open 10s after their clients went", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := ts.stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
}
