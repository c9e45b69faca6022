package serve

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// --grpc unix:PATH serves on a Unix domain socket (a sidecar's, envoy's
// GRPC_UDS). A socket file left behind by a process that is gone is
// replaced; one another server listens on is not, and the file is removed
// on shutdown.
func TestUnixSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "sluice") // short: a socket path is at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "rls.sock")
	// A stale socket: its listener closed without removing the file.
	old, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	old.(*net.UnixListener).SetUnlinkOnClose(false)
	old.Close()

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := New(Options{GRPCAddr: "unix:" + path, HTTPAddr: "127.0.0.1:0", Logger: quiet})
	if err != nil {
		t.Fatalf("New over a stale socket file: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r, err := pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "any", Descriptors: []*rlv3.RateLimitDescriptor{desc("k=v")}})
	if err != nil || codesOf(r) != "OK: OK" {
		t.Fatalf("call over the socket: %v %v", r, err)
	}
	if _, err := New(Options{GRPCAddr: "unix://" + path, HTTPAddr: "127.0.0.1:0", Logger: quiet}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("a second server on a live socket: %v, want address in use", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("socket file after shutdown: %v, want it removed", err)
	}
}
