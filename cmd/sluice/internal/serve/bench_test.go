package serve

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"

	"github.com/sluice-go/sluice/memstore"
)

const benchConfig = `domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1000000000}
`

func benchServer(b testing.TB) *Server {
	s, err := New(Options{Config: writeConfig(b, map[string]string{"bench.yaml": benchConfig}), NoWatch: true,
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Store: memstore.New(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.grpcLn.Close(); s.httpLn.Close(); s.stopWatch() })
	return s
}

// BenchmarkShouldRateLimit is the gRPC handler in process (no transport),
// one descriptor over 10,000 keys, two descriptors (one composite), and an
// enforced and a shadow descriptor (one composite too).
func BenchmarkShouldRateLimit(b *testing.B) {
	s := benchServer(b)
	h := rls{s.service}
	reqs := make([]*pb.RateLimitRequest, 10_000)
	for i := range reqs {
		reqs[i] = &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{desc(fmt.Sprintf("user=%d", i))}}
	}
	b.Run("one", func(b *testing.B) {
		b.ReportAllocs()
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			i := int(n.Add(1)) * 7919
			for pb.Next() {
				i++
				if _, err := h.ShouldRateLimit(context.Background(), reqs[i%len(reqs)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	two := &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{desc("tenant=acme"), desc("user=42")}}
	b.Run("two", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := h.ShouldRateLimit(context.Background(), two); err != nil {
				b.Fatal(err)
			}
		}
	})
	// An enforced and a shadow descriptor: one TakeEach (decideTogether).
	shadow := &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{desc("tenant=acme"), desc("trial=42")}}
	b.Run("shadow", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := h.ShouldRateLimit(context.Background(), shadow); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCodec is the codec on a request and a response.
func BenchmarkCodec(b *testing.B) {
	c := newCodec()
	req := &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{desc("tenant=acme"), desc("user=42")}}
	data, err := c.fallback.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	raw := data.Materialize()
	s := benchServer(b)
	resp := &pb.RateLimitResponse{}
	if _, err := s.shouldRateLimit(context.Background(), req, resp, HeadersNone); err != nil {
		b.Fatal(err)
	}
	b.Run("unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r pb.RateLimitRequest
			if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(raw)}, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			out, err := c.Marshal(resp)
			if err != nil {
				b.Fatal(err)
			}
			out.Free()
		}
	})
}

// BenchmarkGRPC is a call through a real gRPC client and server on loopback
// (memory store, one descriptor over 10,000 keys, 64 concurrent callers on
// two connections); the client's cost is included.
func BenchmarkGRPC(b *testing.B) {
	s := benchServer(b)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	var clients [2]pb.RateLimitServiceClient
	for i := range clients {
		conn, err := grpc.NewClient(s.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		clients[i] = pb.NewRateLimitServiceClient(conn)
	}
	reqs := make([]*pb.RateLimitRequest, 10_000)
	for i := range reqs {
		reqs[i] = &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{desc(fmt.Sprintf("user=%d", i))}}
	}
	b.SetParallelism(32) // 64 callers on 2 CPUs
	b.ReportAllocs()
	var n atomic.Int64
	b.RunParallel(func(p *testing.PB) {
		g := n.Add(1)
		c, i := clients[g%2], int(g)*7919
		for p.Next() {
			i++
			if _, err := c.ShouldRateLimit(context.Background(), reqs[i%len(reqs)]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestDecideAllocs: deciding a call of one descriptor, or of two (one
// composite), over the memory store allocates what the answer needs (its
// status and the key) and nothing for the shadow and quota paths it does
// not take.
func TestDecideAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	s := benchServer(t)
	h := rls{s.service}
	one := &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{desc("user=42")}}
	two := &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{desc("tenant=acme"), desc("user=42")}}
	for _, c := range []struct {
		name string
		req  *pb.RateLimitRequest
		want float64
	}{{"one", one, 4}, {"two", two, 6}} {
		if n := testing.AllocsPerRun(500, func() {
			if _, err := h.ShouldRateLimit(context.Background(), c.req); err != nil {
				t.Fatal(err)
			}
		}); n > c.want {
			t.Errorf("%s descriptor(s): %v allocations per call, want at most %v", c.name, n, c.want)
		}
	}
}
