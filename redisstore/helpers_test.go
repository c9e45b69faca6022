package redisstore_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/internal/storelink"
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

// pub returns a checked request as the root package's, for the store's
// exported methods.
func pub(r storelink.Request) sluice.Request {
	p := &r.Params
	return sluice.Request{
		Key:      r.Key,
		Limit:    sluice.Limit{Algorithm: sluice.Algorithm(p.Kind), Rate: p.Rate, Period: time.Duration(p.Period) * time.Microsecond, Burst: p.Burst},
		Cost:     r.Cost,
		MaxDelay: storelink.Duration(r.MaxDelay),
	}
}

// pubs is pub for the parts of a composite.
func pubs(rs []storelink.Request) []sluice.Request {
	out := make([]sluice.Request, len(rs))
	for i, r := range rs {
		out[i] = pub(r)
	}
	return out
}
