package redisstore_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/internal/testsupport/storetest"
	"github.com/sluice-go/sluice/redisstore"
	"github.com/sluice-go/sluice/store"
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

// The helpers below run one op at the store's time (At 0), as a Limiter
// does, on a checked request, and return its answer as the root package's
// Result.

// take runs req as a Take.
func take(ctx context.Context, st store.Store, req storelink.Request) (sluice.Result, error) {
	return answer(storetest.RunAt(ctx, st, 0, storetest.TakeOp(req)))
}

// takeAll runs reqs as a composite Take.
func takeAll(ctx context.Context, st store.Store, reqs []storelink.Request) (sluice.Result, error) {
	return answer(storetest.RunAt(ctx, st, 0, storetest.CompositeOp(reqs)))
}

// refund runs req as a Refund to the window the key is in.
func refund(ctx context.Context, st store.Store, req storelink.Request) (sluice.Result, error) {
	op := store.Op{Kind: store.Refund, Key: req.Key, Limit: storelink.LimitOf(&req.Params), Cost: req.Cost}
	return answer(storetest.RunAt(ctx, st, 0, op))
}

// charge runs req as a Charge of req.Cost units.
func charge(ctx context.Context, st store.Store, req storelink.Request) (sluice.Result, error) {
	op := store.Op{Kind: store.Charge, Key: req.Key, Limit: storelink.LimitOf(&req.Params), Cost: req.Cost}
	return answer(storetest.RunAt(ctx, st, 0, op))
}

// reset runs a Reset of key.
func reset(ctx context.Context, st store.Store, key string) error {
	return storetest.RunAt(ctx, st, 0, store.Op{Kind: store.Reset, Key: key}).Err
}

// answer is op's answer as a Result, or its error.
func answer(op store.Op) (sluice.Result, error) {
	if op.Err != nil {
		return sluice.Result{}, op.Err
	}
	return resultOf(&op.Decision), nil
}

// resultOf is d as a Result.
func resultOf(d *store.Decision) sluice.Result {
	return sluice.Result{
		Allowed:    d.Allowed,
		Remaining:  d.Remaining,
		RetryAfter: storelink.Duration(d.RetryAfter),
		ResetAfter: storelink.Duration(d.ResetAfter),
		Delay:      storelink.Duration(d.Delay),
		Degraded:   d.Degraded,
		Window:     d.Window,
	}
}

// request is a Take of cost units of key under lim, a limit the test knows
// valid, checked as a Limiter checks it (no MaxDelay).
func request(key string, lim sluice.Limit, cost int64) storelink.Request {
	p, err := storelink.Params(lim)
	if err != nil {
		panic(err)
	}
	return storelink.Request{Key: key, Params: p, Cost: cost, MaxDelay: algo.Never}
}

// A holdOp is one hold operation as these tests write it: Op is
// algo.OpAcquire, OpRelease or OpExtend, Limit a checked one.
type holdOp struct {
	Op    int64
	Key   string
	Limit algo.Concurrency
	Units int64
	ID    int64
}

// A holdResult is a hold operation's answer: its decision, and the hold's
// expiry (µs) when an acquire or extension was allowed.
type holdResult struct {
	Decision algo.Decision
	Expiry   int64
}

// holder runs hold operations on a store through Run.
type holder struct{ st store.Store }

// HoldAt runs op at now (µs; 0: the store's time).
func (h holder) HoldAt(ctx context.Context, op holdOp, now int64) (holdResult, error) {
	kind := map[int64]store.Kind{algo.OpAcquire: store.Acquire, algo.OpRelease: store.Release, algo.OpExtend: store.Extend}[op.Op]
	o := storetest.RunAt(ctx, h.st, now, storetest.HoldOp(kind, op.Key, op.Limit, op.Units, op.ID))
	if o.Err != nil {
		return holdResult{}, o.Err
	}
	return holdResult{Decision: storelink.AlgoDecision(&o.Decision), Expiry: o.Expiry}, nil
}
