package grpclimit_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/grpclimit"
	"github.com/sluice-go/sluice/memstore"
)

// A server whose callers each get 2 calls a minute: the third is refused
// with ResourceExhausted, and the client reads when to come back from
// RetryInfo and which policy refused from QuotaFailure.
func ExampleNew() {
	lim := sluice.New(memstore.New())
	limits, err := grpclimit.New(lim, []grpclimit.Policy{
		{Name: "per-user", Limit: sluice.PerMinute(2), Key: grpclimit.Metadata("x-user")},
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(limits.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(limits.StreamServerInterceptor()),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", "alice")
	for range 3 {
		var header metadata.MD
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header))
		if err == nil {
			fmt.Println("served; ratelimit:", header.Get("ratelimit")[0])
			continue
		}
		st := status.Convert(err)
		fmt.Println(st.Code())
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *errdetails.RetryInfo:
				fmt.Println("retry in", d.GetRetryDelay().AsDuration().Round(time.Second)) // a hair under 30s: the first token comes back 30s after it was spent
			case *errdetails.QuotaFailure:
				for _, v := range d.GetViolations() {
					fmt.Printf("policy %s: %s\n", v.GetSubject(), v.GetDescription())
				}
			}
		}
	}
	// Output:
	// served; ratelimit: "per-user";r=1;t=30
	// served; ratelimit: "per-user";r=0;t=60
	// ResourceExhausted
	// retry in 30s
	// policy per-user: rate limit 2 per 1m0s (token-bucket, burst 2) exceeded
}

// A client that keeps its calls to an upstream under 5 a second: a call
// waits for its turn, and fails at once with ResourceExhausted when its
// deadline would pass first.
func ExampleNewClient() {
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	pace, err := grpclimit.NewClient(sluice.New(memstore.New()), []grpclimit.Policy{
		{Name: "upstream", Limit: sluice.PerSecond(5).WithBurst(1)}, // keyed on the connection's target
	})
	if err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient(ln.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(pace.UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(pace.StreamClientInterceptor()),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)

	start := time.Now()
	for range 3 { // the 2nd waits 200ms, the 3rd 400ms
		if _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("3 calls paced:", time.Since(start) >= 400*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{}) // its turn is ~200ms away
	fmt.Println(status.Code(err))
	// Output:
	// 3 calls paced: true
	// ResourceExhausted
}
