package grpclimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/grpclimit"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/redisstore"
)

// fakeStream is a server stream that is only a context.
type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s fakeStream) Context() context.Context { return s.ctx }

func tenant(ctx context.Context, t string) context.Context {
	return metadata.NewIncomingContext(ctx, metadata.Pairs("tenant", t))
}

func newConcurrent(t *testing.T, lim *sluice.Limiter, n int64) *grpclimit.Concurrent {
	t.Helper()
	c, err := grpclimit.NewConcurrent(lim, grpclimit.ConcurrencyPolicy{
		Name: "streams", Limit: sluice.MaxConcurrent(n).WithLifetime(time.Minute), Key: grpclimit.Metadata("tenant"),
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestConcurrentStreamHoldsItsWholeLife: a stream holds its slot until its
// handler ends; a unary call refused meanwhile is ResourceExhausted with
// RetryInfo (the lease's lifetime), and passes once the stream is done.
func TestConcurrentStreamHoldsItsWholeLife(t *testing.T) {
	c := newConcurrent(t, sluice.New(memstore.New()), 1)
	ctx := tenant(context.Background(), "acme")
	started, end := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		done <- c.StreamServerInterceptor()(nil, fakeStream{ctx: ctx}, &grpc.StreamServerInfo{FullMethod: "/s/Watch"}, func(any, grpc.ServerStream) error {
			close(started)
			<-end
			return nil
		})
	}()
	<-started
	unary := c.UnaryServerInterceptor()
	call := func() error {
		_, err := unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/s/Get"}, func(context.Context, any) (any, error) { return "ok", nil })
		return err
	}
	err := call()
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("while the stream is open: %v, want ResourceExhausted", err)
	}
	var retry time.Duration
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			retry = ri.RetryDelay.AsDuration()
		}
	}
	if retry != time.Minute {
		t.Fatalf("RetryInfo %v, want the lease's lifetime, 1m", retry)
	}
	close(end)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := call(); err != nil {
		t.Fatalf("after the stream: %v", err)
	}
	if _, err := unary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/s/Get"}, nil); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("no key: %v, want InvalidArgument", err)
	}
}

// TestConcurrentReleasesOnCancelAndPanic runs on Redis, where a release
// made with the call's cancelled context would not be sent: a stream whose
// context is cancelled, and a handler that panics, both give their slot
// back.
func TestConcurrentReleasesOnCancelAndPanic(t *testing.T) {
	client := redistest.Standalone(t).Client()
	st, err := redisstore.New(client, redisstore.WithPrefix(fmt.Sprintf("grpcconc:%d:", time.Now().UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	lim := sluice.New(st)
	c := newConcurrent(t, lim, 1)
	ctx, cancel := context.WithCancel(tenant(context.Background(), "acme"))
	err = c.StreamServerInterceptor()(nil, fakeStream{ctx: ctx}, &grpc.StreamServerInfo{FullMethod: "/s/Watch"}, func(any, grpc.ServerStream) error {
		cancel() // the client went away
		<-ctx.Done()
		return ctx.Err()
	})
	if err == nil {
		t.Fatal("the cancelled stream's error was lost")
	}
	free := func() int64 {
		ls, err := lim.Acquire(context.Background(), "grpclimit:streams:acme", sluice.MaxConcurrent(1), 0)
		if err != nil {
			t.Fatal(err)
		}
		return ls.Remaining
	}
	if n := free(); n != 1 {
		t.Fatalf("after a cancelled stream: %d free, want its slot back", n)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic did not go on")
			}
		}()
		c.UnaryServerInterceptor()(tenant(context.Background(), "acme"), nil, &grpc.UnaryServerInfo{FullMethod: "/s/Get"}, func(context.Context, any) (any, error) { panic("boom") })
	}()
	if n := free(); n != 1 {
		t.Fatalf("after a panic: %d free, want its slot back", n)
	}
}

// At most 4 exports of a tenant run at once, each stream holding its slot
// from its start to its end.
func ExampleNewConcurrent() {
	lim := sluice.New(memstore.New())
	c, err := grpclimit.NewConcurrent(lim, grpclimit.ConcurrencyPolicy{
		Name:  "exports",
		Limit: sluice.MaxConcurrent(4).WithLifetime(10 * time.Minute),
		Key:   grpclimit.Metadata("tenant"),
	})
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(c.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(c.StreamServerInterceptor()),
	)
	defer srv.Stop()
	fmt.Println("serving")
	// Output: serving
}

// TestConcurrentHeadroom: a limit of 2 with 1 kept (Limit.Headroom) for the
// calls Critical picks: an ordinary stream holds the one slot it may use,
// so an ordinary unary call is refused, while a critical one (by its
// method) still gets the reserved slot.
func TestConcurrentHeadroom(t *testing.T) {
	c, err := grpclimit.NewConcurrent(sluice.New(memstore.New()), grpclimit.ConcurrencyPolicy{
		Name: "api", Limit: sluice.MaxConcurrent(2).WithHeadroom(1), Key: grpclimit.Metadata("tenant"),
		Critical: func(_ context.Context, method string) bool { return method == "/s/Pay" },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := tenant(context.Background(), "acme")
	started, end, done := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		done <- c.StreamServerInterceptor()(nil, fakeStream{ctx: ctx}, &grpc.StreamServerInfo{FullMethod: "/s/Watch"}, func(any, grpc.ServerStream) error {
			close(started)
			<-end
			return nil
		})
	}()
	<-started
	call := func(method string) codes.Code {
		_, err := c.UnaryServerInterceptor()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) { return "ok", nil })
		return status.Code(err)
	}
	if got := call("/s/Get"); got != codes.ResourceExhausted {
		t.Errorf("an ordinary call while the stream holds the unreserved slot: %v, want ResourceExhausted", got)
	}
	if got := call("/s/Pay"); got != codes.OK {
		t.Errorf("a critical call: %v, want OK (the reserved slot)", got)
	}
	close(end)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := call("/s/Get"); got != codes.OK {
		t.Errorf("an ordinary call once the stream ended: %v, want OK", got)
	}
}
