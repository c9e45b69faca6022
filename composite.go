package sluice

import (
	"context"
	"fmt"
	"sync"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/store"
)

// Part is one limit of a composite request: Cost units spent on Key under
// Limit. Each part has its own cost ("1 request and 850 tokens"); a part of
// Cost 0 only looks, as Take with cost 0 does.
//
// Headroom makes the part a lower class's: the part passes only if Cost +
// Headroom units could pass, and spends only Cost, so that the last
// Headroom units are left to the classes that ask with less (SEMANTICS.md,
// "Headroom"). Its Remaining is the class's (less Headroom, at least 0).
// Cost + Headroom over the limit's capacity is an error
// (ErrCostExceedsCapacity); 0 is none. A one-part TakeAll with headroom is
// a lower class's take; like every composite's, its refusal leaves the
// key's state as it was (a Take's stores it as a changed limit reads it).
type Part struct {
	Key      string
	Limit    Limit
	Cost     int64
	Headroom int64
}

// partBufs keeps the arrays composites of up to 4 parts are built in.
// On the stack they would move to the heap anyway: the compiler, which
// does not tell an op's fields apart, sees a store's error, returned to
// the caller, as any pointer the op holds.
var partBufs = sync.Pool{New: func() any { return new([4]store.Part) }}

// fillParts checks parts for an op of kind (Take or Charge) and writes
// them into dst (as long as parts). The error says which part is wrong,
// or that two parts name one key (ErrDuplicateKey). A charge's parts
// keep no headroom: a charge is never refused.
func (l *Limiter) fillParts(dst []store.Part, parts []Part, kind store.Kind) error {
	for i := range parts {
		pt := &parts[i]
		var p algo.Params
		err := l.partParams(&pt.Limit, &p)
		headroom := pt.Headroom
		switch {
		case err != nil:
		case kind == store.Charge:
			err, headroom = storelink.CheckCharge(pt.Key, &p, pt.Cost), 0
		default:
			err = storelink.Check(pt.Key, &p, pt.Cost)
		}
		if err == nil && headroom != 0 {
			err = storelink.CheckHeadroom(&p, pt.Cost, headroom)
		}
		if err != nil {
			return storelink.PartError(i, pt.Key, err)
		}
		q := &dst[i]
		q.Key, q.Cost, q.Headroom = pt.Key, pt.Cost, headroom
		storelink.SetLimit(&q.Limit, &p)
	}
	// The keys are checked in dst: checked in parts, the caller's slice
	// would move to the heap.
	return storelink.CheckComposite(dst, func(p *store.Part) string { return p.Key })
}

// partsOf returns n parts, from partBufs when they fit, and the array
// to give back with putParts (nil when made).
func partsOf(n int) ([]store.Part, *[4]store.Part) {
	if n > 4 {
		return make([]store.Part, n), nil
	}
	buf := partBufs.Get().(*[4]store.Part)
	return buf[:n], buf
}

// putParts gives buf back to partBufs, cleared.
func putParts(buf *[4]store.Part) {
	if buf != nil {
		*buf = [4]store.Part{}
		partBufs.Put(buf)
	}
}

// TakeAll asks whether every part may spend its cost (a global budget and a
// per-chat one, say) and spends on all only if all grant: a refusal spends
// nothing anywhere. It returns the summary, the fold of the parts'
// results: Allowed when all are, the smallest Remaining, the largest
// RetryAfter, ResetAfter and Delay.
//
// Unless each is nil (len(each) must then be len(parts)), each[i] gets part
// i's own result, taken at the decision's instant. Admitted, each[i] is
// part i's result after spending its cost. Refused, nothing was spent, so
// each[i] describes part i as it is (its Remaining and ResetAfter, Delay
// 0), and each[i].Allowed reports whether part i alone would have granted
// its cost at that instant: the parts that would not (at least one) carry
// their own RetryAfter, the others 0. On the error's side, each is zeroed.
//
// A Limiter over memstore makes composites of up to 4 parts without
// allocating. A Redis Cluster composite whose keys are in different slots
// has no single instant (SEMANTICS.md): it is taken in turn and given back.
func (l *Limiter) TakeAll(ctx context.Context, parts []Part, each []Result) (Result, error) {
	if each != nil && len(each) != len(parts) {
		return Result{}, fmt.Errorf("%w: TakeAll needs one Result for each part: %d parts, %d results", ErrInvalidLimit, len(parts), len(each))
	}
	clear(each)
	ps, buf := partsOf(len(parts))
	defer putParts(buf)
	if err := l.fillParts(ps, parts, store.Take); err != nil {
		return Result{}, err
	}
	ops := [1]store.Op{{Kind: store.Take, Parts: ps, MaxDelay: store.Never, SummaryOnly: each == nil}}
	l.run(ctx, ops[:])
	return answerParts(&ops[0], each)
}

// answerParts is answer for a composite, writing each part's result into
// each (unless it is nil).
func answerParts(op *store.Op, each []Result) (Result, error) {
	var r Result
	err := answer(op, &r)
	if err == nil {
		for i := range each {
			each[i] = Result{}
			setResult(&each[i], &op.Parts[i].Decision)
			each[i].Degraded = r.Degraded
		}
	}
	return r, err
}

// WaitAll is Wait for a composite request: it blocks until every part
// grants at once, and returns at once with ErrDeadline, spending nothing,
// when that cannot happen before the context's deadline. Unless each is nil,
// each[i] gets part i's result from the last decision made, as TakeAll
// gives it: the one that admitted the request, or the last one that refused
// it (when WaitAll returns ErrDeadline, or the context's error while it
// waited after a refusal). each is zeroed when no decision was made.
func (l *Limiter) WaitAll(ctx context.Context, parts []Part, each []Result) (Result, error) {
	if each != nil && len(each) != len(parts) {
		return Result{}, fmt.Errorf("%w: WaitAll needs one Result for each part: %d parts, %d results", ErrInvalidLimit, len(parts), len(each))
	}
	clear(each)
	ps := make([]store.Part, len(parts))
	if err := l.fillParts(ps, parts, store.Take); err != nil {
		return Result{}, err
	}
	var ops [1]store.Op
	return l.wait(ctx, false, func(maxDelay int64) (Result, error) {
		for i := range ps {
			ps[i].Decision = store.Decision{}
		}
		ops[0] = store.Op{Kind: store.Take, Parts: ps, MaxDelay: maxDelay, SummaryOnly: each == nil}
		l.run(ctx, ops[:])
		return answerParts(&ops[0], each)
	})
}

// ChargeAll is Charge for a composite: every part is charged its Cost,
// none refused, in one decision (the tokens an LLM call used, charged to
// the API key's budget and the organisation's). A part's Headroom is
// ignored. The summary folds the parts' results as TakeAll's does: Allowed
// when every part could owe all of its charge, the smallest (most
// negative) Remaining, the largest RetryAfter (when the most indebted
// part is paid) and ResetAfter. Unless each is nil (len(each) must then be
// len(parts)), each[i] gets part i's own result. Only TokenBucket, GCRA,
// FixedWindow and AlignedWindow can be charged: a part under another
// algorithm is an error wrapping ErrNoRefund, and nothing is charged.
func (l *Limiter) ChargeAll(ctx context.Context, parts []Part, each []Result) (Result, error) {
	if each != nil && len(each) != len(parts) {
		return Result{}, fmt.Errorf("%w: ChargeAll needs one Result for each part: %d parts, %d results", ErrInvalidLimit, len(parts), len(each))
	}
	clear(each)
	ps, buf := partsOf(len(parts))
	defer putParts(buf)
	if err := l.fillParts(ps, parts, store.Charge); err != nil {
		return Result{}, err
	}
	ops := [1]store.Op{{Kind: store.Charge, Parts: ps, SummaryOnly: each == nil}}
	l.run(ctx, ops[:])
	return answerParts(&ops[0], each)
}
