package serve_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-go/sluice/cmd/sluice/internal/serve"
)

// A service for one envoy domain: two calls pass, the third is over the
// limit. Run(ctx, options) is New and Serve in one call.
func Example() {
	dir, _ := os.MkdirTemp("", "sluice-example")
	defer os.RemoveAll(dir)
	os.WriteFile(filepath.Join(dir, "api.yaml"), []byte(`domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2}
`), 0o644)
	s, err := serve.New(serve.Options{
		Config:   dir,
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()

	conn, _ := grpc.NewClient(s.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	client := pb.NewRateLimitServiceClient(conn)
	req := &pb.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}}},
	}}
	for range 3 {
		resp, err := client.ShouldRateLimit(ctx, req)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(resp.OverallCode, resp.Statuses[0].LimitRemaining)
	}
	stop()
	fmt.Println("stopped:", <-done)
	// Output:
	// OK 1
	// OK 0
	// OVER_LIMIT 0
	// stopped: <nil>
}

// The rules from an xDS server, as Envoy Gateway serves them to
// envoyproxy/ratelimit (CONFIG_TYPE=GRPC_XDS_SOTW), and envoy's per-rule
// series on /metrics. Until the server's first configuration arrives, calls
// are answered UNAVAILABLE.
//
// Compiled, not run: it needs an xDS server, and serves until stopped
// (TestXDSAckNack and TestXDSUpdatesUnderLoad run the service against
// go-control-plane's server).
func ExampleXDSOptions() {
	err := serve.Run(context.Background(), serve.Options{
		XDS: &serve.XDSOptions{
			Server: "envoy-gateway.envoy-gateway-system:18001",
			NodeID: "envoy-ratelimit",
		},
		EnvoyStats: true,
		GRPCAddr:   "0.0.0.0:8081", HTTPAddr: "0.0.0.0:8080",
	})
	if err != nil {
		fmt.Println(err)
	}
}
