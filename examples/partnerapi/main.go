// Command partnerapi is a client of a partner API that allows 10 requests a
// second with bursts of 50, where an export counts as 10 requests. The client
// waits for its budget instead of being refused by the partner.
//
//	go run ./examples/partnerapi
package main

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/memstore"
)

// partner is the partner's published limit.
var partner = sluice.PerSecond(10).WithBurst(50)

// Costs of the calls, in requests.
const (
	costGet    = 1
	costExport = 10
)

// Client calls the partner API within its limit.
type Client struct {
	lim  *sluice.Limiter
	call func(what string)
}

// Do waits for cost units of the partner's budget, then calls.
func (c *Client) Do(ctx context.Context, what string, cost int64) error {
	if _, err := c.lim.Wait(ctx, "partner:acme", partner, cost); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	c.call(what)
	return nil
}

func main() {
	start := time.Now()
	c := &Client{lim: sluice.New(memstore.New()), call: func(what string) {
		fmt.Printf("%6.2fs  %s\n", time.Since(start).Seconds(), what)
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// 40 gets pass at once (the burst), then 3 exports of 10: the first uses
	// the last 10 of the burst, the next ones wait a second each.
	for i := 0; i < 40; i++ {
		if err := c.Do(ctx, fmt.Sprintf("get %d", i), costGet); err != nil {
			panic(err)
		}
	}
	for i := 0; i < 3; i++ {
		if err := c.Do(ctx, fmt.Sprintf("export %d", i), costExport); err != nil {
			panic(err)
		}
	}
}
