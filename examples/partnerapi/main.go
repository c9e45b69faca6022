// Command partnerapi is a client of a partner API that allows 10 requests a
// second with bursts of 50, where an export counts as 10 requests. Its
// http.Client sends through httplimit.Transport: each call waits for its
// share of the budget instead of being refused by the partner. When the
// partner answers 429 with a Retry-After all the same (its count is not
// ours, or another client spends on the same account), the Transport holds
// the partner's host until then for every call (in every process, over a
// shared Redis store), and the client sends the refused call again once.
//
// The partner here is a stand-in on a loopback port that refuses one call.
//
//	go run ./examples/partnerapi
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/memstore"
)

// partner is the partner's published limit.
var partner = sluice.PerSecond(10).WithBurst(50)

// Costs of the calls, in requests.
const (
	costGet    = 1
	costExport = 10
)

// cost is what a call spends of the partner's budget.
func cost(r *http.Request) (int64, error) {
	if strings.HasPrefix(r.URL.Path, "/export") {
		return costExport, nil
	}
	return costGet, nil
}

// Client calls the partner API at base within its limit.
type Client struct {
	http *http.Client
	base string
}

// NewClient returns a client of the partner API at base whose calls wait
// for the partner's budget on lim, by lim's clock.
func NewClient(lim *sluice.Limiter, base string) (*Client, error) {
	t, err := httplimit.NewTransport(lim, []httplimit.Policy{
		{Name: "partner", Limit: partner, Key: httplimit.Host(), CostFunc: cost},
	})
	if err != nil {
		return nil, err
	}
	return &Client{http: &http.Client{Transport: t}, base: base}, nil
}

// Call calls path and returns the partner's status. A call the partner
// refuses with 429 is sent once more: the Transport holds it until the
// partner's Retry-After has passed.
func (c *Client) Call(ctx context.Context, path string) (int, error) {
	for attempt := 1; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, "GET", c.base+path, nil)
		if err != nil {
			return 0, err
		}
		resp, err := c.http.Do(req)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || attempt == 2 {
			return resp.StatusCode, nil
		}
	}
}

func main() {
	start := time.Now()
	var calls atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		if n == 42 { // the partner's own count says no, for a second
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		}
		fmt.Printf("%6.2fs  partner: %s (call %d)\n", time.Since(start).Seconds(), r.URL.Path, n)
	}))
	defer api.Close()
	c, err := NewClient(sluice.New(memstore.New()), api.URL)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// 40 gets pass at once (the burst), then 3 exports of 10: the first uses
	// the last 10 of the burst, the next ones wait a second each; the
	// partner refuses the second, and it goes again after its Retry-After.
	for i := 0; i < 40; i++ {
		if _, err := c.Call(ctx, fmt.Sprintf("/get/%d", i)); err != nil {
			panic(err)
		}
	}
	for i := 0; i < 3; i++ {
		status, err := c.Call(ctx, fmt.Sprintf("/export/%d", i))
		if err != nil {
			panic(err)
		}
		fmt.Printf("%6.2fs  export %d: %d\n", time.Since(start).Seconds(), i, status)
	}
}
