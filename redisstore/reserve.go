package redisstore

import (
	"context"
	"fmt"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/internal/storelink"
)

// reserveScripts decide for a class with a reserve (scripts/reserve.lua),
// one per algorithm, as single.lua's are.
var reserveScripts = func() (s [algo.AlignedWindow + 1]*redisrun.Script) {
	for _, k := range algo.Kinds() {
		step := mustRead(stepFiles[k])
		if k == algo.GCRA || k == algo.LeakyBucket {
			step = mustRead("timestamp.lua") + step
		}
		s[k] = redisrun.NewScript(prelude() + mustRead("guard.lua") + step + mustRead("class.lua") + mustRead("reserve.lua"))
	}
	return s
}()

var _ storelink.Reserver = (*engine)(nil)

// TakeReserving decides req leaving reserve units, at the server's time
// unless the store has the caller's, under the failure policy as Take.
func (e *engine) TakeReserving(ctx context.Context, req storelink.Request, reserve int64) (storelink.Result, error) {
	s := (*Store)(e)
	now, err := s.clock()
	if err != nil {
		return storelink.Result{}, err
	}
	d, err := s.reserving(ctx, &req, reserve, now)
	return s.settle(&d, err, func() (storelink.Result, error) {
		return s.local.(storelink.Reserver).TakeReserving(ctx, req, reserve)
	})
}

// TakeReservingAt decides req leaving reserve units at now, with no
// failure policy.
func (e *engine) TakeReservingAt(ctx context.Context, req storelink.Request, reserve, now int64) (algo.Decision, error) {
	if err := algo.CheckTime(now); err != nil {
		return algo.Decision{}, err
	}
	return (*Store)(e).reserving(ctx, &req, reserve, now)
}

// reserving sends one reserve.lua call through the store's runner (batched
// with the calls around it).
func (s *Store) reserving(ctx context.Context, req *storelink.Request, reserve, now int64) (algo.Decision, error) {
	l := limitOf(&req.Params, req.MaxDelay)
	c := &redisrun.Call{
		Script: reserveScripts[l.kind],
		Keys:   []string{s.prefix + req.Key},
		Args:   []any{l.kind, l.rate, l.period, l.burst, req.Cost, l.maxDelay, now, s.margin, reserve},
	}
	if err := s.call(ctx, c); err != nil {
		return algo.Decision{}, err
	}
	if len(c.Reply) != width {
		return algo.Decision{}, fmt.Errorf("%w: reserve script replied %v", redisrun.ErrBadReply, c.Reply)
	}
	return decisionOf(c.Reply, c.Keys[0])
}
