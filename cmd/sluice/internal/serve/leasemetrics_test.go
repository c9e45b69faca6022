package serve

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/redisstore"
)

// A store with leases shows them on /metrics: units held, decisions from
// slices and in Redis, units leased. One without shows no lease series.
func TestLeaseMetrics(t *testing.T) {
	srv := redistest.Standalone(t)
	rs, err := redisstore.New(srv.Client(), redisstore.WithLeases(time.Minute), redisstore.WithPrefix(fmt.Sprintf("lm:%d:", time.Now().UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	ts := start(t, Options{Store: rs}, nil)
	lim := sluice.Limit{Rate: 1000, Period: time.Hour, Burst: 1000}
	for i := range 200 {
		if _, err := rs.Take(context.Background(), sluice.Request{Key: "hot", Limit: lim, Cost: 1}); err != nil {
			t.Fatalf("take %d: %v", i, err)
		}
	}
	_, page := httpGet(t, ts.base+"/metrics")
	value := func(series string) int64 {
		m := regexp.MustCompile(regexp.QuoteMeta(series) + ` (\d+)`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("/metrics has no %s:\n%s", series, grep(page, "lease"))
		}
		n, _ := strconv.ParseInt(m[1], 10, 64)
		return n
	}
	st := rs.LeaseStats()
	if got := value(`sluice_serve_lease_decisions_total{store="main",where="lease"}`); got == 0 || got > st.Local {
		t.Errorf("decisions from leases: %d (store says %d)", got, st.Local)
	}
	if got := value(`sluice_serve_lease_units_total{fate="leased",store="main"}`); got == 0 {
		t.Errorf("no unit leased")
	}
	value(`sluice_serve_lease_held_units{store="main"}`)

	plain, err := redisstore.New(srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	ts2 := start(t, Options{Store: plain}, nil)
	if _, page := httpGet(t, ts2.base+"/metrics"); regexp.MustCompile(`sluice_serve_lease_`).MatchString(page) {
		t.Errorf("lease series without leases:\n%s", grep(page, "lease"))
	}
}

// Two instances with leases share one hot descriptor through one Redis
// with few script calls, and never admit more than a descriptor's limit.
func TestLeasesShareAHotDescriptor(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	ctx := context.Background()
	cfg := writeConfig(t, map[string]string{"hot.yaml": `domain: hot
descriptors:
  - key: k
    value: hot
    rate_limit: {unit: hour, requests_per_unit: 1000000}
  - key: k
    value: tight
    rate_limit: {unit: hour, requests_per_unit: 1500}
`})
	var servers []*testServer
	for range 2 {
		rs, err := redisstore.New(srv.Client(), redisstore.WithLeases(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		servers = append(servers, start(t, Options{Config: cfg, Store: rs}, nil))
	}
	scripts := func() int {
		info, err := srv.Client().Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, name := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if m := regexp.MustCompile(regexp.QuoteMeta(name) + `(\d+)`).FindStringSubmatch(info); m != nil {
				x, _ := strconv.Atoi(m[1])
				n += x
			}
		}
		return n
	}
	if err := srv.Client().ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const calls = 4000
	for i := range calls {
		if r := servers[i%2].call(t, "hot", desc("k=hot")); r.OverallCode != ok {
			t.Fatalf("call %d on a limit far above demand: %v", i, r.OverallCode)
		}
	}
	// Each instance's first calls go to Redis until its demand asks for
	// slices; then one script call takes a slice of many units.
	if n := scripts(); n*20 > calls {
		t.Errorf("%d script calls for %d calls: the leases did not take", n, calls)
	} else {
		t.Logf("%d script calls for %d calls", n, calls)
	}
	admitted := 0
	for i := range 2000 {
		if r := servers[i%2].call(t, "hot", desc("k=tight")); r.OverallCode == ok {
			admitted++
		}
	}
	if admitted != 1500 {
		t.Errorf("admitted %d of 2000 calls under 1500 an hour", admitted)
	}
}
