package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-go/sluice/cmd/sluice/internal/browsertest"
)

// consoleConfig is the service's configuration in the test: a named rule
// per client address, a shadow rule and an unlimited one.
const consoleConfig = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 5, name: per_ip}
  - key: api
    value: v1
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 3, name: api_v1}
  - key: health
    rate_limit: {unlimited: true, name: health}
`

// buildSluice builds the command into a temporary directory.
func buildSluice(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to build sluice with")
	}
	bin := filepath.Join(t.TempDir(), "sluice")
	out, err := exec.Command(gobin, "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startServe runs `sluice serve` on free loopback ports until the test
// ends, and returns its gRPC and HTTP addresses.
func startServe(t *testing.T, bin string, args ...string) (grpcAddr, httpAddr string) {
	t.Helper()
	grpcAddr, httpAddr, _ = startServeProc(t, bin, args...)
	return grpcAddr, httpAddr
}

// startServeProc is startServe that also returns the process's id.
func startServeProc(t *testing.T, bin string, args ...string) (grpcAddr, httpAddr string, pid int) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-format", "json"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("sluice serve exited: %v", err)
			}
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			t.Error("sluice serve did not stop on SIGINT")
		}
	})
	addrs := make(chan [2]string, 1)
	go func() {
		s := bufio.NewScanner(stderr)
		for s.Scan() {
			var line struct{ Msg, GRPC, HTTP string }
			if json.Unmarshal(s.Bytes(), &line) == nil && line.Msg == "serving" {
				addrs <- [2]string{line.GRPC, line.HTTP}
			}
			t.Logf("serve: %s", s.Text())
		}
	}()
	select {
	case a := <-addrs:
		return a[0], a[1], cmd.Process.Pid
	case <-time.After(30 * time.Second):
		t.Fatal("sluice serve did not log its addresses")
	}
	return "", "", 0
}

// TestConsoleInTheBinary starts `sluice serve` and drives its console in a
// browser: the rules table is the configuration's, traffic sent through
// gRPC moves the live numbers by as much, a reload that fails shows its
// error, and the playground's totals are `sluice sim`'s.
func TestConsoleInTheBinary(t *testing.T) {
	ctx := browsertest.New(t, 3*time.Minute)
	bin := buildSluice(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "edge.yaml")
	if err := os.WriteFile(cfgPath, []byte(consoleConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	grpcAddr, httpAddr := startServe(t, bin, "--config", dir)
	base := "http://" + httpAddr

	// The rules table.
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#rules-table"))); err != nil {
		t.Fatal(err)
	}
	rows := run(t, ctx, chromedp.Evaluate[map[string][]string](`Object.fromEntries(Array.from(document.querySelectorAll("#rules-table tbody tr")).map(tr =>
		[tr.dataset.rule, Array.from(tr.querySelectorAll("td[data-k]")).map(td => td.innerText.trim())]))`))
	want := map[string][]string{
		"edge.per_ip": {"edge", "5", "1h (hour)", "5", "no", "no"},
		"edge.api_v1": {"edge", "3", "1m (minute)", "3", "yes", "no"},
		"edge.health": {"edge", "—", "—", "—", "no", "yes"},
	}
	if len(rows) != len(want) {
		t.Errorf("rules table %q, want the rules %v", rows, want)
	}
	for name, w := range want {
		r := rows[name]
		if len(r) != 9 {
			t.Errorf("rule %s: row %q", name, r)
			continue
		}
		if got := []string{r[0], r[4], r[5], r[6], r[7], r[8]}; fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("rule %s: domain, rate, period, burst, shadow, unlimited %q, want %q", name, got, w)
		}
	}
	waitFor(t, ctx, `Number(document.body.dataset.livePolls || 0) >= 1`)

	// Traffic through gRPC: 9 calls of one address against 5 an hour.
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewRateLimitServiceClient(conn)
	var ok, over int64
	for range 9 {
		resp, err := client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{
			{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.7"}}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		switch resp.OverallCode {
		case pb.RateLimitResponse_OK:
			ok++
		case pb.RateLimitResponse_OVER_LIMIT:
			over++
		}
	}
	if ok+over != 9 || over == 0 {
		t.Fatalf("%d OK and %d OVER_LIMIT of 9 calls", ok, over)
	}
	waitFor(t, ctx, fmt.Sprintf(`document.querySelector('#live-table tr[data-rule="edge.per_ip"] td[data-k="allowed"]').innerText == "%d" &&
		document.querySelector('#live-table tr[data-rule="edge.per_ip"] td[data-k="denied"]').innerText == "%d"`, ok, over))
	// The chart sums every rule: only per_ip had traffic.
	waitFor(t, ctx, fmt.Sprintf(`document.querySelector('#live-chart polyline[data-outcome="allowed"]').dataset.total == "%d" &&
		document.querySelector('#live-chart polyline[data-outcome="denied"]').dataset.total == "%d"`, ok, over))
	waitFor(t, ctx, fmt.Sprintf(`Array.from(document.querySelectorAll("#top-table tbody tr")).some(tr =>
		tr.cells[0].innerText == "edge.per_ip" && tr.cells[1].innerText == "remote_address=10.0.0.7" && tr.cells[2].innerText == "%d")`, over))
	browsertest.Screenshot(t, ctx, "live")

	// The playground: the rule per_ip with sim's scenario, against the
	// binary's own `sluice sim`.
	err = chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`button.try[data-rule="edge.per_ip"]`)),
		chromedp.Focus(chromedp.CSS("#sim-run")),
		chromedp.KeyEvent(kb.Enter),
	)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, `Number(document.body.dataset.simRuns || 0) >= 1 && document.querySelector("#sim-totals")`)
	got := run(t, ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#sim-totals tbody tr")).map(tr =>
		[tr.dataset.algorithm].concat(Array.from(tr.querySelectorAll("td[data-k]")).slice(0, 3).map(td => td.innerText)).join(" "))`))
	out, err := exec.Command(bin, "sim", "--no-color", "--limit", "5/1h", "--burst", "5").CombinedOutput()
	if err != nil {
		t.Fatalf("sluice sim: %v\n%s", err, out)
	}
	var fromSim []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 7 && f[1] == "admitted" && f[3] == "denied" && f[5] == "delayed" {
			fromSim = append(fromSim, strings.Join([]string{f[0], f[2], f[6], f[4]}, " ")) // admitted, delayed, denied
		}
	}
	if strings.Join(got, "\n") != strings.Join(fromSim, "\n") || len(got) != 7 {
		t.Errorf("the playground's totals (admitted, delayed, denied)\n%s\n`sluice sim --limit 5/1h --burst 5`'s\n%s", strings.Join(got, "\n"), strings.Join(fromSim, "\n"))
	}

	// A reload that fails: the error is shown, the rules stay.
	if err := os.WriteFile(cfgPath, []byte("domain: edge\ndescriptors:\n  - key: [unclosed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var v struct {
			LastError string `json:"last_error"`
		}
		resp, err := http.Get(base + "/console/api/config")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if json.Unmarshal(b, &v) == nil && v.LastError != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no load error after a bad config was written: %s", b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#config-error"))); err != nil {
		t.Fatal(err)
	}
	if msg := run(t, ctx, chromedp.Evaluate[string](`document.getElementById("config-error-text").innerText`)); !strings.Contains(msg, "edge.yaml") {
		t.Errorf("the error shown: %q", msg)
	}
	if n := run(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("#rules-table tbody tr[data-rule]").length`)); n != 3 {
		t.Errorf("%d rules shown after a failed reload, want the 3 in use", n)
	}
	browsertest.Screenshot(t, ctx, "reload-error")
}

func run[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func waitFor(t *testing.T, ctx context.Context, js string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](js, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("waiting for %s: %v", js, err)
	}
}
