package console_test

import (
	"fmt"
	"time"

	"github.com/sluice-go/sluice/cmd/sluice/internal/console"
	"github.com/sluice-go/sluice/observe"
)

// A Console is the service's observer; its Handler is mounted at "/". Here
// it counts three decisions of one rule and reports them as
// GET /console/api/live would.
func Example() {
	now := time.Date(2026, 12, 2, 16, 0, 0, 0, time.UTC)
	c, err := console.New(console.Options{
		Config: func() console.ConfigView {
			return console.ConfigView{Rules: []console.Rule{{Domain: "edge", Path: "remote_address", Name: "edge.per_ip",
				Algorithm: "token-bucket", Rate: 10, Period: time.Second, Burst: 20}}}
		},
		Clock: func() time.Time { return now },
	})
	if err != nil {
		panic(err)
	}
	// http.Handle("/", c.Handler()) serves the page.
	var o observe.Observer = c
	o.Observe(observe.Event{Source: "serve", Policy: "edge.per_ip", Outcome: observe.Allowed, Latency: 300 * time.Microsecond})
	o.Observe(observe.Event{Source: "serve", Policy: "edge.per_ip", Outcome: observe.Allowed, Latency: 100 * time.Microsecond})
	o.Observe(observe.Event{Source: "serve", Policy: "edge.per_ip", Outcome: observe.Denied, Latency: 200 * time.Microsecond})
	c.Refused("edge.per_ip", "remote_address=10.0.0.7")

	for _, r := range c.Live(0).Rules {
		t := r.Totals
		fmt.Printf("%s: %d allowed, %d denied, store latency %dµs on average\n", r.Rule, t.Allowed, t.Denied, t.LatencyAvgUS)
	}
	fmt.Println("most refused:", c.Live(0).Top[0].Key)
	// Output:
	// edge.per_ip: 2 allowed, 1 denied, store latency 200µs on average
	// most refused: remote_address=10.0.0.7
}
