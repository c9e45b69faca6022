package storetest

import (
	"context"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/store"
)

// The suite reaches a store through its one method, Run, at times it gives
// (Op.At): the helpers below build the suite's function types from any
// store.Store, so that a store's test passes its store and nothing else.

// RunAt runs op on st at now (µs since the epoch; 0: the store's clock)
// and returns it with its answer.
func RunAt(ctx context.Context, st store.Store, now int64, op store.Op) store.Op {
	op.At = now
	ops := []store.Op{op}
	st.Run(ctx, ops)
	return ops[0]
}

// TakeOp is req as a Take op: its key, limit, cost, headroom (Reserve)
// and MaxDelay.
func TakeOp(req storelink.Request) store.Op {
	return store.Op{Kind: store.Take, Key: req.Key, Limit: storelink.LimitOf(&req.Params), Cost: req.Cost, Headroom: req.Reserve, MaxDelay: req.MaxDelay}
}

// CompositeOp is reqs as a composite Take op, each request a part (its
// Reserve the part's Headroom). The op's MaxDelay, which applies to every
// part, is the first request's (algo.Never when there is none).
func CompositeOp(reqs []storelink.Request) store.Op {
	op := store.Op{Kind: store.Take, MaxDelay: algo.Never, Parts: make([]store.Part, len(reqs))}
	if len(reqs) > 0 {
		op.MaxDelay = reqs[0].MaxDelay
	}
	for i := range reqs {
		r := &reqs[i]
		op.Parts[i] = store.Part{Key: r.Key, Limit: storelink.LimitOf(&r.Params), Cost: r.Cost, Headroom: r.Reserve}
	}
	return op
}

// TakeAt makes one decision of req on st at now: a Take through Run.
func TakeAt(ctx context.Context, st store.Store, req storelink.Request, now int64) (algo.Decision, error) {
	op := RunAt(ctx, st, now, TakeOp(req))
	if op.Err != nil {
		return algo.Decision{}, op.Err
	}
	return storelink.AlgoDecision(&op.Decision), nil
}

// AllAt returns st's TakeAllAt: a composite Take through Run.
func AllAt(st store.Store) TakeAllAt {
	each := EachAt(st)
	return func(ctx context.Context, reqs []storelink.Request, now int64) (algo.Decision, error) {
		return each(ctx, reqs, now, nil)
	}
}

// EachAt returns st's TakeEachAt: a composite Take through Run, each
// part's Decision written into each[i] (unless each is nil).
func EachAt(st store.Store) TakeEachAt {
	return func(ctx context.Context, reqs []storelink.Request, now int64, each []algo.Decision) (algo.Decision, error) {
		op := RunAt(ctx, st, now, CompositeOp(reqs))
		clear(each)
		if op.Err != nil {
			return algo.Decision{}, op.Err
		}
		for i := range each {
			each[i] = storelink.AlgoDecision(&op.Parts[i].Decision)
		}
		return storelink.AlgoDecision(&op.Decision), nil
	}
}

// HoldOp is a hold op (store.Acquire, Release or Extend) of units on key
// under c, for the hold id.
func HoldOp(kind store.Kind, key string, c algo.Concurrency, units, id int64) store.Op {
	return store.Op{Kind: kind, Key: key, Concurrency: store.Concurrency(c), Cost: units, ID: id}
}
