package serve

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/internal/testsupport/redistest"
)

// sharedConfig: a per-user limit under a per-tenant one, decided together.
// Its windows are a day long, so that a test waits for a window to turn
// over (awayFromWindowEnd) once a day at most, not once an hour (up to 3
// minutes, which once doubled the package's time).
const sharedConfig = `domain: shared
descriptors:
  - key: tenant
    rate_limit: {unit: day, requests_per_unit: 150, name: tenant}
  - key: user
    rate_limit: {unit: day, requests_per_unit: 20, name: user}
`

// awayFromWindowEnd waits, if need be, so that a test's window of length
// window (aligned to the epoch, as envoy's are) does not end while it runs.
func awayFromWindowEnd(t *testing.T, window, need time.Duration) {
	now := time.Now()
	if left := now.Truncate(window).Add(window).Sub(now); left < need {
		t.Logf("waiting %v for the next %v window to start", left, window)
		time.Sleep(left + 100*time.Millisecond)
	}
}

// sharedCallers, sharedCallsEach and sharedUsers make runShared's load: 768
// calls over 10 users, so that with sharedConfig's limits (10 × 20 > 150)
// the tenant binds.
const sharedCallers, sharedCallsEach, sharedUsers = 64, 12, 10

// runShared makes sharedCallers concurrent callers, spread over procs, each
// make sharedCallsEach calls in domain "shared" with the descriptors descs
// gives for a user, and returns the calls answered OK, in all and per user.
func runShared(t *testing.T, procs []*proc, descs func(user string) []*rlv3.RateLimitDescriptor) (admitted int64, perUser map[string]int64) {
	t.Helper()
	perUser = map[string]int64{}
	var mu sync.Mutex
	var n atomic.Int64
	var wg sync.WaitGroup
	for c := range sharedCallers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := procs[c%len(procs)]
			for i := range sharedCallsEach {
				user := fmt.Sprintf("u%d", (c*sharedCallsEach+i)%sharedUsers)
				r, err := p.call(context.Background(), "shared", descs(user)...)
				if err != nil {
					t.Errorf("call: %v", err)
					return
				}
				if r.OverallCode == pb.RateLimitResponse_OK {
					n.Add(1)
					mu.Lock()
					perUser[user]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return n.Load(), perUser
}

// Four `sluice serve` processes on one redis-server, 64 concurrent callers
// spread over them: every budget is shared exactly, so they admit what one
// process with the memory store admits for the same calls.
func TestFourProcessesOneRedis(t *testing.T) {
	rs := redistest.Standalone(t)
	dir := writeConfig(t, map[string]string{"shared.yaml": sharedConfig})
	awayFromWindowEnd(t, 24*time.Hour, 2*time.Minute)
	run := func(procs []*proc) (int64, map[string]int64) {
		return runShared(t, procs, func(user string) []*rlv3.RateLimitDescriptor {
			return []*rlv3.RateLimitDescriptor{desc("tenant=acme"), desc("user=" + user)}
		})
	}
	var procs []*proc
	for range 4 {
		procs = append(procs, startProc(t, "--config", dir, "--store", "redis://"+rs.Addr()+"/0", "--prefix", "test4:"))
	}
	admitted, perUser := run(procs)
	one := startProc(t, "--config", dir)
	wantAdmitted, _ := run([]*proc{one})
	if admitted != 150 || wantAdmitted != 150 {
		t.Errorf("4 processes on one Redis admitted %d, one process in memory %d; want 150 (the tenant's limit) for both", admitted, wantAdmitted)
	}
	for u, n := range perUser {
		if n > 20 {
			t.Errorf("user %s admitted %d times, over its limit of 20", u, n)
		}
	}
	// What the processes admitted is what Redis counted: a look shows none left.
	r, err := procs[0].call(context.Background(), "shared", withHits(desc("tenant=acme"), 0))
	if err != nil || r.Statuses[0].LimitRemaining != 0 {
		t.Errorf("tenant after the run: %v %v, want 0 remaining", r, err)
	}
	for _, p := range procs {
		if _, err := p.stop(t, syscall.SIGTERM); err != nil {
			t.Errorf("exit: %v", err)
		}
	}
}

// Redis killed and restarted mid-load, under each failure policy: no
// panic, the policy's answers during the outage, normal decisions after.
func TestRedisOutage(t *testing.T) {
	t.Parallel()
	dir := writeConfig(t, map[string]string{"shared.yaml": sharedConfig})
	awayFromWindowEnd(t, 24*time.Hour, 2*time.Minute)
	for _, policy := range []string{"fail-closed", "fail-open", "local"} {
		t.Run(policy, func(t *testing.T) {
			rs := redistest.Standalone(t)
			p := startProc(t, "--config", dir, "--store", "redis://"+rs.Addr()+"/0", "--on-store-error", policy, "--store-timeout", "300ms")
			var phase atomic.Int32        // 0 up, 1 down, 2 back
			var counts [4][4]atomic.Int64 // per phase (3: the reconnection, not judged): ok, over, unavailable, other
			var other atomic.Value
			stop := load(8, func(g, i int) bool {
				ph := phase.Load()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				r, err := p.call(ctx, "shared", desc(fmt.Sprintf("user=g%d-%d", g, i%1000)))
				cancel()
				if ph != phase.Load() {
					return true // straddled a change
				}
				switch {
				case err == nil && r.OverallCode == pb.RateLimitResponse_OK:
					counts[ph][0].Add(1)
				case err == nil:
					counts[ph][1].Add(1)
				case status.Code(err) == codes.Unavailable:
					counts[ph][2].Add(1)
				default:
					counts[ph][3].Add(1)
					other.Store(err)
				}
				time.Sleep(time.Millisecond)
				return true
			})
			// Each phase lasts until its callers have made enough calls
			// (a busy machine is slow), at most 60s.
			settle := func(ph int, n int64) {
				for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
					if counts[ph][0].Load()+counts[ph][1].Load()+counts[ph][2].Load()+counts[ph][3].Load() >= n {
						return
					}
				}
			}
			settle(0, 50)
			phase.Store(3) // the calls on their way when Redis dies: not judged
			rs.Stop(t)
			time.Sleep(200 * time.Millisecond) // calls already sent settle
			phase.Store(1)
			settle(1, 16)
			phase.Store(3) // between: not counted
			rs.Start(t)
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) { // reconnection
				r, err := p.call(context.Background(), "shared", desc("user=probe"))
				if err == nil && r.OverallCode == pb.RateLimitResponse_OK && !strings.Contains(p.logText(), "panic") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no decision 30s after Redis came back: %v", err)
				}
			}
			time.Sleep(300 * time.Millisecond) // the local fallback's decisions give way to Redis's
			phase.Store(2)
			settle(2, 50)
			stop()
			c := func(ph, i int) int64 { return counts[ph][i].Load() }
			t.Logf("up: %d ok %d unavailable; down: %d ok %d over %d unavailable %d other; back: %d ok %d unavailable",
				c(0, 0), c(0, 2), c(1, 0), c(1, 1), c(1, 2), c(1, 3), c(2, 0), c(2, 2))
			if c(0, 0) == 0 || c(0, 2)+c(0, 3) != 0 {
				t.Errorf("before the outage: %d ok, %d failed", c(0, 0), c(0, 2)+c(0, 3))
			}
			if c(1, 3) != 0 {
				t.Errorf("during the outage, an unexpected error: %v", other.Load())
			}
			switch policy {
			case "fail-closed":
				if c(1, 2) == 0 || c(1, 0) != 0 {
					t.Errorf("fail-closed during the outage: %d UNAVAILABLE, %d OK; want only UNAVAILABLE", c(1, 2), c(1, 0))
				}
				if n := strings.Count(p.logText(), "the store could not decide"); n == 0 || int64(n) > c(1, 2) {
					t.Errorf("%d log lines for the store's %d failures; want some, at most one a second", n, c(1, 2))
				}
			default:
				if c(1, 0) == 0 || c(1, 2) != 0 {
					t.Errorf("%s during the outage: %d OK, %d UNAVAILABLE; want only OK", policy, c(1, 0), c(1, 2))
				}
			}
			if c(2, 0) == 0 || c(2, 2)+c(2, 3) != 0 {
				t.Errorf("after Redis came back: %d ok, %d failed; want recovery", c(2, 0), c(2, 2)+c(2, 3))
			}
			if _, err := p.stop(t, syscall.SIGTERM); err != nil {
				t.Errorf("exit: %v\n%s", err, p.logText())
			}
		})
	}
}

// `sluice serve --envoy-env` in envoyproxy/ratelimit's environment: its
// runtime directory, its Redis, its key prefix, its header names and its
// QUOTA_MODE, with the listen flags given on the command line winning.
func TestBinaryEnvoyEnv(t *testing.T) {
	rs := redistest.Standalone(t)
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "rl", "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "rl", "config", "gq.yaml"), []byte(globalQuotaConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "rl", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": rs.Addr(),
		"CACHE_KEY_PREFIX": "envoytest:", "LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_LIMIT_HEADER": "X-Limit",
		"QUOTA_MODE": "true", "LOG_LEVEL": "info", "USE_STATSD": "false",
	} {
		t.Setenv(k, v)
	}
	p := startProc(t, "--envoy-env")
	if !strings.HasPrefix(p.grpc, "127.0.0.1:") || !strings.HasPrefix(p.http, "127.0.0.1:") {
		t.Errorf("listeners %s %s: the command line's loopback addresses must win over envoy's 0.0.0.0", p.grpc, p.http)
	}
	var r *pb.RateLimitResponse
	for i, want := range []string{"OK: OK OK", "OK: OVER_LIMIT OK"} {
		var err error
		r, err = p.call(t.Context(), "gq", desc("user=a"), desc("other=x"))
		if err != nil || codesOf(r) != want {
			t.Fatalf("call %d: %v %v, want %s (QUOTA_MODE)", i, r, err, want)
		}
	}
	if len(r.ResponseHeadersToAdd) == 0 || r.ResponseHeadersToAdd[0].Key != "X-Limit" {
		t.Errorf("headers %v, want X-Limit first (LIMIT_LIMIT_HEADER)", r.ResponseHeadersToAdd)
	}
	keys, err := rs.Client().Keys(t.Context(), "envoytest:*").Result()
	if err != nil || len(keys) == 0 {
		t.Errorf("keys under CACHE_KEY_PREFIX in REDIS_URL's server: %v %v", keys, err)
	}
	if _, err := p.stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("exit after SIGTERM: %v\n%s", err, p.logText())
	}
}

// `sluice serve --store redis-sentinel://…` keeps its budgets in the master
// a Sentinel names, and after a failover in the promoted replica: a user's
// 20 calls a day are answered OK exactly 20 times across it (the calls
// before it replicated, WAIT), and no call fails once Sentinel has promoted
// the replica.
func TestBinarySentinel(t *testing.T) {
	t.Parallel()
	awayFromWindowEnd(t, 24*time.Hour, time.Minute)
	s := redistest.Sentinel(t)
	dir := writeConfig(t, map[string]string{"shared.yaml": sharedConfig})
	p := startProc(t, "--config", dir, "--store", "redis-sentinel://"+strings.Join(s.SentinelAddrs(), ",")+"/"+redistest.SentinelMaster, "--store-timeout", "300ms")
	ok, over := 0, 0
	call := func() codes.Code {
		r, err := p.call(t.Context(), "shared", desc("user=a"))
		switch {
		case err != nil:
			return status.Code(err)
		case r.OverallCode == pb.RateLimitResponse_OK:
			ok++
		default:
			over++
		}
		return codes.OK
	}
	for range 8 {
		if c := call(); c != codes.OK {
			t.Fatalf("a call before the failover: %v", c)
		}
	}
	s.WaitReplicated(t)
	s.Failover(t)
	// Sentinel names the promoted replica: go-redis dials it for the next
	// call (its retries: the dead master's connections are dropped).
	for over < 5 {
		if c := call(); c != codes.OK {
			t.Fatalf("a call after the promotion: %v (%d OK before it)\n%s", c, ok, p.logText())
		}
	}
	if ok != 20 {
		t.Errorf("%d calls answered OK under a limit of 20 a day, across a failover", ok)
	}
	if _, err := p.stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("exit after SIGTERM: %v\n%s", err, p.logText())
	}
}
