package redisstore

import (
	"context"
	"fmt"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/store"
)

// headroomScripts decide for a class that leaves headroom to higher ones
// (scripts/headroom.lua), one per algorithm, as single.lua's are.
var headroomScripts = func() (s [algo.AlignedWindow + 1]*redisrun.Script) {
	for _, k := range algo.Kinds() {
		s[k] = redisrun.NewScript(prelude() + mustRead("guard.lua") + stepsOf(k) + mustRead("class.lua") + mustRead("headroom.lua"))
	}
	return s
}()

// withHeadroom decides cost units of key under lim, leaving headroom units,
// at now (-1: the server's TIME) in one headroom.lua call, sent through the
// store's runner (batched with the calls around it).
func (s *Store) withHeadroom(ctx context.Context, key string, lim *store.Limit, cost, headroom, maxDelay, now int64) (algo.Decision, error) {
	l := limitOf(lim, maxDelay)
	c := &redisrun.Call{
		Script: headroomScripts[l.kind],
		Keys:   []string{s.rateKey(key)},
		Args:   []any{l.kind, l.rate, l.period, l.burst, l.debt, cost, l.maxDelay, now, s.margin, headroom},
	}
	if err := s.call(ctx, c); err != nil {
		return algo.Decision{}, err
	}
	if len(c.Reply) != width {
		return algo.Decision{}, fmt.Errorf("%w: headroom script replied %v", redisrun.ErrBadReply, c.Reply)
	}
	return decisionOf(c.Reply, c.Keys[0])
}
