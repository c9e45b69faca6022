package grpclimit_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/grpclimit"
	"github.com/sluice-go/sluice/memstore"
)

// startServer serves the health service on a loopback port through the
// unary interceptors given, and returns a client of it and a stop.
func startServer(icpts ...grpc.UnaryServerInterceptor) (healthpb.HealthClient, func()) {
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(icpts...))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	return healthpb.NewHealthClient(conn), func() { conn.Close(); srv.Stop() }
}

// A model server limited to 10,000 tokens a minute: each call takes an
// estimate of 500, and is settled to what its handler reports in the
// x-tokens-used trailer (here an interceptor after the limiter plays the
// model's part).
func ExampleUsed() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // a frozen clock keeps the output stable
	lim := sluice.New(memstore.New(memstore.WithClock(frozenClock(now))))
	tpm := sluice.PerMinute(10_000)
	limits, err := grpclimit.New(lim, []grpclimit.Policy{{
		Name: "tpm", Limit: tpm, Key: grpclimit.Static("model"), Cost: 500,
		Used: &grpclimit.Used{Trailer: "x-tokens-used"},
	}})
	if err != nil {
		log.Fatal(err)
	}
	model := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		used, _ := metadata.FromIncomingContext(ctx)
		_ = grpc.SetTrailer(ctx, metadata.Pairs("x-tokens-used", used.Get("used")[0]))
		return resp, err
	}
	client, stop := startServer(limits.UnaryServerInterceptor(), model)
	defer stop()
	for _, used := range []string{"4000", "100"} {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "used", used)
		if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			log.Fatal(err)
		}
		left, _ := lim.Take(context.Background(), "grpclimit:tpm:model", tpm, 0)
		fmt.Printf("said %s: %d tokens left\n", used, left.Remaining)
	}
	// Output:
	// said 4000: 6000 tokens left
	// said 100: 5900 tokens left
}

// Counting by outcome: 3 failed authentications a minute per client,
// counted by their status code; calls that succeed never count.
func Example_failedAuthentication() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // a frozen clock keeps the output stable
	lim := sluice.New(memstore.New(memstore.WithClock(frozenClock(now))))
	limits, err := grpclimit.New(lim, []grpclimit.Policy{{
		Name: "failed-auth", Limit: sluice.PerMinute(3),
		Count: func(code codes.Code) bool { return code == codes.Unauthenticated || code == codes.PermissionDenied },
	}})
	if err != nil {
		log.Fatal(err)
	}
	auth := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if t := md.Get("token"); len(t) == 0 || t[0] != "secret" {
			return nil, status.Error(codes.Unauthenticated, "bad token")
		}
		return handler(ctx, req)
	}
	client, stop := startServer(limits.UnaryServerInterceptor(), auth) // the limiter sees what auth answers
	defer stop()
	for _, token := range []string{"secret", "secret", "guess", "guess", "guess", "secret"} {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "token", token)
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		fmt.Println(token, status.Code(err))
	}
	// Output:
	// secret OK
	// secret OK
	// guess Unauthenticated
	// guess Unauthenticated
	// guess Unauthenticated
	// secret ResourceExhausted
}
