//go:build linux

package redistest_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/internal/testsupport/childproc"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
)

func TestHelperOrphan(t *testing.T) {
	if _, ok := childproc.Config(helperEnv); !ok {
		t.Skip("helper for TestNoOrphans")
	}
	s := redistest.Standalone(t)
	cl := redistest.Cluster(t)
	pids := []string{strconv.Itoa(s.Pid())}
	for _, addr := range cl.Addrs() {
		n := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
		info, err := n.InfoMap(context.Background(), "server").Result()
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, info["Server"]["process_id"])
	}
	fmt.Printf("PIDS %s\n", strings.Join(pids, " "))
	// Die without running cleanups, as a crashed or killed test binary would.
	os.Exit(3)
}

// TestNoOrphans checks that redis-server dies with the test binary even
// when no cleanup runs.
func TestNoOrphans(t *testing.T) {
	redistest.Require(t)
	t.Parallel()
	out, _ := runHelper(t, "TestHelperOrphan")
	var pids []int
	for line := range strings.SplitSeq(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "PIDS "); ok {
			for _, f := range strings.Fields(rest) {
				pid, err := strconv.Atoi(f)
				if err != nil {
					t.Fatal(err)
				}
				pids = append(pids, pid)
			}
		}
	}
	if len(pids) == 0 {
		t.Fatalf("helper printed no pids:\n%s", out)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				syscall.Kill(pid, syscall.SIGKILL)
				t.Fatalf("redis-server pid %d outlived the test binary", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
