package rls

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// fakeRLS answers OVER_LIMIT for the hot value and OK otherwise, or, with
// hang set, never answers until the call's context ends.
type fakeRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	hang bool
	// The calls in progress, and the most seen at once.
	inFlight, peak atomic.Int64
}

func (f *fakeRLS) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	n := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	for p := f.peak.Load(); n > p && !f.peak.CompareAndSwap(p, n); p = f.peak.Load() {
	}
	time.Sleep(100 * time.Microsecond) // let the calls overlap
	if f.hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	code := rlsv3.RateLimitResponse_OK
	if req.GetDescriptors()[0].GetEntries()[0].GetValue() == HotValue {
		code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	return &rlsv3.RateLimitResponse{OverallCode: code, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: code}}}, nil
}

// serveFake serves f on a free loopback port until t ends.
func serveFake(t *testing.T, f *fakeRLS, opts ...grpc.ServerOption) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(opts...)
	rlsv3.RegisterRateLimitServiceServer(s, f)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return l.Addr().String()
}

func TestRunCalls(t *testing.T) {
	for _, g := range Generators {
		t.Run(string(g), func(t *testing.T) {
			c, err := DialLoader(g, serveFake(t, &fakeRLS{}), 2)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			const n = Keys + Keys/HotEvery
			r, err := c.Run(context.Background(), Options{Callers: 8, Calls: n})
			if err != nil {
				t.Fatal(err)
			}
			// 8 callers walk the list from 8 offsets, each at its own pace: about
			// one call in HotEvery+1 is the hot value's.
			want := int64(Keys / HotEvery)
			if r.Calls != n || r.Errors != 0 || r.Over < want/2 || r.Over > 2*want || r.Hist.Count() != n {
				t.Errorf("calls %d, over %d, errors %d (%v), latencies %d; want %d calls, about %d over",
					r.Calls, r.Over, r.Errors, r.FirstErr, r.Hist.Count(), n, want)
			}
			if r.Rate() <= 0 || r.Hist.Quantile(0.99) <= 0 {
				t.Errorf("rate %v, p99 %v", r.Rate(), r.Hist.Quantile(0.99))
			}
			// The connections stay usable for another run.
			r, err = c.Run(context.Background(), Options{Callers: 3, Calls: 100})
			if err != nil || r.Calls != 100 {
				t.Errorf("second run: %d calls, %v", r.Calls, err)
			}
		})
	}
}

func TestRunDuration(t *testing.T) {
	for _, g := range Generators {
		t.Run(string(g), func(t *testing.T) {
			c, err := DialLoader(g, serveFake(t, &fakeRLS{}), 0)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			r, err := c.Run(context.Background(), Options{Duration: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if r.Calls == 0 || r.Errors != 0 || r.Elapsed < 200*time.Millisecond {
				t.Errorf("calls %d, errors %d (%v), elapsed %v", r.Calls, r.Errors, r.FirstErr, r.Elapsed)
			}
			if _, err := c.Run(context.Background(), Options{}); err == nil {
				t.Error("Run with neither Duration nor Calls: no error")
			}
		})
	}
}

func TestRunHangingServer(t *testing.T) {
	for _, g := range Generators {
		t.Run(string(g), func(t *testing.T) {
			c, err := DialLoader(g, serveFake(t, &fakeRLS{hang: true}), 1)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, err = c.Run(context.Background(), Options{Callers: 2, Calls: 10, Timeout: 100 * time.Millisecond})
			if err == nil || !strings.Contains(err.Error(), "no call completed") {
				t.Errorf("Run against a server that never answers: %v, want the watchdog's error", err)
			}
		})
	}
}

func TestDialLoaderUnknown(t *testing.T) {
	if _, err := DialLoader("ghz", "127.0.0.1:1", 1); err == nil {
		t.Error("DialLoader(ghz): no error")
	}
}

func TestRunMaxConcurrentStreams(t *testing.T) {
	// The server allows 3 streams per connection; the H2 generator's 8
	// callers on one connection take turns, and every call is answered.
	f := &fakeRLS{}
	c, err := DialLoader(H2, serveFake(t, f, grpc.MaxConcurrentStreams(3)), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.Run(context.Background(), Options{Callers: 8, Calls: 500})
	if err != nil {
		t.Fatal(err)
	}
	if r.Calls != 500 || r.Errors != 0 {
		t.Errorf("%d calls, %d errors (%v); want 500, 0", r.Calls, r.Errors, r.FirstErr)
	}
	if p := f.peak.Load(); p > 3 {
		t.Errorf("%d calls at once on the server, which allows 3", p)
	}
}

// TestCountCommands: every command of INFO commandstats counts but those a
// harness sends (INFO, CONFIG …, FLUSHALL).
func TestCountCommands(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=12,usec=300,usec_per_call=25.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_incrby:calls=5,usec=10,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=3,usec=90,usec_per_call=30.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_config|resetstat:calls=1,usec=5,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_flushall:calls=1,usec=5,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n"
	if n := countCommands(info); n != 17 {
		t.Errorf("countCommands: %d, want 17", n)
	}
}
