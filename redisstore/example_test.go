package redisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/redisstore"
)

// Every process of a service shares the budget kept in Redis; when Redis is
// gone, each limits on its own until it is back.
//
// Compiled, not run: it needs a Redis at 127.0.0.1:6379, and go test
// starts its own on other ports (TestSuite, TestFailLocalUsesCallerTime
// and TestCheckConfig check what it shows).
func ExampleNew() {
	o := &redis.Options{Addr: "127.0.0.1:6379",
		ContextTimeoutEnabled: true} // calls end by their deadline
	redisstore.SendOnce(o) // a decision whose reply is lost is not sent again
	rdb := redis.NewClient(o)
	defer rdb.Close()
	store, err := redisstore.New(rdb,
		redisstore.WithPrefix("myapp:rl:"),
		redisstore.WithTimeout(50*time.Millisecond),
		redisstore.WithFailurePolicy(redisstore.FailLocal))
	if err != nil {
		fmt.Println("bad options:", err)
		return
	}
	defer store.Close()
	// At start-up: is Redis configured to keep limiter keys?
	if err := store.CheckConfig(context.Background()); err != nil {
		fmt.Println("check the Redis configuration:", err)
	}
	lim := sluice.New(store)

	res, err := lim.Take(context.Background(), "partner:acme", sluice.PerSecond(10).WithBurst(50), 10)
	if err != nil {
		fmt.Println("no decision:", err)
		return
	}
	fmt.Println(res.Allowed, res.Degraded)
}

// A global budget and a per-tenant one sharing a {hash tag} are decided in
// one script, also on a cluster.
//
// Compiled, not run: it needs a Redis Cluster at 127.0.0.1:7000-7002
// (TestCompositeCluster checks what it shows on a cluster of its own).
func Example_composite() {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"}})
	defer rdb.Close()
	store, err := redisstore.New(rdb)
	if err != nil {
		fmt.Println("bad options:", err)
		return
	}
	defer store.Close()
	lim := sluice.New(store)
	res, err := lim.TakeAll(context.Background(), []sluice.Part{
		{Key: "{tenant:7}:user:42", Limit: sluice.PerSecond(5), Cost: 1},
		{Key: "{tenant:7}:all", Limit: sluice.PerSecond(100), Cost: 1},
	}, nil)
	fmt.Println(res.Allowed, err)
}

// A global budget every instance of a service hits at once is decided from
// slices of it each instance takes: in memory, never over the limit by more
// than a second of refill in any span.
//
// Compiled, not run: it needs a Redis at 127.0.0.1:6379
// (TestSliceBoundWithRedis checks the bound on a Redis of its own).
func ExampleWithSlices() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	store, err := redisstore.New(rdb, redisstore.WithSlices(time.Second))
	if err != nil {
		fmt.Println("bad options:", err)
		return
	}
	defer store.Close() // gives back what the slices still hold
	lim := sluice.New(store)
	for range 1000 {
		if _, err := lim.Take(context.Background(), "api:all", sluice.PerSecond(20_000).WithBurst(2_000), 1); err != nil {
			fmt.Println("no decision:", err)
			return
		}
	}
	st := store.SliceStats()
	fmt.Println(st.Local+st.Store > 0, st.Held >= 0)
}
