package console

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-go/sluice/observe"
)

// SliceKey is one key's slices: what the store's slices of its budget
// hold in this process (redisstore.WithSlices).
type SliceKey struct {
	Key string `json:"key"`
	// Held is the units the key's live slices hold, Slices how many there
	// are (0 to 2), ExpiresInUS when the first ends (µs from now).
	Held        int64 `json:"held"`
	Slices      int   `json:"slices"`
	ExpiresInUS int64 `json:"expires_in_us"`
	// Demand is the units this process asked for on the key over the last
	// slice horizon (a quarter of a slice's life).
	Demand int64 `json:"demand"`
}

// StoreSlices is one store's slices of budgets (redisstore's SliceStats,
// and the keys holding the most).
type StoreSlices struct {
	// Store is the store's label: main, per_second.
	Store string `json:"store"`
	// Keys is how many keys the slice table follows; Held the units its
	// slices hold now: spent in Redis, not yet admitted.
	Keys int   `json:"keys"`
	Held int64 `json:"held"`
	// Local counts decisions made from slices, Redis the decisions on
	// keys that may be sliced made in Redis.
	Local int64 `json:"local"`
	Redis int64 `json:"redis"`
	// Taken counts the slices taken, Units their units, GivenBack the
	// units given back and Expired the units dropped unspent (the
	// under-admission).
	Taken     int64 `json:"taken"`
	Units     int64 `json:"units"`
	GivenBack int64 `json:"given_back"`
	Expired   int64 `json:"expired"`
	// Top are the keys whose slices hold the most, at most Options.TopK.
	Top []SliceKey `json:"top"`
	// Points are the decisions and slices per second (or minute) from
	// Live's since on, as Console.Sample counted them; empty without it.
	Points []SlicePoint `json:"points"`
}

// SlicePoint is one second (or minute) of a store's slices: the decisions
// made from slices (Local) and in Redis (Redis), and the slices taken.
type SlicePoint struct {
	T     int64 `json:"t"`
	Local int64 `json:"local"`
	Redis int64 `json:"redis"`
	Taken int64 `json:"taken"`
}

// A store's slice counts are kept in a series of their own (Console.
// sliceLive), so that they have the rules' seconds, minutes and bounds:
// these are the outcomes' slots they use.
const (
	sliceLocal = observe.Allowed
	sliceRedis = observe.Denied
	sliceTaken = observe.ShadowDenied
)

// slicePoints are a slice series' points.
func slicePoints(pts []Point) []SlicePoint {
	out := make([]SlicePoint, len(pts))
	for i, p := range pts {
		out[i] = SlicePoint{T: p.T, Local: p.Allowed, Redis: p.Denied, Taken: p.ShadowDenied}
	}
	return out
}

// sliceSampler holds the slice counters last sampled, by store.
type sliceSampler struct {
	mu   sync.Mutex
	last map[string][3]int64 // local, redis, taken
}

// SampleSlices counts, in the current second, the decisions and slices
// each slicing store made since the last sample (Options.Slices); the
// first sample of a store only notes its counters. Sample calls it once a
// second.
func (c *Console) SampleSlices() {
	if c.slices == nil {
		return
	}
	stores := c.slices(0)
	now := c.unix()
	c.sampler.mu.Lock()
	defer c.sampler.mu.Unlock()
	for _, st := range stores {
		cur := [3]int64{st.Local, st.Redis, st.Taken}
		last, seen := c.sampler.last[st.Store]
		c.sampler.last[st.Store] = cur
		if !seen { // the counters so far, of no second in particular
			continue
		}
		var n [len(observe.Outcomes)]int64
		n[sliceLocal], n[sliceRedis], n[sliceTaken] = cur[0]-last[0], cur[1]-last[1], cur[2]-last[2]
		if n[sliceLocal] < 0 || n[sliceRedis] < 0 || n[sliceTaken] < 0 {
			n = [len(observe.Outcomes)]int64{} // counters gone back (a new store): start over
		}
		c.sliceLive.get(st.Store).addCounts(now, &n)
	}
}

// Sample calls SampleSlices now, then once a second until ctx ends: the
// slices' chart is drawn from these samples.
func (c *Console) Sample(ctx context.Context) {
	c.SampleSlices()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.SampleSlices()
		}
	}
}

// CallsPer100 is the Redis calls (decisions in Redis and slices taken) per
// 100 decisions on keys that may be sliced, with one decimal; "" before
// any.
func (s StoreSlices) CallsPer100() string {
	if s.Local+s.Redis == 0 {
		return ""
	}
	return formatTenths(1000 * (s.Redis + s.Taken) / (s.Local + s.Redis))
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
	return orDash(k.HeldAll, func(n int64) string { return strconv.FormatInt(n, 10) })
}

// orDash is f(*p), or "—" when p is nil: a figure not known.
func orDash[T any](p *T, f func(T) string) string {
	if p == nil {
		return "—"
	}
	return f(*p)
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

// holding is the part of a Live report about what is held: slices of
// budgets and concurrency slots. It is small (Options.TopK keys each), so it is
// written by encoding/json after the hand-written rest (appendLive).
type holding struct {
	// SlicesOn says whether the stores slice budgets (Options.Slices);
	// Slices holds each slicing store's.
	SlicesOn bool          `json:"slices_on"`
	Slices   []StoreSlices `json:"slices"`
	// Slots are the concurrency leases held; nil (left out) without
	// Options.Slots.
	Slots *Slots `json:"slots,omitempty"`
}

// holding returns what is held now, each list at most c.topN long, and
// the slices' points, read by pts.
func (c *Console) holding(pts func(*series) []Point) holding {
	h := holding{Slices: []StoreSlices{}}
	if c.slices != nil {
		if l := c.slices(c.topN); l != nil {
			h.Slices, h.SlicesOn = l, true
		}
		for i := range h.Slices {
			st := &h.Slices[i]
			st.Top = append([]SliceKey{}, st.Top[:min(len(st.Top), c.topN)]...)
			st.Points = []SlicePoint{}
			if s := (*c.sliceLive.m.Load())[st.Store]; s != nil {
				st.Points = slicePoints(pts(s))
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
