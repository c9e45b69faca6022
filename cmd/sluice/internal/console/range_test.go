package console

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/observe"
)

// TestLiveRange: over hours of random traffic, the range view's minutes
// are the exact sums of the events of each minute (those folded out of the
// per-second ring and those it still holds, each counted once), minutes
// over MaxRange old are gone, and a range within the window is the
// per-second view.
func TestLiveRange(t *testing.T) {
	r := rand.New(rand.NewPCG(testenv.Seed(t), 5))
	c, clk := newTestConsole(t, Options{Window: 10 * time.Second})
	type sums struct{ allowed, denied, latN, latSum, latMax int64 }
	want := map[int64]*sums{} // minute start → sums
	start := clk.Now().Unix()
	for sec := int64(0); sec < 8*3600; sec += 1 + r.Int64N(40) {
		clk.Advance(time.Duration(sec-(clk.Now().Unix()-start)) * time.Second)
		m := clk.Now().Unix() / 60 * 60
		if want[m] == nil {
			want[m] = &sums{}
		}
		for range r.IntN(4) {
			lat := int64(1 + r.IntN(900))
			o := observe.Allowed
			if r.IntN(3) == 0 {
				o = observe.Denied
				want[m].denied++
			} else {
				want[m].allowed++
			}
			want[m].latN++
			want[m].latSum += lat
			want[m].latMax = max(want[m].latMax, lat)
			c.Observe(observe.Event{Policy: "p", Outcome: o, Latency: time.Duration(lat) * time.Microsecond})
		}
	}
	now := clk.Now().Unix()
	for _, d := range []time.Duration{MaxRange, time.Hour, 90 * time.Second} {
		l := c.LiveRange(d, 0)
		if l.StepS != 60 || l.Since != (now-int64(d/time.Second)+1)/60*60 {
			t.Fatalf("range %v: step %d since %d (now %d)", d, l.StepS, l.Since, now)
		}
		got := map[int64]Point{}
		for _, p := range ruleLive(t, l, "p").Points {
			got[p.T] = p
		}
		for m, w := range want {
			p, ok := got[m]
			if m < l.Since {
				if ok {
					t.Errorf("range %v: minute %d, before the range, is reported", d, m)
				}
				continue
			}
			if w.latN == 0 {
				continue
			}
			if p.Allowed != w.allowed || p.Denied != w.denied || p.LatencyN != w.latN || p.LatencyMaxUS != w.latMax || p.LatencyAvgUS != w.latSum/w.latN {
				t.Fatalf("range %v: minute %d (%d min ago): got %+v, want %+v", d, m, (now-m)/60, p, *w)
			}
			delete(got, m)
		}
		if len(got) > 0 {
			t.Errorf("range %v: minutes with no events: %v", d, got)
		}
	}
	// From a later second on: the full range's minutes from its minute on.
	full := ruleLive(t, c.LiveRange(MaxRange, 0), "p").Points
	for _, back := range []int64{0, 1, 59, 60, 61, 150, 299, 300, 301, 7200} {
		since := now - back
		l := c.LiveRange(MaxRange, since)
		var want []Point
		for _, p := range full {
			if p.T >= since/60*60 {
				want = append(want, p)
			}
		}
		if got := ruleLive(t, l, "p").Points; l.Since != since/60*60 || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("since now-%d: since %d, points\n%v\nwant %v", back, l.Since, got, want)
		}
	}
	if l := c.LiveRange(5*time.Second, 0); l.StepS != 1 || l.Since != now-4 {
		t.Errorf("a range within the window: step %d since %d", l.StepS, l.Since)
	}
}

// TestLiveMemoryBounded: a rule's live memory is fixed when it is first
// seen, whatever the traffic or how long it runs: the window's seconds of
// 128 B and coarseSlots minutes of 80 B (docs/console.md states it: with
// the default 5-minute window, 67,280 B a rule), for at most maxSeries+1
// series.
func TestLiveMemoryBounded(t *testing.T) {
	if unsafe.Sizeof(slot{}) != 128 || unsafe.Sizeof(minute{}) != 80 {
		t.Fatalf("a slot is %d B and a minute %d B, want 128 and 80 (update docs/console.md)", unsafe.Sizeof(slot{}), unsafe.Sizeof(minute{}))
	}
	c, clk := newTestConsole(t, Options{})
	for i := range 30 * 3600 / 7 {
		c.Observe(observe.Event{Policy: fmt.Sprintf("rule-%d", i%(maxSeries+50)), Outcome: observe.Allowed, Latency: time.Microsecond})
		clk.Advance(7 * time.Second)
	}
	m := *c.live.m.Load()
	if len(m) != maxSeries+1 {
		t.Errorf("%d series, want the bound %d and (other)", len(m), maxSeries+1)
	}
	perRule := int64(0)
	for _, s := range m {
		if len(s.ring) != 300 || cap(s.ring) != 300 || len(s.minutes) != coarseSlots || cap(s.minutes) != coarseSlots {
			t.Fatalf("%s: ring %d/%d, minutes %d/%d", s.name, len(s.ring), cap(s.ring), len(s.minutes), cap(s.minutes))
		}
		perRule = int64(len(s.ring))*int64(unsafe.Sizeof(slot{})) + int64(len(s.minutes))*int64(unsafe.Sizeof(minute{}))
	}
	if perRule != 67_280 {
		t.Errorf("%d B a rule, want 67,280 (update docs/console.md)", perRule)
	}
}

func TestLiveRangeEndpoint(t *testing.T) {
	c, clk, srv := newTestServer(t, testView())
	c.Observe(observe.Event{Policy: "edge.api.user", Outcome: observe.Denied})
	clk.Advance(10 * time.Minute)
	c.Observe(observe.Event{Policy: "edge.api.user", Outcome: observe.Allowed})
	code, _, body := get(t, srv.URL+"/console/api/live?range=1h")
	if code != http.StatusOK || !strings.Contains(body, `"step_s":60`) || !strings.Contains(body, `"denied":1`) || !strings.Contains(body, `"allowed":1`) {
		t.Errorf("range=1h: %d %s", code, body)
	}
	// With since, the minutes from since's on only.
	code, _, body = get(t, srv.URL+"/console/api/live?range=1h&since="+strconv.FormatInt(clk.Now().Unix(), 10))
	if code != http.StatusOK || strings.Contains(body, `"denied":1`) || !strings.Contains(body, `"allowed":1`) {
		t.Errorf("range=1h&since=now: %d %s", code, body)
	}
	for _, q := range []string{"range=7h", "range=0s", "range=soon", "range=1h&since=x"} {
		if code, _, body := get(t, srv.URL+"/console/api/live?"+q); code != http.StatusBadRequest || !strings.Contains(body, "error") {
			t.Errorf("%s: %d %s", q, code, body)
		}
	}
}

// TestLiveRangeConcurrent: seconds fold into minutes while events come in
// from many goroutines and pages read the range; every event is counted
// once. Run with -race.
func TestLiveRangeConcurrent(t *testing.T) {
	seed := testenv.SeedOr(t, 17)
	c, clk := newTestConsole(t, Options{Window: 3 * time.Second})
	const workers, seconds, each = 6, 20, 300
	want := int64(0)
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				c.LiveRange(MaxRange, 0)
				c.Live(0)
			}
		}
	})
	for range seconds {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(seed, uint64(w)))
				for range each {
					c.Observe(observe.Event{Policy: "p", Outcome: observe.Allowed, Latency: time.Duration(1+r.IntN(100)) * time.Microsecond})
				}
			})
		}
		wg.Wait()
		want += workers * each
		clk.Advance(time.Second)
	}
	close(stop)
	readers.Wait()
	if got := ruleLive(t, c.LiveRange(MaxRange, 0), "p").Totals; got.Allowed != want || got.LatencyN != want {
		t.Errorf("counted %d allowed, latency over %d, want %d", got.Allowed, got.LatencyN, want)
	}
}
