package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/grpclimit"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/observe"
)

// The test service: a unary Echo and a bidirectional Chat over
// wrapperspb.StringValue, described by hand (no generated code).
const (
	echoMethod = "/sluice.test.Echo/Echo"
	chatMethod = "/sluice.test.Echo/Chat"
)

type echoAPI interface{}

type echoServer struct {
	served   atomic.Int64 // unary calls and stream messages handled
	onEcho   func(ctx context.Context) error
	mu       sync.Mutex
	lastKeys []string
}

var echoDesc = grpc.ServiceDesc{
	ServiceName: "sluice.test.Echo",
	HandlerType: (*echoAPI)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Echo", Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, req any) (any, error) {
			es := srv.(*echoServer)
			if es.onEcho != nil {
				if err := es.onEcho(ctx); err != nil {
					return nil, err
				}
			}
			es.served.Add(1)
			return wrapperspb.String(req.(*wrapperspb.StringValue).GetValue()), nil
		}
		if icpt == nil {
			return h(ctx, in)
		}
		return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: echoMethod}, h)
	}}},
	Streams: []grpc.StreamDesc{{StreamName: "Chat", ServerStreams: true, ClientStreams: true, Handler: func(srv any, ss grpc.ServerStream) error {
		es := srv.(*echoServer)
		for {
			in := new(wrapperspb.StringValue)
			if err := ss.RecvMsg(in); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
			es.served.Add(1)
			if err := ss.SendMsg(in); err != nil {
				return err
			}
		}
	}}, {StreamName: "Collect", ClientStreams: true, Handler: func(srv any, ss grpc.ServerStream) error {
		// Receives every message, then answers once: the header goes out
		// after every message was decided.
		es := srv.(*echoServer)
		n := 0
		for {
			if err := ss.RecvMsg(new(wrapperspb.StringValue)); err != nil {
				if errors.Is(err, io.EOF) {
					return ss.SendMsg(wrapperspb.String(fmt.Sprint(n)))
				}
				return err
			}
			es.served.Add(1)
			n++
		}
	}}},
}

const collectMethod = "/sluice.test.Echo/Collect"

var collectDesc = &grpc.StreamDesc{StreamName: "Collect", ClientStreams: true}

var chatDesc = &grpc.StreamDesc{StreamName: "Chat", ServerStreams: true, ClientStreams: true}

// serve starts a gRPC server on a free loopback port with s's interceptors,
// the echo service and the health service, and returns a client
// connection to it.
func serve(t *testing.T, s *grpclimit.Server, es *echoServer, dialOpts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	if s != nil {
		opts = append(opts, grpc.ChainUnaryInterceptor(s.UnaryServerInterceptor()), grpc.ChainStreamInterceptor(s.StreamServerInterceptor()))
	}
	srv := grpc.NewServer(opts...)
	srv.RegisterService(&echoDesc, es)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dialOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// frozen is a Limiter whose store's clock never moves: nothing refills, so
// every count is exact.
func frozen() *sluice.Limiter {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return sluice.New(memstore.New(memstore.WithClock(frozenClock(at))), sluice.WithClock(storelink.SystemClock{}))
}

func mustNew(t *testing.T, lim *sluice.Limiter, ps []grpclimit.Policy, opts ...grpclimit.Option) *grpclimit.Server {
	t.Helper()
	s, err := grpclimit.New(lim, ps, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func echo(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
	return conn.Invoke(ctx, echoMethod, wrapperspb.String("hi"), new(wrapperspb.StringValue), opts...)
}

func withUser(ctx context.Context, user string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "x-user", user)
}

// details returns a refusal's RetryInfo delay and QuotaFailure subjects.
func details(t *testing.T, err error) (time.Duration, []string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		t.Fatalf("error %v: want ResourceExhausted", err)
	}
	retry := time.Duration(-1)
	var subjects []string
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			retry = d.GetRetryDelay().AsDuration()
		case *errdetails.QuotaFailure:
			for _, v := range d.GetViolations() {
				subjects = append(subjects, v.GetSubject())
			}
		}
	}
	if retry <= 0 {
		t.Fatalf("refusal %v: RetryInfo missing or 0 (%v)", err, retry)
	}
	return retry, subjects
}

func TestRefusalCarriesRetryInfoAndQuotaFailure(t *testing.T) {
	for _, lim := range []sluice.Limit{
		sluice.PerMinute(3),
		sluice.Per(3, 7*time.Second).WithAlgorithm(sluice.GCRA).WithBurst(2),
		sluice.Per(3, time.Minute).WithAlgorithm(sluice.FixedWindow),
		sluice.Per(3, time.Minute).WithAlgorithm(sluice.SlidingLog),
		sluice.Per(7, 3*time.Second).WithAlgorithm(sluice.SlidingWindow),
	} {
		t.Run(lim.String(), func(t *testing.T) {
			l := frozen()
			replay := frozen() // the same decisions on a store of its own
			s := mustNew(t, l, []grpclimit.Policy{{Name: "per-ip", Limit: lim}})
			es := &echoServer{}
			conn := serve(t, s, es)
			ctx := context.Background()
			for i := 0; ; i++ {
				want, err := replay.Take(ctx, "k", lim, 1)
				if err != nil {
					t.Fatal(err)
				}
				var md metadata.MD
				err = echo(ctx, conn, grpc.Header(&md))
				if want.Allowed {
					if err != nil {
						t.Fatalf("call %d: %v, the model admits it", i, err)
					}
					if got := md.Get("ratelimit"); len(got) != 1 || !strings.HasPrefix(got[0], fmt.Sprintf(`"per-ip";r=%d;t=`, want.Remaining)) {
						t.Fatalf("call %d: ratelimit %q, want r=%d", i, got, want.Remaining)
					}
					continue
				}
				retry, subjects := details(t, err)
				if retry != want.RetryAfter {
					t.Errorf("RetryInfo %v, want the model's RetryAfter %v", retry, want.RetryAfter)
				}
				if len(subjects) != 1 || subjects[0] != "per-ip" {
					t.Errorf("QuotaFailure subjects %q, want [per-ip]", subjects)
				}
				if got := md.Get("ratelimit-policy"); len(got) != 1 || !strings.HasPrefix(got[0], `"per-ip";q=`) {
					t.Errorf("a refusal's ratelimit-policy %q", got)
				}
				readFields(t, md)
				if int(es.served.Load()) != i {
					t.Errorf("served %d calls, want %d", es.served.Load(), i)
				}
				return
			}
		})
	}
}

func TestDraft11Metadata(t *testing.T) {
	s := mustNew(t, frozen(), []grpclimit.Policy{
		{Name: "per-ip", Limit: sluice.PerMinute(100)},
		{Name: "per-user", Limit: sluice.PerSecond(10).WithBurst(50), Key: grpclimit.Metadata("x-user")},
		{Name: "leaky", Limit: sluice.PerSecond(4).WithBurst(3).WithAlgorithm(sluice.LeakyBucket), Key: grpclimit.Static("all"), Cost: 0},
		{Name: "window", Limit: sluice.Per(30, 90*time.Second).WithAlgorithm(sluice.FixedWindow), Key: grpclimit.Static("all"), Shadow: true},
	}, grpclimit.WithShadowHeaders())
	conn := serve(t, s, &echoServer{})
	var md metadata.MD
	if err := echo(withUser(context.Background(), "u1"), conn, grpc.Header(&md)); err != nil {
		t.Fatal(err)
	}
	wantPol := `"per-ip";q=100;w=60, "per-user";q=50;w=5, "leaky";q=4;w=1, "window";q=30;w=90`
	wantCur := `"per-ip";r=99;t=1, "per-user";r=49;t=1, "leaky";r=3;t=1, "window";r=29;t=90`
	if got := md.Get("ratelimit-policy"); len(got) != 1 || got[0] != wantPol {
		t.Errorf("ratelimit-policy %q\nwant %q", got, wantPol)
	}
	if got := md.Get("ratelimit"); len(got) != 1 || got[0] != wantCur {
		t.Errorf("ratelimit %q\nwant %q", got, wantCur)
	}
	readFields(t, md)

	// No headers when asked for none.
	s2 := mustNew(t, frozen(), []grpclimit.Policy{{Name: "per-ip", Limit: sluice.PerMinute(100)}}, grpclimit.WithHeaders())
	conn2 := serve(t, s2, &echoServer{})
	md = nil
	if err := echo(context.Background(), conn2, grpc.Header(&md)); err != nil {
		t.Fatal(err)
	}
	if len(md.Get("ratelimit")) != 0 {
		t.Errorf("WithHeaders(): sent %v", md)
	}
}

// TestCompositeUnderConcurrency: per-user and per-method budgets under 32
// concurrent clients admit exactly what the model admits, and a refusal
// spends nothing: with nothing refilling, a call is refused only when a
// budget it needs is spent, so the method's budget admits min(method,
// Σ users' budgets) calls, and each key's budget left is its burst minus
// the calls it admitted.
func TestCompositeUnderConcurrency(t *testing.T) {
	const users, userBurst, clients, callsEach = 8, 10, 32, 10
	for _, methodBurst := range []int64{60, 100} {
		t.Run(fmt.Sprintf("method-burst-%d", methodBurst), func(t *testing.T) {
			lim := frozen()
			userLimit := sluice.PerHour(1).WithBurst(userBurst)
			methodLimit := sluice.PerHour(1).WithBurst(methodBurst)
			s := mustNew(t, lim, []grpclimit.Policy{
				{Name: "per-user", Limit: userLimit, Key: grpclimit.Metadata("x-user")},
				{Name: "per-method", Limit: methodLimit, Key: grpclimit.Method()},
			})
			es := &echoServer{}
			conn := serve(t, s, es)
			var admitted [users]atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, clients*callsEach)
			for c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					u := c % users
					ctx := withUser(context.Background(), fmt.Sprintf("u%d", u))
					for range callsEach {
						err := echo(ctx, conn)
						if err == nil {
							admitted[u].Add(1)
							continue
						}
						st, _ := status.FromError(err)
						if st.Code() != codes.ResourceExhausted {
							errs <- err
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("a call failed otherwise than refused: %v", err)
			}
			var total int64
			ctx := context.Background()
			for u := range users {
				n := admitted[u].Load()
				total += n
				left, err := lim.Take(ctx, fmt.Sprintf("grpclimit:per-user:u%d", u), userLimit, 0)
				if err != nil {
					t.Fatal(err)
				}
				if left.Remaining != userBurst-n {
					t.Errorf("user u%d admitted %d, has %d left: want %d (a refusal spent)", u, n, left.Remaining, userBurst-n)
				}
			}
			want := min(methodBurst, users*userBurst)
			if total != want {
				t.Errorf("admitted %d calls, the model admits %d", total, want)
			}
			left, err := lim.Take(ctx, "grpclimit:per-method:"+echoMethod, methodLimit, 0)
			if err != nil {
				t.Fatal(err)
			}
			if left.Remaining != methodBurst-total {
				t.Errorf("method has %d left after %d admitted: want %d", left.Remaining, total, methodBurst-total)
			}
			if es.served.Load() != total {
				t.Errorf("handler served %d, admitted %d", es.served.Load(), total)
			}
			st := s.Stats()
			if st[0].Allowed != uint64(total) || st[1].Allowed != uint64(total) {
				t.Errorf("stats %+v: want %d allowed each", st, total)
			}
			t.Logf("%d of %d calls admitted; refusals by policy: per-user %d, per-method %d", total, clients*callsEach, st[0].Refused, st[1].Refused)
		})
	}
}

func TestCompositeRefusalNamesThePolicy(t *testing.T) {
	lim := frozen()
	s := mustNew(t, lim, []grpclimit.Policy{
		{Name: "per-user", Limit: sluice.PerMinute(2), Key: grpclimit.Metadata("x-user")},
		{Name: "per-method", Limit: sluice.PerMinute(100), Key: grpclimit.Method()},
	})
	conn := serve(t, s, &echoServer{})
	ctx := withUser(context.Background(), "alice")
	for range 2 {
		if err := echo(ctx, conn); err != nil {
			t.Fatal(err)
		}
	}
	retry, subjects := details(t, echo(ctx, conn))
	if len(subjects) != 1 || subjects[0] != "per-user" {
		t.Errorf("subjects %q, want [per-user]", subjects)
	}
	if retry != 30*time.Second {
		t.Errorf("retry %v, want 30s (one token of 2/min)", retry)
	}
	// Another user still passes: the method's budget was not spent by the
	// refusal.
	if err := echo(withUser(context.Background(), "bob"), conn); err != nil {
		t.Fatal(err)
	}
	left, _ := lim.Take(context.Background(), "grpclimit:per-method:"+echoMethod, sluice.PerMinute(100), 0)
	if left.Remaining != 97 {
		t.Errorf("method budget %d left, want 97", left.Remaining)
	}
}

func TestShadowNeverRefuses(t *testing.T) {
	var mu sync.Mutex
	events := map[string]int{}
	s := mustNew(t, frozen(), []grpclimit.Policy{
		{Name: "per-ip", Limit: sluice.PerMinute(100)},
		{Name: "trial", Limit: sluice.PerMinute(2), Shadow: true},
	}, grpclimit.WithObserver(observe.Func(func(e observe.Event) {
		if e.Source != "grpc" || e.Latency <= 0 {
			t.Errorf("event %+v: want source grpc and a latency", e)
		}
		mu.Lock()
		events[e.Policy+" "+e.Outcome.String()]++
		mu.Unlock()
	})))
	conn := serve(t, s, &echoServer{})
	for i := range 10 {
		if err := echo(context.Background(), conn); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	st := s.Stats()
	if st[1].Policy != "trial" || st[1].Allowed != 2 || st[1].Refused != 8 {
		t.Errorf("shadow stats %+v", st[1])
	}
	want := map[string]int{"per-ip allowed": 10, "trial allowed": 2, "trial shadow_denied": 8}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(events) != fmt.Sprint(want) {
		t.Errorf("events %v, want %v", events, want)
	}
}

func TestStreamPerMessage(t *testing.T) {
	s := mustNew(t, frozen(), []grpclimit.Policy{
		{Name: "streams", Limit: sluice.PerHour(2), Key: grpclimit.Metadata("x-user")},
		{Name: "messages", Limit: sluice.PerHour(1).WithBurst(5), Key: grpclimit.Metadata("x-user"), Stream: grpclimit.PerMessage},
	})
	es := &echoServer{}
	conn := serve(t, s, es)
	ctx := withUser(context.Background(), "alice")

	// The first stream sends 3 messages, the second 3 more: the 6th is
	// refused, and ends the stream.
	sent := 0
	for round := range 2 {
		cs, err := conn.NewStream(ctx, chatDesc, chatMethod)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			sent++
			if err := cs.SendMsg(wrapperspb.String(fmt.Sprint(sent))); err != nil && !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			out := new(wrapperspb.StringValue)
			err := cs.RecvMsg(out)
			if sent <= 5 {
				if err != nil {
					t.Fatalf("stream %d message %d: %v", round, i, err)
				}
				continue
			}
			retry, subjects := details(t, err)
			if len(subjects) != 1 || subjects[0] != "messages" || retry != time.Hour {
				t.Errorf("refusal of message %d: %v %q, want messages and 1h", sent, retry, subjects)
			}
		}
		_ = cs.CloseSend()
	}
	if es.served.Load() != 5 {
		t.Errorf("served %d messages, want 5", es.served.Load())
	}
	// Two streams were opened: the third is refused at its start, by the
	// per-call policy.
	cs, err := conn.NewStream(ctx, chatDesc, chatMethod)
	if err == nil {
		err = cs.RecvMsg(new(wrapperspb.StringValue))
	}
	if _, subjects := details(t, err); len(subjects) != 1 || subjects[0] != "streams" {
		t.Errorf("third stream refused by %q, want streams", subjects)
	}
}

func TestMissingKey(t *testing.T) {
	s := mustNew(t, frozen(), []grpclimit.Policy{
		{Name: "per-ip", Limit: sluice.PerMinute(100)},
		{Name: "api-key", Limit: sluice.PerMinute(100), Key: grpclimit.Metadata("x-api-key")},
		{Name: "per-user", Limit: sluice.PerMinute(1), Key: grpclimit.Metadata("x-user"), Optional: true},
	})
	es := &echoServer{}
	conn := serve(t, s, es)
	err := echo(context.Background(), conn)
	if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), `"api-key"`) {
		t.Fatalf("no api key: %v, want InvalidArgument naming api-key", err)
	}
	if es.served.Load() != 0 {
		t.Fatal("the handler ran for a call with no key")
	}
	// An anonymous caller with a key passes the optional per-user policy
	// every time; a named user is limited by it.
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "k1")
	for range 3 {
		if err := echo(ctx, conn); err != nil {
			t.Fatal(err)
		}
	}
	ctx = withUser(ctx, "alice")
	if err := echo(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if _, subjects := details(t, echo(ctx, conn)); len(subjects) != 1 || subjects[0] != "per-user" {
		t.Errorf("subjects %q", subjects)
	}
	if st := s.Stats(); st[1].Missing != 1 || st[2].Missing != 3 {
		t.Errorf("missing counts %+v", st)
	}
}

func TestSkip(t *testing.T) {
	s := mustNew(t, frozen(), []grpclimit.Policy{{Name: "per-ip", Limit: sluice.PerMinute(1)}},
		grpclimit.WithSkip(grpclimit.SkipMethods("/grpc.health.v1.Health/")))
	conn := serve(t, s, &echoServer{})
	hc := healthpb.NewHealthClient(conn)
	for range 5 {
		if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := echo(context.Background(), conn); err != nil {
		t.Fatal(err)
	}
	if err := echo(context.Background(), conn); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second echo: %v", err)
	}
}

// TestKeysFromProxies: the peer (127.0.0.1) keys the call unless trusted;
// a trusted proxy's x-forwarded-for is read from the right; 200 IPv6
// addresses of one /64 share one budget; IPv4-mapped is read as IPv4.
func TestKeysFromProxies(t *testing.T) {
	keyed := func(t *testing.T, opts ...grpclimit.Option) (*grpc.ClientConn, *echoServer) {
		s := mustNew(t, frozen(), []grpclimit.Policy{{Name: "per-ip", Limit: sluice.PerHour(5)}}, opts...)
		es := &echoServer{}
		es.onEcho = func(ctx context.Context) error {
			k, _ := grpclimit.PeerIP()(ctx, "")
			es.mu.Lock()
			es.lastKeys = append(es.lastKeys, k)
			es.mu.Unlock()
			return nil
		}
		return serve(t, s, es), es
	}
	xff := func(v ...string) context.Context {
		ctx := context.Background()
		for _, s := range v {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-forwarded-for", s)
		}
		return ctx
	}
	last := func(es *echoServer) string {
		es.mu.Lock()
		defer es.mu.Unlock()
		return es.lastKeys[len(es.lastKeys)-1]
	}

	t.Run("untrusted peer", func(t *testing.T) {
		conn, es := keyed(t)
		if err := echo(xff("203.0.113.9"), conn); err != nil {
			t.Fatal(err)
		}
		if k := last(es); k != "127.0.0.1" {
			t.Errorf("spoofed x-forwarded-for from an untrusted peer keyed %q", k)
		}
	})
	trusted := grpclimit.WithTrustedProxies(netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8"))
	t.Run("trusted chain", func(t *testing.T) {
		conn, es := keyed(t, trusted)
		for _, tc := range []struct {
			ctx  context.Context
			want string
		}{
			{xff("198.51.100.1, 203.0.113.9, 10.1.1.1"), "203.0.113.9"},
			{xff("198.51.100.1", "203.0.113.7", "10.1.1.1, 10.2.2.2"), "203.0.113.7"},
			{xff("10.3.3.3, 10.1.1.1"), "10.3.3.3"},
			{xff("garbage, 10.1.1.1"), "10.1.1.1"},
			{xff(`"198.51.100.7, 203.0.113.9, 10.1.1.1`), "203.0.113.9"}, // a client's quote hides no hop
			{xff("[203.0.113.9], 10.1.1.1"), "10.1.1.1"},                 // brackets are for IPv6
			{xff("::ffff:192.0.2.4"), "192.0.2.4"},
			{xff("[2001:db8:1:2::7]:443"), "2001:db8:1:2::/64"},
			{context.Background(), "127.0.0.1"},
		} {
			if err := echo(tc.ctx, conn); err != nil {
				t.Fatal(err)
			}
			if k := last(es); k != tc.want {
				md, _ := metadata.FromOutgoingContext(tc.ctx)
				t.Errorf("x-forwarded-for %q keyed %q, want %q", md.Get("x-forwarded-for"), k, tc.want)
			}
		}
	})
	t.Run("one /64 one budget", func(t *testing.T) {
		conn, es := keyed(t, trusted)
		ok := 0
		for i := range 200 {
			err := echo(xff(fmt.Sprintf("2001:db8:aa:bb:%x:%x::1", i, i*7)), conn)
			if err == nil {
				ok++
			} else if status.Code(err) != codes.ResourceExhausted {
				t.Fatal(err)
			}
		}
		if ok != 5 || last(es) != "2001:db8:aa:bb::/64" {
			t.Errorf("200 addresses of one /64 admitted %d (want 5), keyed %q", ok, last(es))
		}
		// Another /64 has a budget of its own.
		if err := echo(xff("2001:db8:aa:bc::1"), conn); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("prefix 128", func(t *testing.T) {
		conn, es := keyed(t, trusted, grpclimit.WithIPv6Prefix(128))
		if err := echo(xff("2001:db8::5"), conn); err != nil {
			t.Fatal(err)
		}
		if k := last(es); k != "2001:db8::5/128" {
			t.Errorf("keyed %q", k)
		}
	})
	t.Run("forwarded", func(t *testing.T) {
		conn, es := keyed(t, trusted, grpclimit.WithProxyHeader("Forwarded"))
		ctx := metadata.AppendToOutgoingContext(xff("198.51.100.1"), "forwarded", `for=198.51.100.2, for="[2001:db8::1]:4711";proto=https, for=10.1.1.1`)
		if err := echo(ctx, conn); err != nil {
			t.Fatal(err)
		}
		if k := last(es); k != "2001:db8::/64" {
			t.Errorf("keyed %q", k)
		}
	})
	t.Run("single-value header", func(t *testing.T) {
		conn, es := keyed(t, trusted, grpclimit.WithProxyHeader("X-Real-IP"))
		ctx := metadata.AppendToOutgoingContext(xff("198.51.100.1"), "x-real-ip", "192.0.2.77")
		if err := echo(ctx, conn); err != nil {
			t.Fatal(err)
		}
		if k := last(es); k != "192.0.2.77" {
			t.Errorf("keyed %q", k)
		}
	})
}

type userKey struct{}

func TestKeyFuncs(t *testing.T) {
	lim := frozen()
	auth := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if u := metadata.ValueFromIncomingContext(ctx, "x-user"); len(u) == 1 {
			ctx = context.WithValue(ctx, userKey{}, u[0])
		}
		return h(ctx, req)
	}
	s := mustNew(t, lim, []grpclimit.Policy{
		{Name: "user-method", Limit: sluice.PerHour(2), Key: grpclimit.Join(grpclimit.FromContext(userKey{}), grpclimit.Method())},
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(auth, s.UnaryServerInterceptor()))
	srv.RegisterService(&echoDesc, &echoServer{})
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := withUser(context.Background(), "a|b")
	for range 2 {
		if err := echo(ctx, conn); err != nil {
			t.Fatal(err)
		}
	}
	if status.Code(echo(ctx, conn)) != codes.ResourceExhausted {
		t.Error("third call of one user and method admitted")
	}
	// The same user on another method has a budget of its own.
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	left, _ := lim.Take(context.Background(), "grpclimit:user-method:a%7Cb|"+echoMethod, sluice.PerHour(2), 0)
	if left.Remaining != 0 {
		t.Errorf("joined key not found as escaped: %+v", left)
	}
}

func TestRefund(t *testing.T) {
	lim := frozen()
	s := mustNew(t, lim, []grpclimit.Policy{{Name: "tokens", Limit: sluice.PerHour(100), Key: grpclimit.Static("all"), Cost: 40}})
	es := &echoServer{onEcho: func(ctx context.Context) error { return grpclimit.Refund(ctx, 30) }}
	conn := serve(t, s, es)
	for range 5 { // 5 × (40 − 30) = 50 of 100
		if err := echo(context.Background(), conn); err != nil {
			t.Fatal(err)
		}
	}
	left, _ := lim.Take(context.Background(), "grpclimit:tokens:all", sluice.PerHour(100), 0)
	if left.Remaining != 50 {
		t.Errorf("%d left, want 50", left.Remaining)
	}
	if err := grpclimit.Refund(context.Background(), 1); !errors.Is(err, grpclimit.ErrNoDecision) {
		t.Errorf("Refund outside a call: %v", err)
	}
}

// sleepClock records the sleeps of a leaky-bucket call without sleeping.
type sleepClock struct {
	mu     sync.Mutex
	sleeps []time.Duration
}

func (c *sleepClock) Now() time.Time { return time.Now() }
func (c *sleepClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.sleeps = append(c.sleeps, d)
	c.mu.Unlock()
	return ctx.Err()
}

func TestLeakyBucketDelays(t *testing.T) {
	clock := &sleepClock{}
	s := mustNew(t, frozen(), []grpclimit.Policy{
		{Name: "provider", Limit: sluice.PerSecond(10).WithBurst(3).WithAlgorithm(sluice.LeakyBucket), Key: grpclimit.Static("all")},
	}, grpclimit.WithClock(clock))
	es := &echoServer{}
	conn := serve(t, s, es)
	for range 4 {
		if err := echo(context.Background(), conn); err != nil {
			t.Fatal(err)
		}
	}
	clock.mu.Lock()
	got := fmt.Sprint(clock.sleeps)
	clock.mu.Unlock()
	if got != "[100ms 200ms 300ms]" {
		t.Errorf("sleeps %s, want [100ms 200ms 300ms] (the first call goes at once)", got)
	}
	// The queue is full: refused, with the time until a place frees.
	if retry, _ := details(t, echo(context.Background(), conn)); retry != 100*time.Millisecond {
		t.Errorf("retry %v", retry)
	}
	if es.served.Load() != 4 {
		t.Errorf("served %d", es.served.Load())
	}
}

func TestLeakyTurnAfterDeadline(t *testing.T) {
	s := mustNew(t, frozen(), []grpclimit.Policy{
		{Name: "provider", Limit: sluice.PerSecond(1).WithBurst(5).WithAlgorithm(sluice.LeakyBucket), Key: grpclimit.Static("all")},
	}, grpclimit.WithClock(&sleepClock{}))
	es := &echoServer{}
	conn := serve(t, s, es)
	if err := echo(context.Background(), conn); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := echo(ctx, conn)
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a turn 1s away under a 300ms deadline: %v", err)
	}
	if testenv.Timing(t, "answered before the deadline") && time.Since(start) > 250*time.Millisecond {
		t.Errorf("answered after %v, not at once", time.Since(start))
	}
	if es.served.Load() != 1 {
		t.Errorf("served %d", es.served.Load())
	}
}

func TestBadConfiguration(t *testing.T) {
	lim := frozen()
	ok := sluice.PerSecond(1)
	for name, tc := range map[string]struct {
		lim  *sluice.Limiter
		ps   []grpclimit.Policy
		opts []grpclimit.Option
	}{
		"nil limiter":    {nil, []grpclimit.Policy{{Name: "a", Limit: ok}}, nil},
		"no policy":      {lim, nil, nil},
		"empty name":     {lim, []grpclimit.Policy{{Limit: ok}}, nil},
		"quoted name":    {lim, []grpclimit.Policy{{Name: `a"b`, Limit: ok}}, nil},
		"colon in name":  {lim, []grpclimit.Policy{{Name: "a:b", Limit: ok}}, nil},
		"twice":          {lim, []grpclimit.Policy{{Name: "a", Limit: ok}, {Name: "a", Limit: ok}}, nil},
		"bad limit":      {lim, []grpclimit.Policy{{Name: "a", Limit: sluice.Limit{Rate: 1}}}, nil},
		"negative cost":  {lim, []grpclimit.Policy{{Name: "a", Limit: ok, Cost: -1}}, nil},
		"cost too big":   {lim, []grpclimit.Policy{{Name: "a", Limit: ok, Cost: 2}}, nil},
		"reserve < 0":    {lim, []grpclimit.Policy{{Name: "a", Limit: sluice.PerSecond(5), Headroom: -1}}, nil},
		"reserve it all": {lim, []grpclimit.Policy{{Name: "a", Limit: sluice.PerSecond(5), Headroom: 5}}, nil},
		"stream mode":    {lim, []grpclimit.Policy{{Name: "a", Limit: ok, Stream: 9}}, nil},
		"ipv6 prefix":    {lim, []grpclimit.Policy{{Name: "a", Limit: ok}}, []grpclimit.Option{grpclimit.WithIPv6Prefix(0)}},
		"proxy prefix":   {lim, []grpclimit.Policy{{Name: "a", Limit: ok}}, []grpclimit.Option{grpclimit.WithTrustedProxies(netip.Prefix{})}},
		"proxy header":   {lim, []grpclimit.Policy{{Name: "a", Limit: ok}}, []grpclimit.Option{grpclimit.WithProxyHeader("a b")}},
		"header style":   {lim, []grpclimit.Policy{{Name: "a", Limit: ok}}, []grpclimit.Option{grpclimit.WithHeaders(7)}},
		"nil skip":       {lim, []grpclimit.Policy{{Name: "a", Limit: ok}}, []grpclimit.Option{grpclimit.WithSkip(nil)}},
		"nil clock":      {lim, []grpclimit.Policy{{Name: "a", Limit: ok}}, []grpclimit.Option{grpclimit.WithClock(nil)}},
		"unavailable 0":  {lim, []grpclimit.Policy{{Name: "a", Limit: ok}}, []grpclimit.Option{grpclimit.WithUnavailableRetryAfter(0)}},
		"stream option":  {lim, []grpclimit.Policy{{Name: "a", Limit: ok}}, []grpclimit.Option{grpclimit.WithStreamMode(grpclimit.StreamDefault)}},
	} {
		if _, err := grpclimit.New(tc.lim, tc.ps, tc.opts...); err == nil {
			t.Errorf("%s: New accepted it", name)
		} else if !strings.HasPrefix(err.Error(), "grpclimit: ") {
			t.Errorf("%s: error %q does not say where it comes from", name, err)
		}
	}
	if _, err := grpclimit.NewClient(lim, []grpclimit.Policy{{Name: "a", Limit: ok, Shadow: true}}); err == nil {
		t.Error("NewClient accepted a shadow policy")
	}
}

func TestCostFunc(t *testing.T) {
	lim := frozen()
	var logged atomic.Int64
	s := mustNew(t, lim, []grpclimit.Policy{{
		Name: "bytes", Limit: sluice.PerHour(10), Key: grpclimit.Static("all"),
		CostFunc: func(_ context.Context, _ string, msg any) (int64, error) {
			v, ok := msg.(*wrapperspb.StringValue)
			if !ok {
				return 0, errors.New("not a string")
			}
			if v.GetValue() == "bad" {
				return -1, nil
			}
			return int64(len(v.GetValue())), nil
		},
	}}, grpclimit.WithErrorLog(func(context.Context, string, error) { logged.Add(1) }))
	conn := serve(t, s, &echoServer{})
	call := func(v string) error {
		return conn.Invoke(context.Background(), echoMethod, wrapperspb.String(v), new(wrapperspb.StringValue))
	}
	if err := call("12345678"); err != nil {
		t.Fatal(err)
	}
	if _, subjects := details(t, call("123")); len(subjects) != 1 {
		t.Error("a cost of 3 with 2 left passed")
	}
	if err := call("bad"); status.Code(err) != codes.InvalidArgument || logged.Load() != 1 {
		t.Errorf("a negative cost: %v, %d logged", err, logged.Load())
	}
	if err := call("12345678901"); status.Code(err) != codes.InvalidArgument || strings.Contains(err.Error(), "sluice:") {
		t.Errorf("a cost over capacity: %v", err)
	}
}

// TestObserverOnRefusal: a refused composite reports Denied for the policy
// that refused and nothing for the one that would have granted; a stream
// under WithStreamMode(PerMessage) reports one event per message.
func TestObserverOnRefusal(t *testing.T) {
	var mu sync.Mutex
	var got []string
	s := mustNew(t, frozen(), []grpclimit.Policy{
		{Name: "per-user", Limit: sluice.PerHour(1), Key: grpclimit.Metadata("x-user")},
		{Name: "per-method", Limit: sluice.PerHour(100), Key: grpclimit.Method()},
	}, grpclimit.WithStreamMode(grpclimit.PerMessage), grpclimit.WithObserver(observe.Func(func(e observe.Event) {
		mu.Lock()
		got = append(got, e.Policy+" "+e.Outcome.String())
		mu.Unlock()
	})))
	conn := serve(t, s, &echoServer{})
	ctx := withUser(context.Background(), "alice")
	if err := echo(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if status.Code(echo(ctx, conn)) != codes.ResourceExhausted {
		t.Fatal("second call admitted")
	}
	cs, err := conn.NewStream(withUser(context.Background(), "bob"), chatDesc, chatMethod)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_ = cs.SendMsg(wrapperspb.String("m"))
	}
	_ = cs.CloseSend()
	var last error
	for last == nil {
		last = cs.RecvMsg(new(wrapperspb.StringValue))
	}
	if status.Code(last) != codes.ResourceExhausted {
		t.Errorf("bob's second message: %v", last)
	}
	mu.Lock()
	defer mu.Unlock()
	want := "[per-user allowed per-method allowed per-user denied per-user allowed per-method allowed per-user denied]"
	if fmt.Sprint(got) != want {
		t.Errorf("events %v\nwant   %v", got, want)
	}
}

// A handler that runs across a fixed window's end gives nothing back to the
// next window: its units were spent in the one that ended (before, the next
// window admitted 20 of 10).
func TestRefundAcrossWindowEnd(t *testing.T) {
	c := testenv.NewClock()
	lim := sluice.New(memstore.New(memstore.WithClock(c)), sluice.WithClock(storelink.SystemClock{}))
	s := mustNew(t, lim, []grpclimit.Policy{{Name: "window", Limit: sluice.PerMinute(10).WithAlgorithm(sluice.FixedWindow), Key: grpclimit.Static("all"), Cost: 10}})
	es := &echoServer{}
	conn := serve(t, s, es)
	var first atomic.Bool
	var nested, refund error
	es.onEcho = func(ctx context.Context) error {
		if !first.CompareAndSwap(false, true) {
			return nil
		}
		c.Add(time.Minute) // the next window: another call spends its 10
		nested = echo(context.Background(), conn)
		refund = grpclimit.Refund(ctx, 10)
		return nil
	}
	if err := echo(context.Background(), conn); err != nil {
		t.Fatal(err)
	}
	if nested != nil || refund != nil {
		t.Fatalf("the next window's call: %v; refund: %v", nested, refund)
	}
	if err := echo(context.Background(), conn); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("after a refund of the ended window's units: %v, want ResourceExhausted (the window holds 10 of 10)", err)
	}
}
