package serve

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
)

// The tests of the limits table's rows that a request meets (their names
// are the rows' Test): each sends the default cap, which passes, and the
// cap + 1, which is refused with a message that names the row and the flag
// that raises it.

// capRefusal is the part of a refusal's message that names row.
func capRefusal(row *limits.Row) string {
	d := limits.Defaults()
	return "over the service's limit " + row.Name + " of " + row.Format(d.Get(row))
}

// rpc calls ShouldRateLimit on ts with the descriptors ds of domain test
// and checks the refusal: none when refusedBy is nil, else
// INVALID_ARGUMENT naming the row and its flag.
func rpc(t *testing.T, ts *testServer, refusedBy *limits.Row, ds ...*rlv3.RateLimitDescriptor) {
	t.Helper()
	_, err := ts.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "test", Descriptors: ds})
	checkRefusal(t, "gRPC", refusedBy, status.Code(err) == codes.InvalidArgument, err)
}

// checkRefusal checks what a call answered (refused, err) against the row
// that should refuse it (nil: none).
func checkRefusal(t *testing.T, what string, row *limits.Row, refused bool, err error) {
	t.Helper()
	switch {
	case row == nil && err != nil:
		t.Errorf("%s at the cap: %v, want it to pass the bounds", what, err)
	case row != nil && !refused:
		t.Errorf("%s at the cap + 1: %v, want it refused by %s", what, err, row.Name)
	case row != nil && (!strings.Contains(err.Error(), capRefusal(row)) || !strings.Contains(err.Error(), row.Flag())):
		t.Errorf("%s at the cap + 1: %v, want it to name %q and %s", what, err, capRefusal(row), row.Flag())
	}
}

// post posts body to path on ts and checks the answer: code when the row
// is nil, else 400 naming the row and its flag.
func post(t *testing.T, ts *testServer, path, body string, code int, row *limits.Row) string {
	t.Helper()
	resp, out := httpPost(t, ts.base+path, body)
	if row == nil {
		if resp.StatusCode != code {
			t.Errorf("%s %.200s: %d %s, want %d", path, body, resp.StatusCode, out, code)
		}
		return out
	}
	checkRefusal(t, path, row, resp.StatusCode == http.StatusBadRequest, fmt.Errorf("%d %s", resp.StatusCode, out))
	return out
}

func TestRequestBytesCap(t *testing.T) {
	ts, _ := startTest(t, Options{})
	n := int(limits.RequestBytes.Default)
	// A body of the cap exactly passes the bound (the JSON is then read).
	pad := func(size int) string {
		b := `{"domain": "test", "descriptors": [[{"key": "key1", "value": "value1"}]]}`
		return b + strings.Repeat(" ", size-len(b))
	}
	post(t, ts, "/v1/take", pad(n), 200, nil)
	resp, out := httpPost(t, ts.base+"/v1/take", pad(n+1))
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(out, capRefusal(limits.RequestBytes)) || !strings.Contains(out, limits.RequestBytes.Flag()) {
		t.Errorf("a body of the cap + 1: %d %s, want 413 naming the cap and its flag", resp.StatusCode, out)
	}
	// gRPC refuses a message over it itself (RESOURCE_EXHAUSTED).
	_, err := ts.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: strings.Repeat("d", n), Descriptors: []*rlv3.RateLimitDescriptor{desc("a=b")}})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a gRPC message over the cap: %v, want ResourceExhausted", err)
	}
}

func TestDescriptorsCap(t *testing.T) {
	ts, _ := startTest(t, Options{})
	many := func(n int) []*rlv3.RateLimitDescriptor {
		ds := make([]*rlv3.RateLimitDescriptor, n)
		for i := range ds {
			ds[i] = desc(fmt.Sprintf("d%d", i))
		}
		return ds
	}
	rpc(t, ts, nil, many(int(limits.Descriptors.Default))...)
	rpc(t, ts, limits.Descriptors, many(int(limits.Descriptors.Default)+1)...)
}

func TestEntriesCap(t *testing.T) {
	ts, _ := startTest(t, Options{})
	entries := func(n int) *rlv3.RateLimitDescriptor {
		kvs := make([]string, n)
		for i := range kvs {
			kvs[i] = fmt.Sprintf("k%d=v", i)
		}
		return desc(kvs...)
	}
	rpc(t, ts, nil, entries(int(limits.Entries.Default)))
	rpc(t, ts, limits.Entries, entries(int(limits.Entries.Default)+1))
}

func TestEntryBytesCap(t *testing.T) {
	ts, _ := startTest(t, Options{})
	n := int(limits.EntryBytes.Default)
	rpc(t, ts, nil, desc("k="+strings.Repeat("v", n)))
	rpc(t, ts, limits.EntryBytes, desc("k="+strings.Repeat("v", n+1)))
	rpc(t, ts, limits.EntryBytes, desc(strings.Repeat("k", n+1)))
	_, err := ts.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: strings.Repeat("d", n+1), Descriptors: []*rlv3.RateLimitDescriptor{desc("a=b")}})
	checkRefusal(t, "a domain", limits.EntryBytes, status.Code(err) == codes.InvalidArgument, err)
}

// A descriptor's keys and values together, and the key form's key: a
// descriptor of entries each within entry-bytes whose sum is over
// key-bytes is refused before any key is built of it (issue: 32 entries of
// 1 KiB made 32 KiB store keys).
func TestKeyBytesCap(t *testing.T) {
	ts, _ := startTest(t, Options{})
	n := int(limits.KeyBytes.Default)
	half := strings.Repeat("v", n/2-1)
	rpc(t, ts, nil, desc("a="+half, "b="+half))                 // 2 × (1 + n/2 − 1) = n
	rpc(t, ts, limits.KeyBytes, desc("a="+half+"v", "b="+half)) // n + 1
	big := make([]string, limits.Entries.Default)
	for i := range big {
		big[i] = fmt.Sprintf("k%d=%s", i, strings.Repeat("v", 1000))
	}
	rpc(t, ts, limits.KeyBytes, desc(big...)) // the red team's 32 entries of 1 KB
	post(t, ts, "/v1/take", fmt.Sprintf(`{"key": %q, "limit": "10/1s"}`, strings.Repeat("k", n)), 200, nil)
	post(t, ts, "/v1/take", fmt.Sprintf(`{"key": %q, "limit": "10/1s"}`, strings.Repeat("k", n+1)), 0, limits.KeyBytes)
	post(t, ts, "/v1/acquire", fmt.Sprintf(`{"key": %q, "limit": 2}`, strings.Repeat("k", n+1)), 0, limits.KeyBytes)
}

func TestUnitsCap(t *testing.T) {
	ts, _ := startTest(t, Options{})
	n := limits.Units.Default
	post(t, ts, "/v1/take", fmt.Sprintf(`{"key": "k", "limit": "%d/1s"}`, n), 200, nil)
	post(t, ts, "/v1/take", fmt.Sprintf(`{"key": "k", "limit": "%d/1s"}`, n+1), 0, limits.Units)
	post(t, ts, "/v1/take", fmt.Sprintf(`{"key": "k", "limit": "1/1us token-bucket burst %d"}`, n+1), 0, limits.Units)
	post(t, ts, "/v1/take", fmt.Sprintf(`{"key": "debt", "limit": "1/1us debt %d"}`, n), 200, nil)
	post(t, ts, "/v1/take", fmt.Sprintf(`{"key": "k", "limit": "1/1us debt %d"}`, n+1), 0, limits.Units)
	post(t, ts, "/v1/acquire", fmt.Sprintf(`{"key": "k", "limit": %d}`, n), 200, nil)
	post(t, ts, "/v1/acquire", fmt.Sprintf(`{"key": "k", "limit": %d}`, n+1), 0, limits.Units)
	// A limit override in a configured domain is a limit of the caller's.
	rpc(t, ts, nil, withLimit(desc("key1=o"), uint32(n), typev3.RateLimitUnit_HOUR))
	rpc(t, ts, limits.Units, withLimit(desc("key1=o"), uint32(n+1), typev3.RateLimitUnit_HOUR))
	// A charge's units, which no capacity bounds: by key, by descriptors,
	// a charge rule's hits over gRPC, a settle's estimate and actual.
	post(t, ts, "/v1/charge", fmt.Sprintf(`{"key": "c", "limit": "1/1s debt 5", "cost": %d}`, n), 200, nil)
	post(t, ts, "/v1/charge", fmt.Sprintf(`{"key": "c", "limit": "1/1s debt 5", "cost": %d}`, n+1), 0, limits.Units)
	post(t, ts, "/v1/charge", fmt.Sprintf(`{"domain": "test", "hits_addend": %d, "descriptors": [[{"key": "key1", "value": "c"}]]}`, n), 200, nil)
	post(t, ts, "/v1/charge", fmt.Sprintf(`{"domain": "test", "hits_addend": %d, "descriptors": [[{"key": "key1", "value": "c"}]]}`, n+1), 0, limits.Units)
	for _, f := range []string{`"estimate": %d, "actual": 1`, `"estimate": 1, "actual": %d`} {
		settle := `{"key": "c", "limit": "1/1s debt 5", "take": {"allowed": true}, ` + f + `}`
		post(t, ts, "/v1/settle", fmt.Sprintf(settle, n), 200, nil)
		post(t, ts, "/v1/settle", fmt.Sprintf(settle, n+1), 0, limits.Units)
	}
	cs, _ := startCharge(t, Options{})
	for _, c := range []struct {
		hits uint64
		row  *limits.Row
	}{{uint64(n), nil}, {uint64(n + 1), limits.Units}} {
		_, err := cs.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "llm", Descriptors: []*rlv3.RateLimitDescriptor{withHits(desc("api_key=c"), c.hits)}})
		checkRefusal(t, "a charge rule's hits over gRPC", c.row, status.Code(err) == codes.InvalidArgument, err)
	}
}

// The time a caller's limit keeps its key: a take's refill (its window; a
// bucket's burst at its rate), a limit override's unit.
func TestWindowCap(t *testing.T) {
	ts, _ := startTest(t, Options{})
	day := time.Duration(limits.Window.Default)
	post(t, ts, "/v1/take", fmt.Sprintf(`{"key": "k", "limit": "10/%dus"}`, day.Microseconds()), 200, nil)
	post(t, ts, "/v1/take", fmt.Sprintf(`{"key": "k", "limit": "10/%dus"}`, day.Microseconds()+1), 0, limits.Window)
	post(t, ts, "/v1/take", `{"key": "k", "limit": "1/1h token-bucket burst 25"}`, 0, limits.Window) // refills in 25h
	rpc(t, ts, nil, withLimit(desc("key1=o"), 7, typev3.RateLimitUnit_DAY))
	rpc(t, ts, limits.Window, withLimit(desc("key1=o"), 7, typev3.RateLimitUnit_MONTH))
}

// A lease's lifetime by key (issue: "312500h" was taken, its Redis key
// given a TTL of 1,125,000,001 s and every later acquire a Retry-After as
// long).
func TestLifetimeCap(t *testing.T) {
	ts, _ := startTest(t, Options{})
	life := time.Duration(limits.Lifetime.Default)
	post(t, ts, "/v1/acquire", fmt.Sprintf(`{"key": "k", "limit": 2, "lifetime": %q}`, life), 200, nil)
	post(t, ts, "/v1/acquire", fmt.Sprintf(`{"key": "k", "limit": 2, "lifetime": %q}`, life+time.Microsecond), 0, limits.Lifetime)
	post(t, ts, "/v1/acquire", `{"key": "exports:acme", "limit": 2, "units": 2, "lifetime": "312500h"}`, 0, limits.Lifetime)
	// A rules file's concurrency lifetime: the cap loads, the cap + 1 µs
	// is a load error.
	for _, c := range []struct {
		life time.Duration
		row  *limits.Row
	}{{life, nil}, {life + time.Microsecond, limits.Lifetime}} {
		_, err := CheckConfig(Options{Config: writeConfig(t, map[string]string{"jobs.yaml": fmt.Sprintf("domain: jobs\ndescriptors:\n  - key: tenant\n    concurrency: {max: 3, lifetime: %s}\n", c.life)})})
		checkRefusal(t, "a rules file's lifetime", c.row, err != nil, err)
	}
}

// Raised caps (--limit) are the ones enforced.
func TestLimitsRaised(t *testing.T) {
	ts, _ := startTest(t, Options{Limits: limits.Table{Lifetime: 48 * time.Hour, Units: 10}})
	post(t, ts, "/v1/acquire", `{"key": "k", "limit": 2, "lifetime": "48h"}`, 200, nil)
	out := post(t, ts, "/v1/acquire", `{"key": "k", "limit": 11}`, 400, nil)
	if !strings.Contains(out, "over the service's limit units of 10") {
		t.Errorf("a limit of 11 under --limit units=10: %s", out)
	}
}

// Without Options.KeyForm the calls by key are refused, whatever they ask,
// and say how to turn them on; the descriptor form is unchanged.
func TestKeyFormOff(t *testing.T) {
	o := Options{Config: writeConfig(t, map[string]string{"test.yaml": testConfig})}
	o.GRPCAddr, o.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	defer func() { cancel(); <-done }()
	base := "http://" + s.HTTPAddr().String()
	for _, c := range []struct{ path, body string }{
		{"/v1/take", `{"key": "k", "limit": "10/1s"}`},
		{"/v1/acquire", `{"key": "k", "limit": 2}`},
		{"/v1/release", `{"key": "k", "limit": 2, "lease": "5"}`},
		{"/v1/extend", `{"key": "k", "limit": 2, "lease": "5"}`},
	} {
		resp, out := httpPost(t, base+c.path, c.body)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(out, "--key-form") {
			t.Errorf("%s by key without KeyForm: %d %s, want 403 naming --key-form", c.path, resp.StatusCode, out)
		}
	}
	resp, out := httpPost(t, base+"/v1/take", `{"domain": "test", "descriptors": [[{"key": "key1", "value": "value1"}]]}`)
	if resp.StatusCode != 200 {
		t.Errorf("/v1/take by descriptors without KeyForm: %d %s", resp.StatusCode, out)
	}
}

// liveHeap is the heap in use once the collector has run.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Keys of limit overrides whose windows have ended leave memory (issue:
// 15,000 per-second overrides of 32 entries of 1 KB took RSS to 2.45 GB,
// and the first 3,000 still held 229 MB of live heap after GC, long after
// their seconds ended). A descriptor is now at most key-bytes, and the
// service sweeps its memory store on a timer, so that what a burst of
// keys holds leaves once their windows end, whatever comes after: 3,000
// overrides of 2 KiB hold about 9 MB until their second ends, and less
// than 1 MB after the sweep (before the sweep, all of it stayed).
func TestOverrideKeysLeave(t *testing.T) {
	ts, clock := startTest(t, Options{})
	before := liveHeap()
	const n = 3000
	for i := range n {
		d := withLimit(desc(fmt.Sprintf("k0=%d%s", i, strings.Repeat("v", 1000)), "k1="+strings.Repeat("v", 1000)), 100, typev3.RateLimitUnit_SECOND)
		if _, err := ts.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "test", Descriptors: []*rlv3.RateLimitDescriptor{d}}); err != nil {
			t.Fatal(err)
		}
	}
	held := int64(liveHeap()) - int64(before)
	clock.Set(clock.Now().Add(2 * time.Second)) // every second has ended
	ctx, cancel := context.WithCancel(context.Background())
	swept := make(chan struct{})
	go func() { ts.sweepStores(ctx, time.Millisecond); close(swept) }()
	time.Sleep(50 * time.Millisecond)
	cancel()
	<-swept
	left := int64(liveHeap()) - int64(before)
	t.Logf("%d overrides of 2 KiB: %d bytes live while their second lasts, %d after it ended and the store swept", n, held, left)
	if held < n*2048 {
		t.Fatalf("%d bytes live for %d keys of 2 KiB: the test does not see the keys it made", held, n)
	}
	if left > 1<<20 {
		t.Errorf("%d bytes still live after the sweep, want under 1 MiB", left)
	}
}

// envoy's per-rule series (--envoy-stats) are bounded by stat-series: a
// detailed_metric rule names a series by each value sent; the cap's values
// have theirs, the cap + 1'st is not counted in them (its call is decided
// all the same).
func TestStatSeriesCap(t *testing.T) {
	dir := writeConfig(t, map[string]string{"d.yaml": "domain: d\ndescriptors:\n  - key: u\n    detailed_metric: true\n    rate_limit: {unit: hour, requests_per_unit: 3}\n"})
	const cap = 5
	ts := start(t, Options{Config: dir, EnvoyStats: true, Limits: limits.Table{StatSeries: cap}}, &fakeClock{t: t0})
	series := func() int {
		return strings.Count(envoySeriesLines(t, ts), "ratelimit_service_rate_limit_total_hits{")
	}
	for i := range cap {
		ts.call(t, "d", desc(fmt.Sprintf("u=v%d", i)))
	}
	if n := series(); n != cap {
		t.Fatalf("%d total_hits series after %d values, want %d", n, cap, cap)
	}
	if r := ts.call(t, "d", desc(fmt.Sprintf("u=v%d", cap))); r.OverallCode != pb.RateLimitResponse_OK {
		t.Errorf("the cap + 1'st value: %v, want it decided (OK)", r.OverallCode)
	}
	if n := series(); n != cap {
		t.Errorf("%d total_hits series after the cap + 1'st value, want %d", n, cap)
	}
}
