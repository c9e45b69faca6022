package grpclimit_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/grpclimit"
)

// critical picks the calls that carry x-critical.
func critical(ctx context.Context, _ string) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return len(md.Get("x-critical")) > 0
}

// TestPriorityClasses: a policy keeping 3 of 10 a minute for critical
// calls refuses the others once 7 are spent, while critical ones use the
// rest; each call's rate-limit metadata is its class's (q less the
// reserve, r what its class may still spend). Alone (a take with a
// reserve) and beside another policy (a composite whose part keeps it).
func TestPriorityClasses(t *testing.T) {
	api := grpclimit.Policy{Name: "api", Limit: sluice.PerMinute(10).WithAlgorithm(sluice.FixedWindow), Key: grpclimit.Static("all"), Headroom: 3, Critical: critical}
	user := grpclimit.Policy{Name: "user", Limit: sluice.PerMinute(100).WithAlgorithm(sluice.FixedWindow), Key: grpclimit.Static("u")}
	for name, ps := range map[string][]grpclimit.Policy{"alone": {api}, "composite": {api, user}} {
		t.Run(name, func(t *testing.T) {
			conn := serve(t, mustNew(t, frozen(), ps), &echoServer{})
			spent := 0
			call := func(crit bool, ok bool, r, q int) {
				t.Helper()
				ctx := context.Background()
				if crit {
					ctx = metadata.AppendToOutgoingContext(ctx, "x-critical", "1")
				}
				var md metadata.MD
				err := echo(ctx, conn, grpc.Header(&md))
				if (err == nil) != ok {
					t.Fatalf("critical %v after %d: %v, want allowed %v", crit, spent, err, ok)
				}
				if !ok {
					if _, subjects := details(t, err); !slices.Equal(subjects, []string{"api"}) {
						t.Fatalf("refusal names %v, want api only", subjects)
					}
					return
				}
				spent++
				wantPol := fmt.Sprintf(`"api";q=%d;w=60`, q)
				wantCur := fmt.Sprintf(`"api";r=%d;t=60`, r)
				if len(ps) == 2 {
					wantPol += `, "user";q=100;w=60`
					wantCur += fmt.Sprintf(`, "user";r=%d;t=60`, 100-spent)
				}
				if got := md.Get("ratelimit-policy"); len(got) != 1 || got[0] != wantPol {
					t.Fatalf("critical %v after %d: ratelimit-policy %q, want %q", crit, spent, got, wantPol)
				}
				if got := md.Get("ratelimit"); len(got) != 1 || got[0] != wantCur {
					t.Fatalf("critical %v after %d: ratelimit %q, want %q", crit, spent, got, wantCur)
				}
			}
			for i := range 7 {
				call(false, true, 6-i, 7)
			}
			call(false, false, 0, 7) // past its share: 3 are kept
			for i := range 3 {
				call(true, true, 2-i, 10)
			}
			call(true, false, 0, 10)
		})
	}
}

type criticalKey struct{}

// TestClientClasses: on a Client, a call of the lower class is refused
// (it cannot wait past its deadline) once the reserve is all that is left,
// with its class's wait, and a critical call takes the reserve.
func TestClientClasses(t *testing.T) {
	c, err := grpclimit.NewClient(frozen(), []grpclimit.Policy{{
		Name: "upstream", Limit: sluice.PerHour(3), Headroom: 1,
		Critical: func(ctx context.Context, _ string) bool { return ctx.Value(criticalKey{}) != nil },
	}})
	if err != nil {
		t.Fatal(err)
	}
	es := &echoServer{}
	conn := serve(t, nil, es, clientOpts(c)...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for range 2 {
		if err := echo(ctx, conn); err != nil {
			t.Fatal(err)
		}
	}
	if retry, _ := details(t, echo(ctx, conn)); retry != 20*time.Minute {
		t.Errorf("normal past its share: retry %v, want 20m (until 2 units are back)", retry)
	}
	crit := context.WithValue(ctx, criticalKey{}, true)
	if err := echo(crit, conn); err != nil {
		t.Fatalf("critical: %v", err)
	}
	if retry, _ := details(t, echo(crit, conn)); retry != 20*time.Minute {
		t.Errorf("critical with nothing left: retry %v, want 20m", retry)
	}
	if es.served.Load() != 3 {
		t.Errorf("served %d calls, want 3", es.served.Load())
	}
}
