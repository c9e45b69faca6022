package rls

import (
	"bytes"
	"context"
	"errors"
	"os"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-go/sluice/bench"
)

func TestHistQuantile(t *testing.T) {
	var h Hist
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	if h.Count() != 1000 {
		t.Fatalf("Count = %d, want 1000", h.Count())
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {0.999, 999 * time.Microsecond}, {1, 1000 * time.Microsecond}} {
		got := h.Quantile(c.q)
		if diff := got - c.want; diff < -c.want/50 || diff > c.want/50 {
			t.Errorf("Quantile(%v) = %v, want %v within 2%%", c.q, got, c.want)
		}
	}
	var small Hist
	for i := range 100 {
		small.Record(time.Duration(i))
	}
	small.Record(-1)
	if got := small.Quantile(0.5); got != 49 {
		t.Errorf("exact region: Quantile(0.5) = %d ns, want 49", got)
	}
	var empty Hist
	if got := empty.Quantile(0.99); got != 0 {
		t.Errorf("empty: Quantile = %v, want 0", got)
	}
	var m Hist
	m.Merge(&h)
	m.Merge(&small)
	if m.Count() != h.Count()+small.Count() {
		t.Errorf("Merge: Count = %d, want %d", m.Count(), h.Count()+small.Count())
	}
	var huge Hist
	huge.Record(time.Duration(1<<63 - 1))
	if got := huge.Quantile(1); got < time.Duration(1<<62) {
		t.Errorf("largest duration: Quantile = %v", got)
	}
}

func TestBucketsContiguous(t *testing.T) {
	// Every value falls in a bucket whose middle is within 1/64 of it, and
	// bucket indexes never decrease as values grow.
	prev := 0
	for _, d := range []uint64{0, 1, 127, 128, 129, 255, 256, 1000, 1 << 20, 1<<20 + 12345, 1 << 40, 1<<64 - 1} {
		i := bucket(d)
		if i < prev || i >= histSize {
			t.Fatalf("bucket(%d) = %d after %d (size %d)", d, i, prev, histSize)
		}
		prev = i
		mid := bucketMid(i)
		diff := int64(mid - d)
		if mid < d {
			diff = int64(d - mid)
		}
		if uint64(diff) > d/64+1 {
			t.Errorf("bucket(%d): middle %d too far", d, mid)
		}
	}
}

func TestOverallCode(t *testing.T) {
	for _, code := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp := &rlsv3.RateLimitResponse{
			Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
				Code:           code,
				CurrentLimit:   &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 10, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND},
				LimitRemaining: 3,
			}},
			OverallCode: code,
		}
		b, err := proto.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		got, err := overallCode(b)
		if err != nil || got != code {
			t.Errorf("overallCode = %v, %v; want %v", got, err, code)
		}
		if _, err := overallCode(b[:len(b)-1]); err == nil {
			t.Errorf("truncated response: no error")
		}
	}
	if got, err := overallCode(nil); err != nil || got != rlsv3.RateLimitResponse_UNKNOWN {
		t.Errorf("empty response: %v, %v; want UNKNOWN", got, err)
	}
}

func TestValues(t *testing.T) {
	vs := Values()
	if len(vs) != Keys+Keys/HotEvery {
		t.Fatalf("%d values, want %d", len(vs), Keys+Keys/HotEvery)
	}
	distinct := map[string]int{}
	for _, v := range vs {
		distinct[v]++
	}
	if len(distinct) != Keys+1 || distinct[HotValue] != Keys/HotEvery || vs[HotEvery] != HotValue {
		t.Errorf("%d distinct values, hot %d times, vs[%d] = %q", len(distinct), distinct[HotValue], HotEvery, vs[HotEvery])
	}
}

// TestSmoke runs the comparison for 2 s per server: envoyproxy/ratelimit
// and sluice serve over one redis-server, sluice serve over memory. Each
// must apply the configuration, answer every call, and have its CPU
// measured. Without redis-server it skips (fails with SLUICE_REQUIRE_REDIS=1);
// a server that cannot be built here (envoyproxy/ratelimit offline, a sluice
// without serve) is skipped with a message.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIPPING: -short")
	}
	rs, err := bench.StartRedis()
	if errors.Is(err, bench.ErrNoRedisServer) {
		if os.Getenv("SLUICE_REQUIRE_REDIS") == "1" {
			t.Fatalf("SLUICE_REQUIRE_REDIS=1: %v", err)
		}
		t.Skipf("SKIPPING: %v; install redis-server or set %s=host:port", err, bench.RedisEnv)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rs.Stop(); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	modDir, err := ModuleDir(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files, err := WriteConfig(dir)
	if err != nil {
		t.Fatal(err)
	}

	var ms []*Measurement
	measure := func(t *testing.T, s *Server, err error) {
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := s.Stop(); err != nil {
				t.Error(err)
			}
		})
		c, err := Dial(s.Addr, 1)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := Verify(ctx, c); err != nil {
			t.Fatalf("%s (%s): %v", s.Name, s.Store, err)
		}
		if err := FlushRedis(ctx, rs.Addr); err != nil {
			t.Fatal(err)
		}
		m, err := Measure(ctx, s, rs.Pid(), Options{Duration: 2 * time.Second}, 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
		if m.Errors > 0 || m.Calls == 0 {
			t.Errorf("%s (%s): %d calls, %d errors (first: %v); its output:\n%s", s.Name, s.Store, m.Calls, m.Errors, m.FirstErr, s.Log())
		}
		if m.Hist.Count() != uint64(m.Calls+m.Errors) {
			t.Errorf("%d latencies recorded for %d calls", m.Hist.Count(), m.Calls+m.Errors)
		}
		if m.CPUErr != nil && !errors.Is(m.CPUErr, errors.ErrUnsupported) {
			t.Errorf("CPU: %v", m.CPUErr)
		}
		if m.CPUErr == nil && m.ServerCPU <= 0 {
			t.Errorf("%s (%s): no server CPU measured over %d calls", s.Name, s.Store, m.Calls)
		}
	}

	t.Run("envoy", func(t *testing.T) {
		bin, err := BuildEnvoy(ctx, modDir, dir)
		if err != nil {
			t.Skipf("SKIPPING envoyproxy/ratelimit: it does not build here (offline without the module cache?): %v", err)
		}
		s, err := StartEnvoy(ctx, bin, dir, rs.Addr, files, nil)
		measure(t, s, err)
	})
	sluiceBin, sluiceErr := buildSluiceOnce(ctx)
	for _, store := range []string{"redis://" + rs.Addr, "memory"} {
		name := "sluice-redis"
		if store == "memory" {
			name = "sluice-memory"
		}
		t.Run(name, func(t *testing.T) {
			if errors.Is(sluiceErr, ErrNoServe) {
				t.Skipf("SKIPPING sluice serve: %v", sluiceErr)
			}
			if sluiceErr != nil {
				t.Fatal(sluiceErr)
			}
			s, err := StartSluice(ctx, sluiceBin, dir, files, store, nil)
			measure(t, s, err)
		})
	}
	var buf bytes.Buffer
	Table(&buf, ms)
	t.Logf("2 s per server (figures of a smoke run, not a benchmark):\n%s", buf.String())
}
