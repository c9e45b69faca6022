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
func ExampleStore_TakeAll() {
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
	})
	fmt.Println(res.Allowed, err)
}
