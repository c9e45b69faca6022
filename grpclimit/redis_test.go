package grpclimit_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/grpclimit"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/observe"
	"github.com/sluice-go/sluice/redisstore"
)

// TestRedisKilledMidRun: a real redis-server is stopped between calls; a
// store that fails open serves the calls (Degraded, without metadata), one
// that fails closed answers Unavailable with RetryInfo and no internal
// text; no panic either way, and the client side follows the same policy.
func TestRedisKilledMidRun(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy redisstore.FailurePolicy
	}{
		{"FailOpen", redisstore.FailOpen},
		{"FailClosed", redisstore.FailClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Standalone(t)
			client := srv.NewClient(t, func(o *redis.Options) { o.MaxRetries = -1; o.DialerRetries = 1 })
			store, err := redisstore.New(client, redisstore.WithFailurePolicy(tc.policy), redisstore.WithTimeout(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			lim := sluice.New(store)
			var logged atomic.Int64
			var outcomes [8]atomic.Int64
			s := mustNew(t, lim, []grpclimit.Policy{
				{Name: "per-ip", Limit: sluice.PerMinute(100)},
				{Name: "per-user", Limit: sluice.PerMinute(100), Key: grpclimit.Metadata("x-user")},
				{Name: "trial", Limit: sluice.PerMinute(1), Shadow: true},
			}, grpclimit.WithErrorLog(func(_ context.Context, _ string, err error) {
				if !errors.Is(err, sluice.ErrStoreUnavailable) {
					t.Errorf("logged %v, want a store outage", err)
				}
				logged.Add(1)
			}), grpclimit.WithObserver(observe.Func(func(e observe.Event) { outcomes[e.Outcome].Add(1) })))
			c, err := grpclimit.NewClient(lim, []grpclimit.Policy{{Name: "upstream", Limit: sluice.PerMinute(100)}})
			if err != nil {
				t.Fatal(err)
			}
			es := &echoServer{}
			conn := serve(t, s, es, clientOpts(c)...)
			ctx := withUser(context.Background(), "u1")
			for range 3 {
				if err := echo(ctx, conn); err != nil {
					t.Fatal(err)
				}
			}
			srv.Stop(t)
			const during = 4
			for i := range during {
				var md metadata.MD
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := echo(cctx, conn, grpc.Header(&md))
				cancel()
				if tc.policy == redisstore.FailOpen {
					if err != nil {
						t.Fatalf("call %d during the outage, failing open: %v", i, err)
					}
					if len(md.Get("ratelimit")) != 0 {
						t.Errorf("a degraded admission sends ratelimit %q", md.Get("ratelimit"))
					}
					continue
				}
				st, _ := status.FromError(err)
				if st.Code() != codes.Unavailable || st.Message() != "the rate limiter is unavailable" {
					t.Fatalf("call %d during the outage, failing closed: %v", i, err)
				}
				for _, leak := range []string{srv.Addr(), "dial", "refused", "redis", "sluice:", "connection", "timeout"} {
					if strings.Contains(strings.ToLower(st.Message()), strings.ToLower(leak)) {
						t.Errorf("status leaks %q: %s", leak, st.Message())
					}
				}
				// The client failed closed first: the call was never sent.
				if es.served.Load() != 3 {
					t.Errorf("served %d during the outage", es.served.Load())
				}
				var retry time.Duration
				for _, d := range st.Details() {
					if ri, ok := d.(*errdetails.RetryInfo); ok {
						retry = ri.GetRetryDelay().AsDuration()
					}
				}
				if retry != time.Second {
					t.Errorf("Unavailable's RetryInfo %v, want 1s", retry)
				}
			}
			cst := c.Stats()[0]
			switch tc.policy {
			case redisstore.FailOpen:
				st := s.Stats()
				if es.served.Load() != 3+during || st[0].Degraded != during || st[1].Degraded != during || st[2].Degraded != during || cst.Degraded != during {
					t.Errorf("fail open: served %d, stats %+v, client %+v", es.served.Load(), st, cst)
				}
				if outcomes[observe.Degraded].Load() != 3*during {
					t.Errorf("%d degraded events, want %d", outcomes[observe.Degraded].Load(), 3*during)
				}
			case redisstore.FailClosed:
				if cst.Errors != during {
					t.Errorf("fail closed: client stats %+v", cst)
				}
			}
			// The server side alone, failing closed: Unavailable, logged.
			if tc.policy == redisstore.FailClosed {
				direct := serve(t, s, es)
				err := echo(ctx, direct)
				if status.Code(err) != codes.Unavailable {
					t.Fatalf("server failing closed: %v", err)
				}
				if st := s.Stats(); st[0].Errors != 1 || logged.Load() < 1 || outcomes[observe.Error].Load() < 2 {
					t.Errorf("fail closed: stats %+v, %d logged, %d error events", st, logged.Load(), outcomes[observe.Error].Load())
				}
			}
			// Redis back: decisions are shared again.
			srv.Start(t)
			deadline := time.Now().Add(10 * time.Second)
			for {
				err := echo(ctx, conn)
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after restart: %v", err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// TestFailLocalRefuses: with Redis unreachable, a store that fails over to
// a local store decides in process, flagged Degraded; what it refuses is
// refused (before, every call went on: a FailLocal store failed open), and
// counted and reported as a refusal, not as a degraded admission.
func TestFailLocalRefuses(t *testing.T) {
	store, err := redisstore.New(redistest.Unreachable(t), redisstore.WithFailurePolicy(redisstore.FailLocal), redisstore.WithTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var outcomes [8]atomic.Int64
	s := mustNew(t, sluice.New(store), []grpclimit.Policy{{Name: "all", Limit: sluice.PerHour(2), Key: grpclimit.Static("all")}},
		grpclimit.WithObserver(observe.Func(func(e observe.Event) { outcomes[e.Outcome].Add(1) })))
	conn := serve(t, s, &echoServer{})
	var got []codes.Code
	for range 3 {
		got = append(got, status.Code(echo(context.Background(), conn)))
	}
	if got[0] != codes.OK || got[1] != codes.OK || got[2] != codes.ResourceExhausted {
		t.Errorf("codes %v, want OK, OK, ResourceExhausted", got)
	}
	degraded, denied := outcomes[observe.Degraded].Load(), outcomes[observe.Denied].Load()
	if st := s.Stats()[0]; st.Degraded != 2 || st.Refused != 1 || degraded != 2 || denied != 1 {
		t.Errorf("stats %+v, %d degraded and %d denied events: want 2 degraded admissions and 1 refusal", st, degraded, denied)
	}
}
