package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-go/sluice/internal/testenv"
)

// TestConsolePollingCost runs 64 gRPC callers against `sluice serve` with
// and without 10 console pages polling the live report as the page does
// (once a second, the seconds since the last poll): the polling costs the
// service less than 5% of its calls/s. Only with SLUICE_TIMING=1: on a busy
// machine the calls/s of two runs differ by more than that.
func TestConsolePollingCost(t *testing.T) {
	if !testenv.Timing(t, "10 polling pages cost the service under 5% of its calls/s") {
		return
	}
	bin := buildSluice(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(consoleConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	grpcAddr, httpAddr := startServe(t, bin, "--config", dir)
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewRateLimitServiceClient(conn)
	phase := func(poll bool) float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		defer cancel()
		var n atomic.Int64
		var wg sync.WaitGroup
		for g := range 64 {
			wg.Go(func() {
				req := &pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{
					{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: string(rune('a' + g%26))}}}}}
				for ctx.Err() == nil {
					if _, err := client.ShouldRateLimit(ctx, req); err == nil {
						n.Add(1)
					}
				}
			})
		}
		if poll { // 10 pages open, each polling once a second
			for range 10 {
				wg.Go(func() {
					for ctx.Err() == nil {
						resp, err := http.Get("http://" + httpAddr + "/console/api/live?since=" + strconv.FormatInt(time.Now().Unix()-1, 10))
						if err == nil {
							io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
						}
						select {
						case <-ctx.Done():
						case <-time.After(time.Second):
						}
					}
				})
			}
		}
		wg.Wait()
		return float64(n.Load()) / 4
	}
	phase(false) // warm up
	var before, with, after float64
	for range 3 {
		before += phase(false) / 3
		with += phase(true) / 3
		after += phase(false) / 3
	}
	without := (before + after) / 2
	t.Logf("calls/s: %.0f without polling (%.0f before, %.0f after), %.0f with 10 pages polling (%+.1f%%)",
		without, before, after, with, 100*(with-without)/without)
	if with < 0.95*without {
		t.Errorf("10 polling pages cost %.1f%% of the calls/s, over 5%%", 100*(1-with/without))
	}
}
