package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/grpclimit"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/memstore"
)

// The tokens service: a unary Ask whose request says what the handler
// does ("trailer 4000", "charge 300", "code 16", "stream-trailer ..."),
// and a server stream Stream that sends a message, charging 10 for it,
// each time the test says so, until the client leaves.
const (
	askMethod    = "/sluice.test.Tokens/Ask"
	streamMethod = "/sluice.test.Tokens/Stream"
)

type tokensServer struct {
	proceed chan struct{}
	ended   chan error // each Stream's end, once settled
	errs    chan error // what Charge returned in a handler
}

// do does what a request says in ctx: sets the trailer, charges, or fails
// with a code.
func (ts *tokensServer) do(ctx context.Context, say string, setTrailer func(metadata.MD)) error {
	verb, arg, _ := strings.Cut(say, " ")
	switch verb {
	case "trailer":
		setTrailer(metadata.Pairs("x-tokens-used", arg))
	case "charge":
		n, _ := strconv.ParseInt(arg, 10, 64)
		if err := grpclimit.Charge(ctx, n); err != nil {
			ts.errs <- err
		}
	case "code":
		c, _ := strconv.Atoi(arg)
		return status.Error(codes.Code(c), "as asked")
	}
	return nil
}

var tokensDesc = grpc.ServiceDesc{
	ServiceName: "sluice.test.Tokens",
	HandlerType: (*echoAPI)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Ask", Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, req any) (any, error) {
			say := req.(*wrapperspb.StringValue).GetValue()
			err := srv.(*tokensServer).do(ctx, say, func(md metadata.MD) { _ = grpc.SetTrailer(ctx, md) })
			return wrapperspb.String("ok"), err
		}
		return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: askMethod}, h)
	}}},
	Streams: []grpc.StreamDesc{{StreamName: "Stream", ServerStreams: true, Handler: func(srv any, ss grpc.ServerStream) error {
		ts := srv.(*tokensServer)
		in := new(wrapperspb.StringValue)
		if err := ss.RecvMsg(in); err != nil {
			return err
		}
		if in.GetValue() != "" {
			return ts.do(ss.Context(), in.GetValue(), ss.SetTrailer)
		}
		for i := 0; ; i++ {
			if err := ss.SendMsg(wrapperspb.String(fmt.Sprint(i))); err != nil {
				return err
			}
			if err := grpclimit.Charge(ss.Context(), 10); err != nil {
				ts.errs <- err
			}
			select {
			case <-ts.proceed:
			case <-ss.Context().Done(): // the client left
				return ss.Context().Err()
			}
		}
	}}, {StreamName: "Sum", ClientStreams: true, Handler: func(srv any, ss grpc.ServerStream) error {
		// Receives every message, then does what the first said.
		var first string
		for n := 0; ; n++ {
			in := new(wrapperspb.StringValue)
			if err := ss.RecvMsg(in); err != nil {
				if !errors.Is(err, io.EOF) {
					return err
				}
				break
			}
			if n == 0 {
				first = in.GetValue()
			}
		}
		if err := srv.(*tokensServer).do(ss.Context(), first, ss.SetTrailer); err != nil {
			return err
		}
		return ss.SendMsg(wrapperspb.String("done"))
	}}},
}

var streamDesc = &grpc.StreamDesc{StreamName: "Stream", ServerStreams: true}

var sumDesc = &grpc.StreamDesc{StreamName: "Sum", ClientStreams: true}

// sum sends n messages on a Sum stream, the first saying say, and returns
// the stream's status once it is settled.
func sum(t *testing.T, conn *grpc.ClientConn, ts *tokensServer, say string, n int) error {
	t.Helper()
	st, err := conn.NewStream(context.Background(), sumDesc, "/sluice.test.Tokens/Sum")
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		msg := ""
		if i == 0 {
			msg = say
		}
		if err := st.SendMsg(wrapperspb.String(msg)); err != nil {
			break // refused: RecvMsg says why
		}
	}
	st.CloseSend()
	err = st.RecvMsg(new(wrapperspb.StringValue))
	<-ts.ended
	return err
}

// TestPerMessageSettles: a stream whose messages each took an estimate is
// settled once, to what its trailer says; a counting policy charges each
// message's cost when the stream's code counts.
func TestPerMessageSettles(t *testing.T) {
	lim := frozen()
	l := sluice.PerHour(1000)
	s := mustNew(t, lim, []grpclimit.Policy{
		{Name: "tokens", Limit: l, Key: grpclimit.Static("all"), Cost: 5, Stream: grpclimit.PerMessage, Used: &grpclimit.Used{Trailer: "x-tokens-used"}},
		{Name: "errors", Limit: l, Key: grpclimit.Static("all"), Cost: 5, Stream: grpclimit.PerMessage,
			Count: func(c codes.Code) bool { return c == codes.Internal }},
	})
	ts := newTokens()
	conn := serveTokens(t, s, ts)
	if err := sum(t, conn, ts, "trailer 7", 4); err != nil {
		t.Fatal(err)
	}
	if tok, errs := leftOf(t, lim, "grpclimit:tokens:all", l), leftOf(t, lim, "grpclimit:errors:all", l); tok != 993 || errs != 1000 {
		t.Errorf("after 4 messages that used 7: %d and %d left, want 993 and 1000", tok, errs)
	}
	if err := sum(t, conn, ts, "code "+strconv.Itoa(int(codes.Internal)), 3); status.Code(err) != codes.Internal {
		t.Fatal(err)
	}
	if tok, errs := leftOf(t, lim, "grpclimit:tokens:all", l), leftOf(t, lim, "grpclimit:errors:all", l); tok != 978 || errs != 985 {
		t.Errorf("after 3 messages that failed: %d and %d left, want 978 and 985", tok, errs)
	}
}

// serveTokens starts the tokens service behind s and returns a
// connection to it; ts.ended gets each Stream's error once it is settled.
func serveTokens(t *testing.T, s *grpclimit.Server, ts *tokensServer) *grpc.ClientConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stream := s.StreamServerInterceptor()
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(s.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			err := stream(srv, ss, info, h) // settled before it returns
			ts.ended <- err
			return err
		}))
	srv.RegisterService(&tokensDesc, ts)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func newTokens() *tokensServer {
	return &tokensServer{proceed: make(chan struct{}), ended: make(chan error, 10), errs: make(chan error, 10)}
}

func ask(conn *grpc.ClientConn, say string) error {
	return conn.Invoke(context.Background(), askMethod, wrapperspb.String(say), new(wrapperspb.StringValue))
}

func leftOf(t *testing.T, lim *sluice.Limiter, key string, l sluice.Limit) int64 {
	t.Helper()
	r, err := lim.Take(context.Background(), key, l, 0)
	if err != nil {
		t.Fatal(err)
	}
	return r.Remaining
}

// errLog keeps what WithErrorLog is given.
type errLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errLog) log(_ context.Context, _ string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *errLog) take() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.errs
	l.errs = nil
	return e
}

// TestUsedFromTrailer: an estimate of 500 is brought to what the call's
// trailer (or its handler's charges) says, unary or stream: 4000 charges
// 3,500 more, 100 gives 400 back.
func TestUsedFromTrailer(t *testing.T) {
	l := sluice.PerHour(100_000)
	l.Debt = 10_000
	var logged errLog
	for _, unary := range []bool{true, false} {
		lim := frozen()
		s := mustNew(t, lim, []grpclimit.Policy{{Name: "tokens", Limit: l, Key: grpclimit.Static("all"), Cost: 500, Used: &grpclimit.Used{Trailer: "X-Tokens-Used"}}},
			grpclimit.WithErrorLog(logged.log))
		ts := newTokens()
		conn := serveTokens(t, s, ts)
		call := func(say string) error {
			if unary {
				return ask(conn, say)
			}
			st, err := conn.NewStream(context.Background(), streamDesc, streamMethod)
			if err != nil {
				return err
			}
			if err := st.SendMsg(wrapperspb.String(say)); err != nil {
				return err
			}
			st.CloseSend()
			if err := st.RecvMsg(new(wrapperspb.StringValue)); err != io.EOF {
				return err
			}
			return <-ts.ended
		}
		left := int64(100_000)
		for _, step := range []struct {
			say  string
			used int64
		}{{"trailer 4000", 4000}, {"trailer 100", 100}, {"charge 300", 300}, {"", 500}, {"trailer x", 500}} {
			if err := call(step.say); err != nil {
				t.Fatalf("unary %v, %q: %v", unary, step.say, err)
			}
			left -= step.used
			if got := leftOf(t, lim, "grpclimit:tokens:all", l); got != left {
				t.Errorf("unary %v, %q: %d left, want %d", unary, step.say, got, left)
			}
		}
		if errs := logged.take(); len(errs) != 1 || !strings.Contains(errs[0].Error(), `policy "tokens": what the call used: trailer x-tokens-used: "x" is not a whole number`) {
			t.Errorf("unary %v: logged %v", unary, errs)
		}
		select {
		case err := <-ts.errs:
			t.Error(err)
		default:
		}
	}
}

// TestStreamLeftMidway: a client that leaves a stream mid-way is charged
// what the handler charged until then.
func TestStreamLeftMidway(t *testing.T) {
	lim := sluice.New(memstore.New())
	l := sluice.PerHour(1000)
	s := mustNew(t, lim, []grpclimit.Policy{{Name: "tokens", Limit: l, Key: grpclimit.Static("all"), Cost: 1, Used: &grpclimit.Used{}}})
	ts := newTokens()
	conn := serveTokens(t, s, ts)
	ctx, cancel := context.WithCancel(context.Background())
	st, err := conn.NewStream(ctx, streamDesc, streamMethod)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(wrapperspb.String("")); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := st.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			t.Fatal(err)
		}
		if i < 2 {
			ts.proceed <- struct{}{}
		}
	}
	cancel() // leaves after 3 messages
	select {
	case <-ts.ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler never saw the client leave")
	}
	if got := leftOf(t, lim, "grpclimit:tokens:all", l); got != 1000-30 {
		t.Errorf("%d left after 3 messages of 10, want 970", got)
	}
}

// TestFailedAuthCount: 5 failed authentications a minute per client,
// counted by their status codes; successful calls never count.
func TestFailedAuthCount(t *testing.T) {
	c := testenv.NewClock()
	lim := sluice.New(memstore.New(memstore.WithClock(c)))
	limit := sluice.PerMinute(5)
	s := mustNew(t, lim, []grpclimit.Policy{{Name: "failed-auth", Limit: limit, Key: grpclimit.Static("client"),
		Count: func(code codes.Code) bool { return code == codes.Unauthenticated || code == codes.PermissionDenied }}})
	conn := serveTokens(t, s, newTokens())
	for i := range 20 {
		if err := ask(conn, ""); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if err := ask(conn, "code "+strconv.Itoa(int(codes.NotFound))); status.Code(err) != codes.NotFound {
			t.Fatalf("a failure that does not count: %v", err)
		}
	}
	for i := range 5 {
		say := "code " + strconv.Itoa(int(codes.Unauthenticated))
		if i%2 == 1 {
			say = "code " + strconv.Itoa(int(codes.PermissionDenied))
		}
		if err := ask(conn, say); status.Code(err) != codes.Unauthenticated && status.Code(err) != codes.PermissionDenied {
			t.Fatalf("failure %d: %v", i, err)
		}
	}
	err := ask(conn, "")
	retry, subjects := details(t, err)
	if retry != 12*time.Second || len(subjects) != 1 || subjects[0] != "failed-auth" {
		t.Errorf("after 5 failures: retry %v, %v; want 12s", retry, subjects)
	}
	c.Add(12 * time.Second)
	if err := ask(conn, ""); err != nil {
		t.Errorf("once one more could count: %v", err)
	}
}

func TestUsedRejected(t *testing.T) {
	lim := frozen()
	for _, tc := range []struct {
		p    grpclimit.Policy
		want string
	}{
		{grpclimit.Policy{Name: "a", Limit: sluice.PerMinute(5).WithAlgorithm(sluice.SlidingWindow), Used: &grpclimit.Used{}}, `policy "a": charging what was used (Used) needs an algorithm that can be charged`},
		{grpclimit.Policy{Name: "b", Limit: sluice.PerMinute(5).WithAlgorithm(sluice.LeakyBucket), Count: func(codes.Code) bool { return true }}, `policy "b": counting by outcome (Count) needs`},
		{grpclimit.Policy{Name: "c", Limit: sluice.PerMinute(5), Used: &grpclimit.Used{Trailer: "x tokens"}}, `Trailer "x tokens": not a metadata key`},
		{grpclimit.Policy{Name: "d", Limit: sluice.PerMinute(5), Used: &grpclimit.Used{Trailer: "x-tokens-bin"}}, "binary or gRPC-reserved"},
	} {
		if _, err := grpclimit.New(lim, []grpclimit.Policy{tc.p}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %s", tc.p.Name, err, tc.want)
		}
	}
	if _, err := grpclimit.NewClient(lim, []grpclimit.Policy{{Name: "x", Limit: sluice.PerMinute(5), Used: &grpclimit.Used{}}}); err == nil || !strings.Contains(err.Error(), "not supported on a Client") {
		t.Errorf("a Client that settles: %v", err)
	}
	if err := grpclimit.Charge(context.Background(), 1); !errors.Is(err, grpclimit.ErrNoDecision) {
		t.Errorf("Charge outside a call: %v", err)
	}
}
