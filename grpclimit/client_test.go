package grpclimit_test

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/grpclimit"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/observe"
)

func clientOpts(c *grpclimit.Client) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(c.UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(c.StreamClientInterceptor()),
	}
}

// TestClientPacing: 4 goroutines make 31 calls through a client limited to
// 20 a second with a burst of 1: every call is made, never faster than the
// limit allows, and (timing) the server sees them at no more than the
// limit's rate.
func TestClientPacing(t *testing.T) {
	const calls, rate = 31, 20
	c, err := grpclimit.NewClient(sluice.New(memstore.New()), []grpclimit.Policy{
		{Name: "upstream", Limit: sluice.PerSecond(rate).WithBurst(1)},
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var arrivals []time.Time
	es := &echoServer{onEcho: func(context.Context) error {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
		return nil
	}}
	conn := serve(t, nil, es, clientOpts(c)...)
	var wg sync.WaitGroup
	next := make(chan struct{}, calls)
	for range calls {
		next <- struct{}{}
	}
	close(next)
	start := time.Now()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				if err := echo(ctx, conn); err != nil {
					t.Error(err)
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if es.served.Load() != calls || c.Stats()[0].Allowed != calls {
		t.Fatalf("served %d, stats %+v: want %d", es.served.Load(), c.Stats(), calls)
	}
	ideal := time.Duration(calls-1) * time.Second / rate
	sort.Slice(arrivals, func(i, j int) bool { return arrivals[i].Before(arrivals[j]) })
	observed := float64(calls-1) / arrivals[calls-1].Sub(arrivals[0]).Seconds()
	t.Logf("%d calls in %v (ideal %v); observed rate at the server %.1f/s, limit %d/s", calls, elapsed, ideal, observed, rate)
	if elapsed < ideal-time.Millisecond {
		t.Errorf("%d calls took %v: faster than the limit allows (%v)", calls, elapsed, ideal)
	}
	// Within the limit: arrivals may bunch by the network's jitter (5%),
	// never more; and no slower than 80% of it (a pacer that waits too long).
	if testenv.Timing(t, "observed rate within 5% above and 20% below the limit") {
		if observed > rate*1.05 || observed < rate*0.8 {
			t.Errorf("observed %.1f calls/s: not within 5%% above or 20%% below the limit of %d", observed, rate)
		}
	}
}

// TestClientRefusesWhatCannotWait: a call whose deadline comes before its
// turn fails at once with ResourceExhausted, unsent, spending nothing.
func TestClientRefusesWhatCannotWait(t *testing.T) {
	lim := frozen()
	var events []observe.Event
	var mu sync.Mutex
	c, err := grpclimit.NewClient(lim, []grpclimit.Policy{
		{Name: "upstream", Limit: sluice.PerHour(2)},
		{Name: "global", Limit: sluice.PerHour(100), Key: grpclimit.Static("all")},
	}, grpclimit.WithObserver(observe.Func(func(e observe.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	})))
	if err != nil {
		t.Fatal(err)
	}
	es := &echoServer{}
	conn := serve(t, nil, es, clientOpts(c)...)
	for range 2 {
		if err := echo(context.Background(), conn); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	retry, subjects := details(t, echo(ctx, conn))
	if retry != 30*time.Minute || len(subjects) != 1 || subjects[0] != "upstream" {
		t.Errorf("local refusal: retry %v by %q, want 30m by upstream", retry, subjects)
	}
	if es.served.Load() != 2 {
		t.Errorf("served %d: the refused call was sent", es.served.Load())
	}
	left, _ := lim.Take(context.Background(), "grpclimit-out:global:all", sluice.PerHour(100), 0)
	if left.Remaining != 98 {
		t.Errorf("global has %d left, want 98: the refusal spent", left.Remaining)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 5 || events[4].Outcome != observe.Denied || events[4].Policy != "upstream" || events[4].Source != "grpc-client" {
		t.Errorf("events %+v", events)
	}
}

func TestClientStreamPerMessage(t *testing.T) {
	c, err := grpclimit.NewClient(frozen(), []grpclimit.Policy{
		{Name: "streams", Limit: sluice.PerHour(1)},
		{Name: "messages", Limit: sluice.PerHour(1).WithBurst(3), Stream: grpclimit.PerMessage},
	})
	if err != nil {
		t.Fatal(err)
	}
	es := &echoServer{}
	conn := serve(t, nil, es, clientOpts(c)...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cs, err := conn.NewStream(ctx, chatDesc, chatMethod)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		err := cs.SendMsg(wrapperspb.String("m"))
		if i < 3 {
			if err != nil {
				t.Fatal(err)
			}
			if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, subjects := details(t, err); len(subjects) != 1 || subjects[0] != "messages" {
			t.Errorf("fourth message refused by %q", subjects)
		}
	}
	_ = cs.CloseSend()
	if es.served.Load() != 3 {
		t.Errorf("served %d messages, want 3", es.served.Load())
	}
	if _, err := conn.NewStream(ctx, chatDesc, chatMethod); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("second stream: %v, want a local refusal", err)
	}
}

// TestClientContextCanceled: a call canceled while it waits returns
// Canceled, unsent.
func TestClientContextCanceled(t *testing.T) {
	c, err := grpclimit.NewClient(sluice.New(memstore.New()), []grpclimit.Policy{
		{Name: "upstream", Limit: sluice.PerMinute(1)},
	})
	if err != nil {
		t.Fatal(err)
	}
	es := &echoServer{}
	conn := serve(t, nil, es, clientOpts(c)...)
	if err := echo(context.Background(), conn); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	err = echo(ctx, conn) // no deadline: it waits until canceled
	if status.Code(err) != codes.Canceled {
		t.Errorf("canceled wait: %v", err)
	}
	if es.served.Load() != 1 || !errors.Is(ctx.Err(), context.Canceled) {
		t.Errorf("served %d", es.served.Load())
	}
}

// TestClientKeys: on a Client, Metadata reads what the call sends and
// Target is the connection's target; a call with no key for a non-Optional
// policy fails unsent with InvalidArgument.
func TestClientKeys(t *testing.T) {
	lim := frozen()
	c, err := grpclimit.NewClient(lim, []grpclimit.Policy{
		{Name: "per-tenant", Limit: sluice.PerHour(2), Key: grpclimit.Metadata("x-tenant")},
		{Name: "per-target", Limit: sluice.PerHour(100)},
	})
	if err != nil {
		t.Fatal(err)
	}
	es := &echoServer{}
	conn := serve(t, nil, es, clientOpts(c)...)
	if err := echo(context.Background(), conn); status.Code(err) != codes.InvalidArgument || es.served.Load() != 0 {
		t.Fatalf("no tenant: %v, served %d", err, es.served.Load())
	}
	acme := metadata.AppendToOutgoingContext(context.Background(), "x-tenant", "acme")
	for range 2 {
		if err := echo(acme, conn); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(acme, time.Second)
	defer cancel()
	if _, subjects := details(t, echo(short, conn)); len(subjects) != 1 || subjects[0] != "per-tenant" {
		t.Errorf("refused by %q", subjects)
	}
	if err := echo(metadata.AppendToOutgoingContext(context.Background(), "x-tenant", "other"), conn); err != nil {
		t.Fatal(err)
	}
	left, _ := lim.Take(context.Background(), "grpclimit-out:per-target:"+conn.Target(), sluice.PerHour(100), 0)
	if left.Remaining != 97 {
		t.Errorf("target %q has %d left, want 97", conn.Target(), left.Remaining)
	}
}
