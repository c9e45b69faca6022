package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// TestConsolePollingCost: 10 console pages polling the live report (as the
// page does: once a second, the second since the last poll) cost the service
// less than 5% of its calls/s. A service under full load is bound by its CPU,
// so the share of its CPU the polls take is the share of calls/s they cost:
// the test measures, from the kernel's accounting of the server process
// (/proc/PID/stat), the CPU the server spends per second under 64 gRPC
// callers, and the CPU of one poll of a report full of traffic, and compares
// 10 polls a second with the first. CPU time, unlike calls/s, barely moves
// with what else the machine runs; still, only with SLUICE_TIMING=1.
func TestConsolePollingCost(t *testing.T) {
	testenv.SkipUnlessTiming(t, "10 polling pages cost the service under 5% of its CPU")
	if runtime.GOOS != "linux" {
		t.Skip("reads the server's CPU time from /proc")
	}
	bin := buildSluice(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(consoleConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	grpcAddr, httpAddr, pid := startServeProc(t, bin, "--config", dir)
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewRateLimitServiceClient(conn)

	// 64 callers for 4 s: the CPU the service spends per second of load.
	const loadFor = 4 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), loadFor)
	var calls atomic.Int64
	var wg sync.WaitGroup
	cpu0 := cpuTime(t, pid)
	for g := range 64 {
		wg.Go(func() {
			req := &pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{
				{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: string(rune('a' + g%26))}}}}}
			for ctx.Err() == nil {
				if _, err := client.ShouldRateLimit(ctx, req); err == nil {
					calls.Add(1)
				}
			}
		})
	}
	wg.Wait()
	cancel()
	loadCPU := cpuTime(t, pid) - cpu0
	perSecond := loadCPU / loadFor.Seconds()

	// The polls, right after: every rule has a full window of traffic.
	const polls = 500
	hc := &http.Client{}
	cpu1 := cpuTime(t, pid)
	for range polls {
		resp, err := hc.Get("http://" + httpAddr + "/console/api/live?since=" + strconv.FormatInt(time.Now().Unix()-1, 10))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("/console/api/live: %d", resp.StatusCode)
		}
	}
	perPoll := (cpuTime(t, pid) - cpu1) / polls
	share := 10 * perPoll / perSecond
	t.Logf("under 64 callers: %.0f calls/s, %.3f CPU-seconds per second; one poll %.0f µs of CPU; 10 pages polling: %.2f%% of the service's CPU",
		float64(calls.Load())/loadFor.Seconds(), perSecond, perPoll*1e6, 100*share)
	if calls.Load() == 0 || perSecond <= 0 {
		t.Fatalf("no load: %d calls, %.3f CPU-seconds", calls.Load(), loadCPU)
	}
	if share >= 0.05 {
		t.Errorf("10 polling pages take %.1f%% of the service's CPU under load, over 5%%", 100*share)
	}
}

// cpuTime is the CPU time, in seconds, process pid has used (user and
// system, from /proc/PID/stat; the kernel counts in ticks of 10 ms).
func cpuTime(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command's name, which is in parentheses and may
	// hold spaces: state is field 3, utime 14 and stime 15.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	return float64(ut+st) / 100 // USER_HZ
}
