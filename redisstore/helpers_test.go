package redisstore_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/internal/storeapi"
	"github.com/sluice-go/sluice/redisstore"
)

// newGoRedis is redisstore.New for tests: an error fails t.
func newGoRedis(t testing.TB, c redis.UniversalClient, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	st, err := redisstore.New(c, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return st
}

// newStore is redisstore.NewOver for tests: an error fails t.
func newStore(t testing.TB, c redisrun.Client, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	st, err := redisstore.NewOver(c, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return st
}

// pub returns a request in core's form as the root package's.
func pub(r core.Request) sluice.Request { return storeapi.Public(&r) }
