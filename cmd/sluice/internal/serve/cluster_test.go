package serve

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/sluice-go/sluice/internal/testsupport/redistest"
)

// Four `sluice serve` processes on a real 3-master Redis Cluster, 64
// concurrent callers spread over them.
//
// With --domain-slot a domain's keys share one hash slot, so a call's
// descriptors are one script: the processes admit exactly what one process
// in memory admits (150, the tenant's limit), all or nothing.
//
// Without it each key hashes on its own: one descriptor per call is exact
// (every user gets its 20), and a call whose descriptors land in different
// slots is decided part by part — no key is ever over its limit, and a
// window part taken before another part refuses is given back, so with no
// process dying mid-run each user's count ends equal to its admissions. It
// is not one atomic step: a concurrent call may be refused while a part is
// held.
func TestFourProcessesOneCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.Cluster(t)
	store := "redis-cluster://" + strings.Join(cl.Addrs(), ",")
	dir := writeConfig(t, map[string]string{"shared.yaml": sharedConfig})
	awayFromWindowEnd(t, 24*time.Hour, 3*time.Minute)
	both := func(user string) []*rlv3.RateLimitDescriptor {
		// The user first: taken part by part, it is spent before the
		// tenant refuses, then given back.
		return []*rlv3.RateLimitDescriptor{desc("user=" + user), desc("tenant=acme")}
	}
	stopAll := func(procs []*proc) {
		for _, p := range procs {
			if _, err := p.stop(t, syscall.SIGTERM); err != nil {
				t.Errorf("exit: %v", err)
			}
		}
	}
	start := func(args ...string) []*proc {
		var procs []*proc
		for range 4 {
			procs = append(procs, startProc(t, append([]string{"--config", dir, "--store", store}, args...)...))
		}
		return procs
	}
	left := func(p *proc, d string) int64 {
		r, err := p.call(context.Background(), "shared", withHits(desc(d), 0))
		if err != nil {
			t.Fatalf("look: %v", err)
		}
		return int64(r.Statuses[0].LimitRemaining)
	}

	t.Run("domain-slot", func(t *testing.T) {
		procs := start("--prefix", "slot:", "--domain-slot")
		defer stopAll(procs)
		admitted, perUser := runShared(t, procs, both)
		if admitted != 150 {
			t.Errorf("4 processes on a cluster with --domain-slot admitted %d, want 150 (one process in memory admits 150: TestFourProcessesOneRedis)", admitted)
		}
		for u, n := range perUser {
			if n > 20 {
				t.Errorf("user %s admitted %d times, over its limit of 20", u, n)
			}
		}
		if n := left(procs[0], "tenant=acme"); n != 0 {
			t.Errorf("tenant after the run: %d left, want 0: what was admitted is what the cluster counted", n)
		}
		// A refused call spent nothing: each user's count is its admissions.
		for u := range sharedUsers {
			user := fmt.Sprintf("u%d", u)
			if n := left(procs[0], "user="+user); n != 20-perUser[user] {
				t.Errorf("user %s: %d left after %d admitted, want %d", user, n, perUser[user], 20-perUser[user])
			}
		}
	})

	t.Run("key-slots/one-descriptor", func(t *testing.T) {
		procs := start("--prefix", "keys1:")
		defer stopAll(procs)
		admitted, perUser := runShared(t, procs, func(user string) []*rlv3.RateLimitDescriptor {
			return []*rlv3.RateLimitDescriptor{desc("user=" + user)}
		})
		if admitted != sharedUsers*20 {
			t.Errorf("admitted %d, want %d: every user's 20", admitted, sharedUsers*20)
		}
		for u, n := range perUser {
			if n != 20 {
				t.Errorf("user %s admitted %d times, want 20", u, n)
			}
		}
	})

	t.Run("key-slots/across-slots", func(t *testing.T) {
		procs := start("--prefix", "keys2:")
		defer stopAll(procs)
		admitted, perUser := runShared(t, procs, both)
		if admitted > 150 {
			t.Errorf("admitted %d, over the tenant's 150", admitted)
		}
		for u, n := range perUser {
			if n > 20 {
				t.Errorf("user %s admitted %d times, over its limit of 20", u, n)
			}
		}
		if n := left(procs[0], "tenant=acme"); admitted > 150-n {
			t.Errorf("admitted %d with %d left of 150 on the tenant: admissions the tenant did not count", admitted, n)
		}
		var spent int64
		for u := range sharedUsers {
			user := fmt.Sprintf("u%d", u)
			n := left(procs[0], "user="+user)
			if 20-n != perUser[user] {
				t.Errorf("user %s: %d admitted, %d counted: a refused call's user part was not given back", user, perUser[user], 20-n)
			}
			spent += 20 - n
		}
		t.Logf("across slots, part by part: %d admitted of 150; the users counted %d (refused calls' user parts given back)", admitted, spent)
	})
}
