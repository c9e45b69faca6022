// Package storeapi converts between the root package's Store interface and
// the checked requests the stores of this module decide (core.Request), for
// the stores' exported methods, their sealed engines and the module's tools
// and tests.
package storeapi

import (
	"context"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/internal/core"
)

// Params returns l in the form the steps take, or an error wrapping
// sluice.ErrInvalidLimit.
func Params(l sluice.Limit) (algo.Params, error) {
	return core.Params(uint8(l.Algorithm), l.Rate, l.Period, l.Burst)
}

// Request checks r as a Limiter does and returns it in core's form: the
// exported methods of a store take requests no Limiter has checked.
func Request(r *sluice.Request) (core.Request, error) {
	p, err := Params(r.Limit)
	if err == nil {
		err = core.Check(r.Key, p, r.Cost)
	}
	if err != nil {
		return core.Request{}, err
	}
	md, err := core.MaxDelay(r.MaxDelay)
	return core.Request{Key: r.Key, Params: p, Cost: r.Cost, MaxDelay: md}, err
}

// RefundRequest is Request for a refund.
func RefundRequest(r *sluice.Request) (core.Request, error) {
	p, err := Params(r.Limit)
	if err == nil {
		err = core.CheckRefund(r.Key, &p, r.Cost)
	}
	if err != nil {
		return core.Request{}, err
	}
	return core.Request{Key: r.Key, Params: p, Cost: r.Cost, MaxDelay: algo.Never}, nil
}

// Requests is Request for the parts of a composite.
func Requests(rs []sluice.Request) ([]core.Request, error) {
	out := make([]core.Request, len(rs))
	for i := range rs {
		r, err := Request(&rs[i])
		if err != nil {
			return nil, core.PartError(i, rs[i].Key, err)
		}
		out[i] = r
	}
	if err := core.CheckComposite(out, func(r *core.Request) string { return r.Key }); err != nil {
		return nil, err
	}
	return out, nil
}

// Public returns r in the root package's terms.
func Public(r *core.Request) sluice.Request {
	return sluice.Request{
		Key:      r.Key,
		Limit:    sluice.Limit{Algorithm: sluice.Algorithm(r.Params.Kind), Rate: r.Params.Rate, Period: core.Duration(r.Params.Period), Burst: r.Params.Burst},
		Cost:     r.Cost,
		MaxDelay: core.Duration(r.MaxDelay),
	}
}

// Publics is Public for the parts of a composite.
func Publics(rs []core.Request) []sluice.Request {
	out := make([]sluice.Request, len(rs))
	for i := range rs {
		out[i] = Public(&rs[i])
	}
	return out
}

// Result converts a step's decision into a Result.
func Result(d *algo.Decision) sluice.Result {
	return sluice.Result{
		Allowed:    d.Allowed,
		Remaining:  d.Remaining,
		RetryAfter: core.Duration(d.RetryAfter),
		ResetAfter: core.Duration(d.ResetAfter),
		Delay:      core.Duration(d.Delay),
		Window:     d.Window,
	}
}

// At is the part of memstore's sealed engine that decides at a given time,
// for replays, simulations and tests: its requests must be checked.
type At interface {
	TakeAt(req core.Request, now int64) (algo.Decision, error)
	TakeAllAt(reqs []core.Request, now int64) (algo.Decision, error)
}

// MemAt returns the At of a *memstore.Store (nil for another value).
func MemAt(store any) At {
	a, _ := core.Unseal(store).(At)
	return a
}

// ContextAt is the part of redisstore's sealed engine that decides at a
// given time, for replays and tests: its requests must be checked (the time
// is checked, as a negative one would mean the server's).
type ContextAt interface {
	TakeAt(ctx context.Context, req core.Request, now int64) (algo.Decision, error)
	TakeAllAt(ctx context.Context, reqs []core.Request, now int64) (algo.Decision, error)
}

// RedisAt returns the ContextAt of a *redisstore.Store (nil for another
// value).
func RedisAt(store any) ContextAt {
	a, _ := core.Unseal(store).(ContextAt)
	return a
}

// Each is the part of a sealed engine that reports each part of a composite
// (sluice.Limiter.TakeEach): each is as long as reqs.
type Each interface {
	TakeEach(ctx context.Context, reqs []core.Request, each []sluice.Result) (sluice.Result, error)
}

// EachOf returns the Each of a store of this module (nil for another value).
func EachOf(store any) Each {
	e, _ := core.Unseal(store).(Each)
	return e
}

// EachAt is At's composite that also reports each part's decision (see
// model.TakeEach): each is as long as reqs.
type EachAt interface {
	TakeEachAt(reqs []core.Request, now int64, each []algo.Decision) (algo.Decision, error)
}

// MemEachAt returns the EachAt of a *memstore.Store (nil for another value).
func MemEachAt(store any) EachAt {
	a, _ := core.Unseal(store).(EachAt)
	return a
}

// ContextEachAt is EachAt for redisstore.
type ContextEachAt interface {
	TakeEachAt(ctx context.Context, reqs []core.Request, now int64, each []algo.Decision) (algo.Decision, error)
}

// RedisEachAt returns the ContextEachAt of a *redisstore.Store (nil for
// another value).
func RedisEachAt(store any) ContextEachAt {
	a, _ := core.Unseal(store).(ContextEachAt)
	return a
}

// Clock is a sluice.Clock that reads microseconds since the epoch from now
// and sleeps by returning at once (ctx's error, if any): for replays and
// tests whose time moves by hand.
func Clock(now func() int64) sluice.Clock { return microClock(now) }

type microClock func() int64

func (c microClock) Now() time.Time { return time.UnixMicro(c()) }

func (microClock) Sleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

// Micros returns the clock's time as microseconds since the epoch, without
// a time.Time: memstore reads it so.
func (c microClock) Micros() int64 { return c() }

// TimeClock is Clock for a clock that reads a time.Time.
func TimeClock(now func() time.Time) sluice.Clock { return timeClock(now) }

type timeClock func() time.Time

func (c timeClock) Now() time.Time { return c() }

func (timeClock) Sleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }
