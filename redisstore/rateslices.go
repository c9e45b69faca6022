package redisstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-go/sluice/internal/rateslice"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/store"
)

func init() {
	rateslice.For = func(st store.Store) rateslice.Func {
		if s, ok := st.(*Store); ok && s != nil {
			return s.claimRates
		}
		return nil
	}
}

// rateSlicesScript is scripts/rate_slices.lua.
var rateSlicesScript = redisrun.NewScript(mustRead("rate_slices.lua"))

// claimRates is the store's rateslice.Func: one script per group of keys
// (a Redis Cluster's hash slot) and at most rateslice.MaxClaims, up to 16
// scripts at once; life -1 is Redis's TIME. sluice serve --rlqs shares
// its budgets across replicas with it (docs/rlqs.md).
func (s *Store) claimRates(ctx context.Context, holder string, now int64, life time.Duration, claims []rateslice.Claim) []rateslice.Slice {
	out := make([]rateslice.Slice, len(claims))
	lifeUS := life.Microseconds()
	bad := func(i int, why string) { out[i].Err = fmt.Errorf("%w %q: %s", rateslice.ErrClaim, claims[i].Key, why) }
	// groups of claims' indices, one script each
	var groups [][]int
	byGroup := map[uint64]int{}
	for i, c := range claims {
		switch {
		case holder == "" || len(holder) > 256:
			bad(i, "want a holder of 1 to 256 bytes")
			continue
		case lifeUS < 1:
			bad(i, "want a life of 1µs or more")
			continue
		case c.Rate < 0 || c.Want < 0 || c.Demand < 0 || c.Weight < 1:
			bad(i, fmt.Sprintf("rate %d, want %d, demand %d, weight %d: want no negative figure and a weight of 1 or more", c.Rate, c.Want, c.Demand, c.Weight))
			continue
		case c.Rate > rateslice.MaxRate || c.Want > rateslice.MaxRate || c.Demand > rateslice.MaxRate:
			bad(i, fmt.Sprintf("rate %d, want %d, demand %d: want %d at most", c.Rate, c.Want, c.Demand, int64(rateslice.MaxRate)))
			continue
		case c.Unit < time.Second || c.Unit > rateslice.MaxUnit || c.Unit%time.Second != 0:
			bad(i, fmt.Sprintf("unit %v: want whole seconds from 1s to %v", c.Unit, rateslice.MaxUnit))
			continue
		}
		g, ok := s.group(s.rateKey(c.Key))
		at, seen := byGroup[g]
		if !ok || !seen || len(groups[at]) >= rateslice.MaxClaims {
			groups = append(groups, nil)
			at = len(groups) - 1
			if ok {
				byGroup[g] = at
			}
		}
		groups[at] = append(groups[at], i)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, rateClaimsInFlight)
	for _, g := range groups {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			s.claimGroup(ctx, holder, now, lifeUS, claims, g, out)
		}()
	}
	wg.Wait()
	return out
}

// rateClaimsInFlight is how many of claimRates's scripts run at once (a
// Redis Cluster's budgets are in as many slots).
const rateClaimsInFlight = 16

// claimGroup runs the script over the claims of indices g, one group's,
// and sets their answers in out.
func (s *Store) claimGroup(ctx context.Context, holder string, now, lifeUS int64, claims []rateslice.Claim, g []int, out []rateslice.Slice) {
	c := &redisrun.Call{Script: rateSlicesScript, Keys: make([]string, 0, len(g)), Args: make([]any, 0, 3+5*len(g))}
	c.Args = append(c.Args, holder, now, lifeUS)
	for _, i := range g {
		cl := claims[i]
		c.Keys = append(c.Keys, s.rateKey(cl.Key))
		c.Args = append(c.Args, cl.Rate, cl.Want, cl.Demand, cl.Weight, int64(cl.Unit/time.Second))
	}
	err := s.call(ctx, c)
	if err == nil && len(c.Reply) != 2*len(g)+1 {
		err = fmt.Errorf("%w: rate slices script replied %d values for %d claims", redisrun.ErrBadReply, len(c.Reply), len(g))
	}
	for k, i := range g {
		if err != nil {
			out[i].Err = err
			continue
		}
		out[i].Tokens, out[i].Fair = c.Reply[2*k], c.Reply[2*k+1]
	}
}
