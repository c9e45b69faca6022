package serve

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/redisstore"
)

const togetherConfig = `domain: t
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: team
    rate_limit: {unit: minute, requests_per_unit: 7, algorithm: token-bucket, burst: 5}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: probe
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 6, algorithm: sliding-log}
`

// statuses renders a response: the overall code, and each status's code,
// remaining and reset.
func statuses(r *pb.RateLimitResponse) string {
	var b strings.Builder
	b.WriteString(r.OverallCode.String())
	for _, st := range r.Statuses {
		fmt.Fprintf(&b, " %s/%d/%v", st.Code, st.LimitRemaining, st.DurationUntilReset.AsDuration())
	}
	return b.String()
}

// A call with enforced and shadow descriptors is decided in one TakeEach
// when that gives what deciding them in turn gives (decideTogether, over
// Redis): on random calls, a server made to decide them together over a
// memstore answers exactly as one that decides them in turn, call by call,
// and the stores end in the same state.
func TestDecideTogetherMatchesInTurn(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(testenv.Seed(t), 5))
	dir := writeConfig(t, map[string]string{"t.yaml": togetherConfig})
	for trace := range 20 {
		clock := &fakeClock{t: t0}
		st1, st2 := memstore.New(memstore.WithClock(clock)), memstore.New(memstore.WithClock(clock))
		together := start(t, Options{Config: dir, Store: st1}, clock)
		inTurn := start(t, Options{Config: dir, Store: st2}, clock)
		// In memory a server decides in turn; this one may decide
		// together, as over Redis.
		if together.togetherMain || inTurn.togetherMain {
			t.Fatal("a memstore server decides together")
		}
		together.togetherMain = true
		for call := range 150 {
			clock.Set(clock.Now().Add(time.Duration(r.IntN(3000)) * time.Millisecond))
			var ds []*rlv3.RateLimitDescriptor
			for _, k := range []string{"user", "team", "trial", "probe"} {
				if r.IntN(2) == 0 {
					ds = append(ds, withHits(desc(fmt.Sprintf("%s=%d", k, r.IntN(2))), uint64(r.IntN(3))))
				}
			}
			if len(ds) == 0 {
				ds = append(ds, desc("user=0"))
			}
			r.Shuffle(len(ds), func(i, j int) { ds[i], ds[j] = ds[j], ds[i] })
			if call%4 == 3 {
				// sluice's HTTP API, whose answer has every field of the
				// decision and of each descriptor's.
				var parts []string
				for _, d := range ds {
					e := d.Entries[0]
					parts = append(parts, fmt.Sprintf(`[{"key": %q, "value": %q}]`, e.Key, e.Value))
				}
				body := fmt.Sprintf(`{"domain": "t", "descriptors": [%s], "hits_addend": %d}`, strings.Join(parts, ", "), r.IntN(3))
				ra, a := httpPost(t, together.base+"/v1/take", body)
				rb, b := httpPost(t, inTurn.base+"/v1/take", body)
				if ra.StatusCode != rb.StatusCode || a != b {
					t.Fatalf("trace %d call %d %s:\ntogether %d %s\nin turn  %d %s", trace, call, body, ra.StatusCode, a, rb.StatusCode, b)
				}
				continue
			}
			a, b := statuses(together.call(t, "t", ds...)), statuses(inTurn.call(t, "t", ds...))
			if a != b {
				t.Fatalf("trace %d call %d %v:\ntogether %s\nin turn  %s", trace, call, ds, a, b)
			}
		}
		// The state: a look at every key gives the same.
		for _, k := range []string{"user", "team", "trial", "probe"} {
			for v := range 2 {
				d := withHits(desc(fmt.Sprintf("%s=%d", k, v)), 0)
				if a, b := statuses(together.call(t, "t", d)), statuses(inTurn.call(t, "t", d)); a != b {
					t.Fatalf("trace %d, %s=%d at the end: together %s, in turn %s", trace, k, v, a, b)
				}
			}
		}
		together.stop()
		inTurn.stop()
	}
}

// Over Redis, a call with an enforced and a shadow descriptor is one
// script when both pass, and when the enforced one refuses; when only the
// shadow one refuses, that script spent nothing and the call takes the two
// steps it took before, three scripts in all.
func TestDecideTogetherRoundTrips(t *testing.T) {
	srv := redistest.Standalone(t)
	ctx := context.Background()
	c := srv.Client()
	clock := &fakeClock{t: t0}
	rs, err := redisstore.New(c, redisstore.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	ts := start(t, Options{Config: writeConfig(t, map[string]string{"t.yaml": togetherConfig}), Store: rs}, clock)
	scripts := func() int64 {
		t.Helper()
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, line := range strings.Split(info, "\n") {
			for _, cmd := range []string{"cmdstat_evalsha:", "cmdstat_eval:"} {
				if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
					// Scripts that ran: calls less the failed (NOSCRIPT
					// before a script is loaded) and the rejected.
					for _, f := range strings.Split(rest, ",") {
						k, v, _ := strings.Cut(f, "=")
						var x int64
						fmt.Sscanf(v, "%d", &x)
						switch k {
						case "calls":
							n += x
						case "failed_calls", "rejected_calls":
							n -= x
						}
					}
				}
			}
		}
		return n
	}
	call := func(ds ...*rlv3.RateLimitDescriptor) (string, int64) {
		t.Helper()
		before := scripts()
		got := codesOf(ts.call(t, "t", ds...))
		return got, scripts() - before
	}
	for i, want := range []struct {
		codes   string
		scripts int64
	}{
		{"OK: OK OK", 1}, {"OK: OK OK", 1}, {"OK: OK OK", 1}, // trial=x (shadow, 3 a minute) spends as the call passes
		{"OK: OK OK", 3},                 // trial=x is over: the script that found it, then in turn
		{"OVER_LIMIT: OVER_LIMIT OK", 1}, // user=x is over (4 a minute): refused in one script, nothing spent
	} {
		got, n := call(desc("user=x"), desc("trial=x"))
		if got != want.codes || n != want.scripts {
			t.Errorf("call %d: %s in %d scripts, want %s in %d", i+1, got, n, want.codes, want.scripts)
		}
	}
}
