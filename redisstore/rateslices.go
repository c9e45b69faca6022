package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-go/sluice/internal/redisrun"
)

// A RateClaim is what a holder asks of one shared rate (ClaimRates): a
// slice of Rate, which all the holders of the rate share.
type RateClaim struct {
	// Key names the rate (the store's prefix goes before it).
	Key string
	// Rate is the rate the holders share; Want the slice asked for, at
	// least what the holder's own grants from its slice still hold.
	Rate, Want int64
	// Demand and Weight (at least 1) are what the holder's own users
	// want and weigh: the fair shares follow them (weighted max-min).
	Demand, Weight int64
}

// A RateSlice is the store's answer to a RateClaim.
type RateSlice struct {
	// Tokens is the slice leased: at most the claim's Want and what the
	// other holders' slices leave of the rate, at least the smaller of
	// Want and the slice the holder held.
	Tokens int64
	// Fair is the holder's weighted max-min share of the rate by the
	// demands of every holder whose slice has not ended.
	Fair int64
	// Err is why this claim got no answer (the slice held stays as it
	// was until it ends).
	Err error
}

// MaxRateClaims is how many claims one script takes: a longer list is
// sent as several scripts, so that none holds Redis long.
const MaxRateClaims = 256

// ErrRateClaim is what a claim ClaimRates cannot send wraps.
var ErrRateClaim = errors.New("redisstore: rate claim")

// rateSlicesScript is scripts/rate_slices.lua.
var rateSlicesScript = redisrun.NewScript(mustRead("rate_slices.lua"))

// ClaimRates leases holder its slices of shared rates, one per claim, in
// one script per group of keys (a Redis Cluster's hash slot) and at most
// MaxRateClaims, up to 16 scripts at once: at every instant the slices of
// a rate, over every holder, add up to at most the rate. Each slice lasts
// life from now (µs; -1 for Redis's TIME, the clock every holder must
// then share), and a holder's slice counts against the others' until it
// ends, whatever becomes of the holder. Holder names one holder among all
// that share the store (a replica's random name), 1 to 256 bytes. sluice
// serve --rlqs shares its budgets across replicas with it (docs/rlqs.md).
func (s *Store) ClaimRates(ctx context.Context, holder string, now int64, life time.Duration, claims []RateClaim) []RateSlice {
	out := make([]RateSlice, len(claims))
	lifeUS := life.Microseconds()
	bad := func(i int, why string) { out[i].Err = fmt.Errorf("%w %q: %s", ErrRateClaim, claims[i].Key, why) }
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
		}
		g, ok := s.group(s.rateKey(c.Key))
		at, seen := byGroup[g]
		if !ok || !seen || len(groups[at]) >= MaxRateClaims {
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

// rateClaimsInFlight is how many of ClaimRates's scripts run at once (a
// Redis Cluster's budgets are in as many slots).
const rateClaimsInFlight = 16

// claimGroup runs the script over the claims of indices g, one group's,
// and sets their answers in out.
func (s *Store) claimGroup(ctx context.Context, holder string, now, lifeUS int64, claims []RateClaim, g []int, out []RateSlice) {
	c := &redisrun.Call{Script: rateSlicesScript, Keys: make([]string, 0, len(g)), Args: make([]any, 0, 3+4*len(g))}
	c.Args = append(c.Args, holder, now, lifeUS)
	for _, i := range g {
		cl := claims[i]
		c.Keys = append(c.Keys, s.rateKey(cl.Key))
		c.Args = append(c.Args, cl.Rate, cl.Want, cl.Demand, cl.Weight)
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
