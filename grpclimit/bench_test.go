package grpclimit_test

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/grpclimit"
	"github.com/sluice-go/sluice/memstore"
)

// headerStream takes the rate-limit metadata grpc.SetHeader hands it, as a
// server's transport stream would, and sends nothing.
type headerStream struct{}

func (headerStream) Method() string                  { return echoMethod }
func (headerStream) SetHeader(metadata.MD) error     { return nil }
func (headerStream) SendHeader(metadata.MD) error    { return nil }
func (headerStream) SetTrailer(md metadata.MD) error { return nil }

// BenchmarkUnaryInterceptor measures the interceptor's own cost in process
// (no network, no handler work): one policy keyed on the peer, the same
// behind a trusted proxy (the x-forwarded-for walk), and a two-policy
// composite.
func BenchmarkUnaryInterceptor(b *testing.B) {
	trusted := grpclimit.WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8"))
	for _, tc := range []struct {
		name  string
		ps    []grpclimit.Policy
		proxy bool
	}{
		{"one-policy", []grpclimit.Policy{{Name: "ip", Limit: sluice.PerSecond(1 << 30)}}, false},
		{"one-policy/trusted-proxy", []grpclimit.Policy{{Name: "ip", Limit: sluice.PerSecond(1 << 30)}}, true},
		{"two-policies", []grpclimit.Policy{
			{Name: "ip", Limit: sluice.PerSecond(1 << 30)},
			{Name: "user", Limit: sluice.PerSecond(1 << 30), Key: grpclimit.Metadata("x-user")},
		}, false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var opts []grpclimit.Option
			if tc.proxy {
				opts = append(opts, trusted)
			}
			s, err := grpclimit.New(sluice.New(memstore.New()), tc.ps, opts...)
			if err != nil {
				b.Fatal(err)
			}
			icpt := s.UnaryServerInterceptor()
			info := &grpc.UnaryServerInfo{FullMethod: echoMethod}
			handler := func(context.Context, any) (any, error) { return nil, nil }
			ctxs := make([]context.Context, 256)
			for i := range ctxs {
				client := netip.AddrFrom4([4]byte{192, 0, 2, byte(i)})
				md := metadata.Pairs("x-user", "u"+strconv.Itoa(i))
				addr := client
				if tc.proxy {
					addr = netip.AddrFrom4([4]byte{10, 0, 0, 1})
					md.Append("x-forwarded-for", "198.51.100.1, "+client.String()+", 10.0.0.2")
				}
				ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(addr, 1234))})
				ctx = metadata.NewIncomingContext(ctx, md)
				ctxs[i] = grpc.NewContextWithServerTransportStream(ctx, headerStream{})
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if _, err := icpt(ctxs[i%len(ctxs)], nil, info, handler); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
