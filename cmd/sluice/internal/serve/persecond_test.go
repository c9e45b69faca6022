package serve

import (
	"context"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/memstore"
)

const perSecondConfig = `domain: api
descriptors:
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: burst
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: token-bucket, burst: 2}
`

// --store-per-second (envoy's REDIS_PERSECOND): the limits counted per
// second (unit second, envoy's window) are kept in the second store, the
// others in the first; a call with both spends in each only when both
// pass, and a refused call spends nothing in either.
func TestPerSecondStore(t *testing.T) {
	clock := &fakeClock{t: t0}
	main, sec := memstore.New(memstore.WithClock(clock)), memstore.New(memstore.WithClock(clock))
	ts := start(t, Options{Config: writeConfig(t, map[string]string{"api.yaml": perSecondConfig}), Store: main, PerSecondStore: sec}, clock)

	ts.call(t, "api", desc("ip=1"))
	if main.Len() != 0 || sec.Len() != 1 {
		t.Fatalf("a per-second limit: %d keys in the store, %d in the per-second store; want 0 and 1", main.Len(), sec.Len())
	}
	ts.call(t, "api", desc("user=a"), desc("burst=b")) // a token bucket is not envoy's per-second window
	if main.Len() != 2 || sec.Len() != 1 {
		t.Fatalf("an hourly limit and a bucket: %d keys in the store, %d in the per-second store; want 2 and 1", main.Len(), sec.Len())
	}

	// ip=1 has 1 left this second, user=b 3 this hour.
	r := ts.call(t, "api", desc("ip=1"), desc("user=b"))
	want(t, "both pass: ip", r.Statuses[0], ok, 0, 2, second)
	want(t, "both pass: user", r.Statuses[1], ok, 2, 3, hour)
	// The per-second part refuses: the hourly part only looks.
	r = ts.call(t, "api", desc("ip=1"), desc("user=b"))
	if r.OverallCode != over {
		t.Fatalf("ip over its second: %v, want OVER_LIMIT", r.OverallCode)
	}
	want(t, "ip refuses", r.Statuses[0], over, 0, 2, second)
	want(t, "user only looked", r.Statuses[1], ok, 2, 3, hour)
	// The hourly part refuses: the per-second part is given back.
	for range 2 {
		ts.call(t, "api", desc("user=c"))
	}
	ts.call(t, "api", desc("user=c")) // the third: 0 left
	r = ts.call(t, "api", desc("ip=2"), desc("user=c"))
	if r.OverallCode != over {
		t.Fatalf("user over its hour: %v, want OVER_LIMIT", r.OverallCode)
	}
	want(t, "ip given back", r.Statuses[0], ok, 2, 2, second)
	want(t, "user refuses", r.Statuses[1], over, 0, 3, hour)
	r = ts.call(t, "api", desc("ip=2"))
	want(t, "ip after the refused call", r.Statuses[0], ok, 1, 2, second)
}

// The binary with --store-per-second over two redis-servers: the
// per-second keys are in the second, the others in the first, and a call
// the user's limit refuses gives the per-second units back there. The
// user's limit counts per day here, not per hour, so that the test waits
// for its window to turn over near midnight UTC only (a run once waited
// 54 s for the hour).
func TestBinaryPerSecondStore(t *testing.T) {
	first, second := redistest.Standalone(t), redistest.Standalone(t)
	awayFromWindowEnd(t, 24*time.Hour, time.Minute)
	daily := strings.Replace(perSecondConfig, "{unit: hour, requests_per_unit: 3}", "{unit: day, requests_per_unit: 3}", 1)
	if daily == perSecondConfig {
		t.Fatal("perSecondConfig has no hourly limit of 3 to count per day")
	}
	p := startProc(t, "--config", writeConfig(t, map[string]string{"api.yaml": daily}),
		"--store", "redis://"+first.Addr(), "--store-per-second", "redis://"+second.Addr())
	ctx := context.Background()
	codes := func(ds ...*rlv3.RateLimitDescriptor) string {
		t.Helper()
		r, err := p.call(ctx, "api", ds...)
		if err != nil {
			t.Fatal(err)
		}
		return codesOf(r)
	}
	for range 3 {
		codes(desc("user=a"))
	}
	// Keep to one second: the per-second window must not turn over.
	for time.Now().Nanosecond() > 500_000_000 {
		time.Sleep(10 * time.Millisecond)
	}
	if got := codes(desc("ip=1"), desc("user=a")); got != "OVER_LIMIT: OK OVER_LIMIT" {
		t.Errorf("user over its day: %s, want OVER_LIMIT: OK OVER_LIMIT", got)
	}
	r, err := p.call(ctx, "api", withHits(desc("ip=1"), 0))
	if err != nil || r.Statuses[0].LimitRemaining != 2 {
		t.Errorf("ip after the refused call: %v %v, want 2 left (given back in the per-second Redis)", r, err)
	}
	if got := codes(desc("ip=1")); got != "OK: OK" {
		t.Errorf("ip alone: %s, want OK", got)
	}
	keys := func(s *redistest.Server) int64 {
		n, err := s.Client().DBSize(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if a, b := keys(first), keys(second); a != 1 || b != 1 {
		t.Errorf("keys: %d in --store, %d in --store-per-second; want 1 (user=a) and 1 (ip=1)", a, b)
	}
}
