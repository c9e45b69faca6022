package serve

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/redisstore"
)

// A store with slices shows them on /metrics: units held, decisions from
// slices and in Redis, units taken, under the slice names and under the
// deprecated lease names, marked so in their help. One without shows no
// slice series.
func TestSliceMetrics(t *testing.T) {
	srv := redistest.Standalone(t)
	rs, err := redisstore.New(srv.Client(), redisstore.WithSlices(time.Minute), redisstore.WithPrefix(fmt.Sprintf("lm:%d:", time.Now().UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	ts := start(t, Options{Store: rs}, nil)
	lim := sluice.Limit{Rate: 1000, Period: time.Hour, Burst: 1000}
	l := sluice.New(rs)
	for i := range 200 {
		if _, err := l.Take(context.Background(), "hot", lim, 1); err != nil {
			t.Fatalf("take %d: %v", i, err)
		}
	}
	_, page := httpGet(t, ts.base+"/metrics")
	value := func(series string) int64 {
		m := regexp.MustCompile(regexp.QuoteMeta(series) + ` (\d+)`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("/metrics has no %s:\n%s", series, grep(page, "sluice_serve_"))
		}
		n, _ := strconv.ParseInt(m[1], 10, 64)
		return n
	}
	st := rs.SliceStats()
	if got := value(`sluice_serve_slice_decisions_total{store="main",where="slice"}`); got == 0 || got > st.Local {
		t.Errorf("decisions from slices: %d (store says %d)", got, st.Local)
	}
	if got := value(`sluice_serve_slice_units_total{fate="taken",store="main"}`); got == 0 {
		t.Errorf("no unit taken in a slice")
	}
	value(`sluice_serve_slice_held_units{store="main"}`)
	// The deprecated names, until the next minor release: the same
	// figures, their help saying so.
	if got := value(`sluice_serve_lease_decisions_total{store="main",where="lease"}`); got == 0 || got > st.Local {
		t.Errorf("decisions from slices, deprecated name: %d (store says %d)", got, st.Local)
	}
	if got := value(`sluice_serve_lease_units_total{fate="leased",store="main"}`); got == 0 {
		t.Errorf("no unit taken in a slice, deprecated name")
	}
	value(`sluice_serve_lease_held_units{store="main"}`)
	for _, name := range []string{"held_units", "decisions_total", "units_total"} {
		help := "# HELP sluice_serve_lease_" + name + " Deprecated, removed in the next minor release: use sluice_serve_slice_" + name
		if !strings.Contains(page, help) {
			t.Errorf("/metrics lacks %q:\n%s", help, grep(page, "# HELP sluice_serve_"))
		}
	}

	plain, err := redisstore.New(srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	ts2 := start(t, Options{Store: plain}, nil)
	if _, page := httpGet(t, ts2.base+"/metrics"); regexp.MustCompile(`sluice_serve_(lease|slice)_`).MatchString(page) {
		t.Errorf("slice series without slices:\n%s", grep(page, "sluice_serve_"))
	}
}

// Two instances with slices share one hot descriptor through one Redis
// with few script calls, and never admit more than a descriptor's limit.
func TestSlicesShareAHotDescriptor(t *testing.T) {
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
		rs, err := redisstore.New(srv.Client(), redisstore.WithSlices(time.Minute))
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
		t.Errorf("%d script calls for %d calls: the slices did not take", n, calls)
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
