package serve

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cmd/sluice/internal/procs"
)

// gomaxprocs reads the process's GOMAXPROCS off its /metrics.
func (p *proc) gomaxprocs(t *testing.T) string {
	t.Helper()
	code, body := httpGet(t, "http://"+p.http+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, "go_sched_gomaxprocs_threads "); ok {
			return v
		}
	}
	t.Fatalf("/metrics has no go_sched_gomaxprocs_threads:\n%s", body)
	return ""
}

// --gomaxprocs: a number is fixed; auto (the default) goes down to one P
// after an idle hold, and says so in the debug log; GOMAXPROCS in the
// environment turns auto off.
func TestBinaryGOMAXPROCS(t *testing.T) {
	if !procs.Supported() {
		t.Skipf("--gomaxprocs auto cannot read the process's CPU time on %s", runtime.GOOS)
	}
	fixed := startProc(t, "--gomaxprocs", "1")
	if got := fixed.gomaxprocs(t); got != "1" {
		t.Errorf("--gomaxprocs 1: go_sched_gomaxprocs_threads %s, want 1", got)
	}
	if runtime.NumCPU() < 2 {
		t.Skipf("one CPU: auto has nothing to go down from")
	}
	auto := startProc(t, "--log-level", "debug")
	ceiling := fmt.Sprint(runtime.NumCPU())
	if got := auto.gomaxprocs(t); got != ceiling {
		t.Logf("auto at start: %s Ps (the CPUs: %s; a cgroup limit may set fewer)", got, ceiling)
		ceiling = got
	}
	t.Setenv("GOMAXPROCS", ceiling)
	env := startProc(t, "--log-level", "debug")
	deadline := time.Now().Add(procs.MinHold + 5*time.Second)
	for auto.gomaxprocs(t) != "1" && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if got := auto.gomaxprocs(t); got != "1" {
		t.Fatalf("auto, idle for %v: %s Ps, want 1\n%s", procs.MinHold+5*time.Second, got, auto.logText())
	}
	if !strings.Contains(auto.logText(), `"msg":"GOMAXPROCS","from":`+ceiling+`,"to":1`) {
		t.Errorf("auto: no debug line for the change from %s to 1:\n%s", ceiling, auto.logText())
	}
	if got := env.gomaxprocs(t); got != ceiling {
		t.Errorf("GOMAXPROCS=%s in the environment: %s Ps, want it kept", ceiling, got)
	}
	if strings.Contains(env.logText(), `"msg":"GOMAXPROCS"`) {
		t.Errorf("GOMAXPROCS=%s in the environment: auto changed it:\n%s", ceiling, env.logText())
	}
}
