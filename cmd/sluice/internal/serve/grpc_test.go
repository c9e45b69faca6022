package serve

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// GRPCMaxConnectionAge closes connections once they are that old (GOAWAY):
// the client reconnects and no call fails. Negative: never.
func TestMaxConnectionAge(t *testing.T) {
	for _, c := range []struct {
		name    string
		age     time.Duration
		atLeast int64
		atMost  int64
	}{
		{"150ms", 150 * time.Millisecond, 3, 1 << 20},
		{"never", -1, 1, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			cl := &countingListener{Listener: ln}
			ts := start(t, Options{GRPCListener: cl, GRPCMaxConnectionAge: c.age}, &fakeClock{t: t0})
			for end := time.Now().Add(time.Second); time.Now().Before(end); {
				ts.call(t, "any", desc("k=v")) // fails the test on any error
				time.Sleep(5 * time.Millisecond)
			}
			if n := cl.n.Load(); n < c.atLeast || n > c.atMost {
				t.Errorf("%d connections accepted in 1s, want %d to %d", n, c.atLeast, c.atMost)
			}
		})
	}
}

// grpc.health.v1 answers SERVING for the whole server, the RLS service and
// "ratelimit" (the name envoyproxy/ratelimit registers, which probes may
// ask for), NotFound for others, and NOT_SERVING once shutdown begins, so
// that balancers drain the instance.
func TestGRPCHealth(t *testing.T) {
	ts := start(t, Options{}, &fakeClock{t: t0})
	hc := healthpb.NewHealthClient(ts.conn)
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService", "ratelimit"} {
		r, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("Check(%q): %v %v, want SERVING", svc, r, err)
		}
	}
	if _, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("Check(nope): %v, want NotFound", err)
	}
	w, err := hc.Watch(t.Context(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Watch: %v %v, want SERVING first", r, err)
	}
	go ts.stop()
	if r, err := w.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Watch during shutdown: %v %v, want NOT_SERVING", r, err)
	}
}
