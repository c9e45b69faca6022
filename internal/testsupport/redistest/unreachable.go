package redistest

import (
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Unreachable returns a go-redis client for a loopback address nothing
// listens on, closed when t finishes: every command fails at once (no
// retries, a short dial timeout), for tests of what a store's failure
// policy makes of an outage. It needs no redis-server.
func Unreachable(t testing.TB) *redis.Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, DisableIdentity: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
