package console

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-go/sluice/observe"
)

// LeaseKey is one key's leased budget: what the store's slices of it hold
// in this process (redisstore.KeyLease).
type LeaseKey struct {
	Key string `json:"key"`
	// Held is the units the key's live slices hold, Slices how many there
	// are (0 to 2), ExpiresInUS when the first ends (µs from now).
	Held        int64 `json:"held"`
	Slices      int   `json:"slices"`
	ExpiresInUS int64 `json:"expires_in_us"`
	// Demand is the units this process asked for on the key over the last
	// slice horizon (a quarter of the lease's life).
	Demand int64 `json:"demand"`
}

// StoreLeases is one store's leased budgets (redisstore.LeaseStats, and
// the keys holding the most).
type StoreLeases struct {
	// Store is the store's label: main, per_second.
	Store string `json:"store"`
	// Keys is how many keys the lease table follows; Held the units its
	// slices hold now: spent in Redis, not yet admitted.
	Keys int   `json:"keys"`
	Held int64 `json:"held"`
	// Local counts decisions made from slices, Redis the decisions on
	// leasable keys made in Redis.
	Local int64 `json:"local"`
	Redis int64 `json:"redis"`
	// Slices counts the slices taken, Leased their units, GivenBack the
	// units given back and Expired the units dropped unspent (the
	// under-admission).
	Slices    int64 `json:"slices"`
	Leased    int64 `json:"leased"`
	GivenBack int64 `json:"given_back"`
	Expired   int64 `json:"expired"`
	// Top are the keys whose slices hold the most, at most Options.TopK.
	Top []LeaseKey `json:"top"`
	// Points are the decisions and slices per second (or minute) from
	// Live's since on, as Console.Sample counted them; empty without it.
	Points []LeasePoint `json:"points"`
}

// LeasePoint is one second (or minute) of a store's leases: the decisions
// made from slices (Local) and in Redis (Redis), and the slices taken.
type LeasePoint struct {
	T      int64 `json:"t"`
	Local  int64 `json:"local"`
	Redis  int64 `json:"redis"`
	Slices int64 `json:"slices"`
}

// A store's lease counts are kept in a series of their own (Console.
// leaseLive), so that they have the rules' seconds, minutes and bounds:
// these are the outcomes' slots they use.
const (
	leaseLocal  = observe.Allowed
	leaseRedis  = observe.Denied
	leaseSlices = observe.ShadowDenied
)

// leasePoints are a lease series' points.
func leasePoints(pts []Point) []LeasePoint {
	out := make([]LeasePoint, len(pts))
	for i, p := range pts {
		out[i] = LeasePoint{T: p.T, Local: p.Allowed, Redis: p.Denied, Slices: p.ShadowDenied}
	}
	return out
}

// leaseSampler holds the lease counters last sampled, by store.
type leaseSampler struct {
	mu   sync.Mutex
	last map[string][3]int64 // local, redis, slices
}

// SampleLeases counts, in the current second, the decisions and slices
// each leasing store made since the last sample (Options.Leases); the
// first sample of a store only notes its counters. Sample calls it once a
// second.
func (c *Console) SampleLeases() {
	if c.leases == nil {
		return
	}
	stores := c.leases(0)
	now := c.unix()
	c.sampler.mu.Lock()
	defer c.sampler.mu.Unlock()
	for _, st := range stores {
		cur := [3]int64{st.Local, st.Redis, st.Slices}
		last, seen := c.sampler.last[st.Store]
		c.sampler.last[st.Store] = cur
		if !seen { // the counters so far, of no second in particular
			continue
		}
		var n [len(observe.Outcomes)]int64
		n[leaseLocal], n[leaseRedis], n[leaseSlices] = cur[0]-last[0], cur[1]-last[1], cur[2]-last[2]
		if n[leaseLocal] < 0 || n[leaseRedis] < 0 || n[leaseSlices] < 0 {
			n = [len(observe.Outcomes)]int64{} // counters gone back (a new store): start over
		}
		c.leaseLive.get(st.Store).addCounts(now, &n)
	}
}

// Sample calls SampleLeases now, then once a second until ctx ends: the
// leases' chart is drawn from these samples.
func (c *Console) Sample(ctx context.Context) {
	c.SampleLeases()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.SampleLeases()
		}
	}
}

// CallsPer100 is the Redis calls (decisions in Redis and slices taken) per
// 100 decisions on leasable keys, with one decimal; "" before any.
func (s StoreLeases) CallsPer100() string {
	if s.Local+s.Redis == 0 {
		return ""
	}
	return formatTenths(1000 * (s.Redis + s.Slices) / (s.Local + s.Redis))
}

// formatTenths formats n tenths with one decimal.
func formatTenths(n int64) string {
	return strconv.FormatInt(n/10, 10) + "." + strconv.FormatInt(n%10, 10)
}

// HeldKey is one key's concurrency leases (serve's /v1/acquire).
type HeldKey struct {
	Key string `json:"key"`
	// Limit is the limit of the key's last acquire; Held the units this
	// instance's leases hold now, Leases how many they are.
	Limit  int64 `json:"limit"`
	Held   int64 `json:"held"`
	Leases int   `json:"leases"`
	// HeldAll is the units every instance of the store holds on the key,
	// as the store last answered (at most a second ago); nil (left out)
	// when unknown.
	HeldAll *int64 `json:"held_all,omitempty"`
	// OldestUS is how long the oldest lease held has been held, and
	// NextExpiryUS how long until the first comes back by itself, µs.
	OldestUS     int64 `json:"oldest_us"`
	NextExpiryUS int64 `json:"next_expiry_us"`
	// Acquired, Refused, Released and Expired count the key's acquires
	// granted and refused, its leases released, and those that came back
	// by themselves.
	Acquired int64 `json:"acquired"`
	Refused  int64 `json:"refused"`
	Released int64 `json:"released"`
	Expired  int64 `json:"expired"`
	// Partial: the key held more leases at once than are followed one by
	// one, so Held and Leases may be short.
	Partial bool `json:"partial"`
}

// HeldAllText is HeldAll as the slots table shows it: "—" when unknown.
func (k HeldKey) HeldAllText() string {
	if k.HeldAll == nil {
		return "—"
	}
	return strconv.FormatInt(*k.HeldAll, 10)
}

// Slots is what the console shows of the concurrency leases held.
type Slots struct {
	// Keys is how many keys are followed, Held the units they hold now,
	// Dropped how many keys were no longer followed to make room.
	Keys    int   `json:"keys"`
	Held    int64 `json:"held"`
	Dropped int64 `json:"dropped"`
	// Bytes is what the view holds, its keys and leases together, and
	// MaxBytes the most it may (the service's view-bytes).
	Bytes    int64 `json:"bytes"`
	MaxBytes int64 `json:"max_bytes"`
	// Bound is the last of the view's bounds a key or a lease met, and
	// the flag that raises it; "" (left out) when none was.
	Bound string `json:"bound,omitempty"`
	// Top are the keys holding the most units now, at most Options.TopK.
	Top []HeldKey `json:"top"`
}

// holding is the part of a Live report about what is held: leased budgets
// and concurrency slots. It is small (Options.TopK keys each), so it is
// written by encoding/json after the hand-written rest (appendLive).
type holding struct {
	// LeasesOn says whether the stores lease (Options.Leases); Leases
	// holds each leasing store's.
	LeasesOn bool          `json:"leases_on"`
	Leases   []StoreLeases `json:"leases"`
	// Slots are the concurrency leases held; nil (left out) without
	// Options.Slots.
	Slots *Slots `json:"slots,omitempty"`
}

// holding returns what is held now, each list at most c.topN long, and
// the leases' points, read by pts.
func (c *Console) holding(pts func(*series) []Point) holding {
	h := holding{Leases: []StoreLeases{}}
	if c.leases != nil {
		if l := c.leases(c.topN); l != nil {
			h.Leases, h.LeasesOn = l, true
		}
		for i := range h.Leases {
			st := &h.Leases[i]
			st.Top = append([]LeaseKey{}, st.Top[:min(len(st.Top), c.topN)]...)
			st.Points = []LeasePoint{}
			if s := (*c.leaseLive.m.Load())[st.Store]; s != nil {
				st.Points = leasePoints(pts(s))
			}
		}
	}
	if c.slots != nil {
		s := c.slots(c.topN)
		s.Top = append([]HeldKey{}, s.Top[:min(len(s.Top), c.topN)]...)
		s.MaxBytes = c.lim.ViewBytes
		h.Slots = &s
	}
	return h
}

// appendHolding appends h's fields as the tail of a JSON object: a comma,
// then each field.
func appendHolding(b []byte, h *holding) []byte {
	j, err := json.Marshal(h)
	if err != nil || len(j) < 2 { // only plain values: never fails
		return b
	}
	b = append(b, ',')
	return append(b, j[1:len(j)-1]...)
}

// durUS formats µs as a duration rounded to a tenth of a second (a
// millisecond under a second).
func durUS(us int64) string {
	d := time.Duration(us) * time.Microsecond
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}
