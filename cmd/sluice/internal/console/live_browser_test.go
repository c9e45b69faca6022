package console

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluice-go/sluice/cmd/sluice/internal/browsertest"
	"github.com/sluice-go/sluice/observe"
)

// TestBrowserLiveViews: a small chart per rule shows that rule's counts;
// the 6-hour range shows, a point a minute, traffic the per-second window
// has let go; the latency chart shows the store's latency.
func TestBrowserLiveViews(t *testing.T) {
	c, clk, ctx := browse(t, testView(), true)
	obs := func(rule string, o observe.Outcome, n int, lat time.Duration) {
		for range n {
			c.Observe(observe.Event{Policy: rule, Outcome: o, Latency: lat})
		}
	}
	// Two hours ago, then now.
	clk.Advance(-2 * time.Hour)
	obs("edge.remote_address", observe.Allowed, 40, 200*time.Microsecond)
	obs("edge.remote_address", observe.Denied, 9, 900*time.Microsecond)
	clk.Advance(2 * time.Hour)
	obs("edge.remote_address", observe.Allowed, 5, 100*time.Microsecond)
	obs("edge.api.user", observe.Allowed, 7, 300*time.Microsecond)
	obs("edge.api.user", observe.ShadowDenied, 2, 0)
	if err := chromedp.Do(ctx, chromedp.Reload()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, `Number(document.body.dataset.livePolls || 0) >= 1`)

	small := func(rule, outcome string) string {
		return eval[string](t, ctx, fmt.Sprintf(`(f => f ? f.querySelector('polyline[data-outcome=%q]').dataset.total : "missing")(document.querySelector('#live-small figure[data-rule=%q]'))`, outcome, rule))
	}
	// The window: only the recent seconds.
	for _, c := range []struct{ rule, outcome, want string }{
		{"edge.remote_address", "allowed", "5"}, {"edge.remote_address", "denied", "0"},
		{"edge.api.user", "allowed", "7"}, {"edge.api.user", "shadow_denied", "2"}, {"internal.health", "allowed", "0"},
	} {
		if got := small(c.rule, c.outcome); got != c.want {
			t.Errorf("the window: %s's small chart shows %s %s, want %s", c.rule, got, c.outcome, c.want)
		}
	}
	if got := eval[string](t, ctx, `document.getElementById("latency-chart").querySelector("title").textContent`); !strings.Contains(got, "highest max 300") {
		t.Errorf("the latency chart's title: %q", got)
	}

	// The last 6 hours, a point a minute: the traffic of two hours ago too.
	polls := eval[int](t, ctx, `Number(document.body.dataset.livePolls)`)
	eval[bool](t, ctx, `(s => { s.value = "6h"; s.dispatchEvent(new Event("change")); return true })(document.getElementById("live-range"))`)
	waitFor(t, ctx, fmt.Sprintf(`Number(document.body.dataset.livePolls) > %d`, polls))
	for _, c := range []struct{ rule, outcome, want string }{
		{"edge.remote_address", "allowed", "45"}, {"edge.remote_address", "denied", "9"}, {"edge.api.user", "allowed", "7"},
	} {
		if got := small(c.rule, c.outcome); got != c.want {
			t.Errorf("6 hours: %s's small chart shows %s %s, want %s", c.rule, got, c.outcome, c.want)
		}
	}
	if got := eval[string](t, ctx, `document.querySelector('#live-table tr[data-rule="edge.remote_address"] td[data-k=denied]').innerText`); got != "9" {
		t.Errorf("6 hours: the table shows %s denied, want 9", got)
	}
	if got := eval[string](t, ctx, `document.getElementById("live-chart").querySelector("title").textContent`); !strings.Contains(got, "per minute") || !strings.Contains(got, "denied 9") {
		t.Errorf("6 hours: the chart's title %q", got)
	}
	if got := eval[string](t, ctx, `document.getElementById("latency-chart").querySelector("title").textContent`); !strings.Contains(got, "highest max 900") {
		t.Errorf("6 hours: the latency chart's title %q", got)
	}
	// The latency mean of two hours ago's minute is over all of its calls:
	// (40·200 + 9·900)/49 = 328 µs.
	if got := eval[string](t, ctx, `document.getElementById("latency-chart").querySelector("title").textContent`); !strings.Contains(got, "highest mean 328") {
		t.Errorf("6 hours: the latency chart's title %q, want a highest mean of 328", got)
	}
	browsertest.Screenshot(t, ctx, "live-6h")
}
