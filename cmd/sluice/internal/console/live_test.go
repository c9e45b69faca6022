package console

import (
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/observe"
)

// fakeClock is a settable clock for Options.Clock.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock(t time.Time) *fakeClock {
	c := &fakeClock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

var t0 = time.Date(2026, 12, 2, 16, 0, 0, 0, time.UTC)

func newTestConsole(t testing.TB, o Options) (*Console, *fakeClock) {
	t.Helper()
	clk := newFakeClock(t0)
	if o.Clock == nil {
		o.Clock = clk.Now
	}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return c, clk
}

func ruleLive(t *testing.T, l Live, rule string) RuleLive {
	t.Helper()
	for _, r := range l.Rules {
		if r.Rule == rule {
			return r
		}
	}
	t.Fatalf("rule %q not in the live report %+v", rule, l.Rules)
	return RuleLive{}
}

// TestLiveCharged: the units a rule's charges spent are counted beside
// its decisions, a second at a time and in the minutes past the window,
// and shown in the report and the page's table.
func TestLiveCharged(t *testing.T) {
	c, clk := newTestConsole(t, Options{Window: 10 * time.Second, Config: func() ConfigView {
		return ConfigView{Rules: []Rule{{Name: "llm.tokens"}}}
	}})
	c.Observe(observe.Event{Source: "serve", Policy: "llm.tokens", Outcome: observe.Allowed})
	c.Charged("llm.tokens", 4000)
	clk.Advance(time.Second)
	c.Observe(observe.Event{Source: "serve", Policy: "llm.tokens", Outcome: observe.Denied})
	c.Charged("llm.tokens", 9000)
	l := ruleLive(t, c.Live(0), "llm.tokens")
	if len(l.Points) != 2 || l.Points[0].Charged != 4000 || l.Points[1].Charged != 9000 || l.Totals.Charged != 13000 || l.Totals.Allowed != 1 || l.Totals.Denied != 1 {
		t.Errorf("points %+v, totals %+v", l.Points, l.Totals)
	}
	clk.Advance(time.Hour)
	if l := ruleLive(t, c.LiveRange(2*time.Hour, 0), "llm.tokens"); l.Totals.Charged != 13000 {
		t.Errorf("an hour on, over 2 hours: totals %+v, want 13000 charged", l.Totals)
	}
	lr := c.LiveRange(2*time.Hour, 0)
	if b := string(appendLive(nil, &lr)); !strings.Contains(b, `"charged":13000`) {
		t.Errorf("the JSON lacks the units charged: %s", b)
	}
}

func TestLiveCountsPerSecond(t *testing.T) {
	c, clk := newTestConsole(t, Options{Window: 10 * time.Second, Config: func() ConfigView {
		return ConfigView{Rules: []Rule{{Name: "quiet"}, {Name: "api"}}}
	}})
	ev := func(o observe.Outcome, lat time.Duration) observe.Event {
		return observe.Event{Source: "serve", Policy: "api", Outcome: o, Latency: lat}
	}
	for range 3 {
		c.Observe(ev(observe.Allowed, 100*time.Microsecond))
	}
	c.Observe(ev(observe.Denied, 300*time.Microsecond))
	clk.Advance(time.Second)
	c.Observe(ev(observe.ShadowDenied, 0))
	c.Observe(ev(observe.Error, 0))
	c.Observe(ev(observe.Degraded, 0))
	c.Observe(observe.Event{Policy: "unconfigured", Outcome: observe.Allowed})

	l := c.Live(0)
	if l.Now != t0.Unix()+1 || l.Since != l.Now-9 || l.WindowS != 10 {
		t.Fatalf("now %d since %d window %d", l.Now, l.Since, l.WindowS)
	}
	if got := []string{l.Rules[0].Rule, l.Rules[1].Rule, l.Rules[2].Rule}; fmt.Sprint(got) != "[quiet api unconfigured]" {
		t.Fatalf("rules in order %v, want the config's then the others", got)
	}
	if q := ruleLive(t, l, "quiet"); len(q.Points) != 0 || q.Totals.Allowed != 0 {
		t.Errorf("quiet: %+v", q)
	}
	api := ruleLive(t, l, "api")
	want := []Point{
		{T: t0.Unix(), Allowed: 3, Denied: 1, LatencyAvgUS: 150, LatencyMaxUS: 300, LatencyN: 4},
		{T: t0.Unix() + 1, ShadowDenied: 1, Error: 1, Degraded: 1},
	}
	if fmt.Sprint(api.Points) != fmt.Sprint(want) {
		t.Errorf("api points\n got %+v\nwant %+v", api.Points, want)
	}
	if tot := api.Totals; tot.Allowed != 3 || tot.Denied != 1 || tot.ShadowDenied != 1 || tot.Error != 1 || tot.Degraded != 1 || tot.LatencyMaxUS != 300 {
		t.Errorf("api totals %+v", tot)
	}
	// since returns the seconds from then on only.
	if p := ruleLive(t, c.Live(t0.Unix()+1), "api").Points; len(p) != 1 || p[0].T != t0.Unix()+1 {
		t.Errorf("since now: %+v", p)
	}
	// The window forgets: 10 s later the first second is gone, and its slot
	// counts a new second from zero.
	clk.Advance(9 * time.Second)
	c.Observe(ev(observe.Allowed, 0))
	api = ruleLive(t, c.Live(0), "api")
	if len(api.Points) != 2 || api.Points[0].T != t0.Unix()+1 || api.Points[1].Allowed != 1 || api.Points[1].Denied != 0 {
		t.Errorf("after the window: %+v", api.Points)
	}
}

func TestLiveClockBack(t *testing.T) {
	c, clk := newTestConsole(t, Options{Window: 5 * time.Second})
	c.Observe(observe.Event{Policy: "p"})
	clk.Advance(5 * time.Second) // the same slot, a newer second
	c.Observe(observe.Event{Policy: "p"})
	clk.Advance(-5 * time.Second)
	c.Observe(observe.Event{Policy: "p"}) // an older second: not counted over the newer
	clk.Advance(5 * time.Second)
	if p := ruleLive(t, c.Live(0), "p").Points; len(p) != 1 || p[0].Allowed != 1 {
		t.Errorf("points %+v", p)
	}
}

func TestLiveSeriesBounded(t *testing.T) {
	c, _ := newTestConsole(t, Options{Window: 2 * time.Second})
	for i := range maxSeries + 50 {
		c.Observe(observe.Event{Policy: fmt.Sprintf("p%d", i)})
	}
	l := c.Live(0)
	if len(l.Rules) != maxSeries+1 {
		t.Fatalf("%d series, want %d and %q", len(l.Rules), maxSeries, otherSeries)
	}
	if o := ruleLive(t, l, otherSeries); o.Totals.Allowed != 50 {
		t.Errorf("%s counted %d, want 50", otherSeries, o.Totals.Allowed)
	}
}

func TestObserveConcurrent(t *testing.T) {
	seed := testenv.SeedOr(t, 13)
	c, clk := newTestConsole(t, Options{Window: 60 * time.Second})
	const workers, each = 8, 2000
	var want [len(observe.Outcomes)]atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			for i := range each {
				o := observe.Outcomes[r.IntN(len(observe.Outcomes))]
				want[o].Add(1)
				c.Observe(observe.Event{Policy: "p", Outcome: o, Latency: time.Duration(1+r.IntN(100)) * time.Microsecond})
				if w == 0 && i%500 == 0 {
					clk.Advance(time.Second)
				}
			}
		})
	}
	wg.Wait()
	tot := ruleLive(t, c.Live(0), "p").Totals
	got := [...]int64{tot.Allowed, tot.Denied, tot.ShadowDenied, tot.Error, tot.Degraded}
	for i := range got {
		if got[i] != want[i].Load() {
			t.Errorf("%s: counted %d, want %d", observe.Outcomes[i], got[i], want[i].Load())
		}
	}
}

func TestObserveAllocatesNothing(t *testing.T) {
	c, clk := newTestConsole(t, Options{})
	e := observe.Event{Source: "serve", Policy: "api", Outcome: observe.Denied, Latency: time.Millisecond}
	c.Observe(e)
	allocs := testing.AllocsPerRun(1000, func() {
		c.Observe(e)
		clk.Advance(10 * time.Millisecond)
	})
	if allocs != 0 {
		t.Errorf("Observe allocates %.1f times per event for a known rule, want 0", allocs)
	}
}

func TestNewOptions(t *testing.T) {
	for _, o := range []Options{{Window: 500 * time.Millisecond}, {Window: 2 * time.Hour}, {Window: 1500 * time.Millisecond}, {TopK: -1}, {TopK: 5000}} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v): no error", o)
		}
	}
}

func BenchmarkObserve(b *testing.B) {
	c, err := New(Options{Config: func() ConfigView { return ConfigView{Rules: []Rule{{Name: "api"}}} }})
	if err != nil {
		b.Fatal(err)
	}
	e := observe.Event{Source: "serve", Policy: "api", Outcome: observe.Allowed, Latency: 200 * time.Microsecond}
	b.ReportAllocs()
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			c.Observe(e)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c.Observe(e)
			}
		})
	})
}

// BenchmarkLiveEndpoint is one poll of GET /console/api/live with 50 rules,
// every second of the 5-minute window counted: what a page costs the
// service each second it is open (since=NOW; while it shows the hours it
// polls ?range=6h&since=NOW once in 10 s instead).
func BenchmarkLiveEndpoint(b *testing.B) {
	var rules []Rule
	for i := range 50 {
		rules = append(rules, Rule{Name: fmt.Sprintf("rule%d", i)})
	}
	c, clk := newTestConsole(b, Options{Config: func() ConfigView { return ConfigView{Rules: rules} }})
	// The hours before the window, a point a minute for ?range=6h.
	clk.Advance(-6 * time.Hour)
	for range (6*3600 - 300) / 5 {
		for _, r := range rules {
			c.Observe(observe.Event{Policy: r.Name, Outcome: observe.Allowed, Latency: time.Millisecond})
		}
		clk.Advance(5 * time.Second)
	}
	for range 300 {
		for _, r := range rules {
			c.Observe(observe.Event{Policy: r.Name, Outcome: observe.Allowed, Latency: time.Millisecond})
			c.Observe(observe.Event{Policy: r.Name, Outcome: observe.Denied})
		}
		c.Refused(rules[0].Name, "k")
		clk.Advance(time.Second)
	}
	h := c.Handler()
	last := strconv.FormatInt(clk.Now().Unix()-1, 10)
	for _, since := range []string{"", "?since=" + last, "?range=6h", "?range=6h&since=" + last} {
		b.Run("since="+strings.TrimPrefix(since, "?since="), func(b *testing.B) {
			req := httptest.NewRequest("GET", "/console/api/live"+since, nil)
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != 200 {
					b.Fatal(w.Code)
				}
			}
		})
	}
}
