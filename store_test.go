package sluice_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/memstore"
)

// mapStore is a Store written as the Store interface's documentation says an
// outside one is: a map of algo.State under one lock, stepped by algo.
type mapStore struct {
	mu    sync.Mutex
	clock *fakeClock
	st    map[string]*algo.State
	seen  []sluice.Request
}

func newMapStore(c *fakeClock) *mapStore { return &mapStore{clock: c, st: map[string]*algo.State{}} }

func paramsOf(l sluice.Limit) algo.Params {
	return algo.Params{Kind: algo.Kind(l.Algorithm), Rate: l.Rate, Period: l.Period.Microseconds(), Burst: l.Burst}
}

func maxDelayOf(d time.Duration) int64 {
	if d == math.MaxInt64 {
		return algo.Never
	}
	return d.Microseconds()
}

func resultOf(d *algo.Decision) sluice.Result {
	us := func(v int64) time.Duration {
		if v == algo.Never {
			return math.MaxInt64
		}
		return time.Duration(v) * time.Microsecond
	}
	return sluice.Result{Allowed: d.Allowed, Remaining: d.Remaining, RetryAfter: us(d.RetryAfter), ResetAfter: us(d.ResetAfter), Delay: us(d.Delay), Window: d.Window}
}

func (m *mapStore) state(key string) *algo.State {
	s := m.st[key]
	if s == nil {
		s = &algo.State{}
		m.st[key] = s
	}
	return s
}

func (m *mapStore) Take(_ context.Context, req sluice.Request) (sluice.Result, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seen = append(m.seen, req)
	p := paramsOf(req.Limit)
	d := algo.Step(&p, m.state(req.Key), m.clock.micros(), req.Cost, maxDelayOf(req.MaxDelay))
	return resultOf(&d), nil
}

func (m *mapStore) TakeAll(_ context.Context, reqs []sluice.Request) (sluice.Result, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seen = append(m.seen, reqs...)
	now := m.clock.micros()
	next := make([]algo.State, len(reqs))
	var acc algo.Decision
	for i, r := range reqs {
		p := paramsOf(r.Limit)
		next[i] = *m.state(r.Key)
		next[i].Log = slices.Clone(next[i].Log)
		d := algo.Step(&p, &next[i], now, r.Cost, maxDelayOf(r.MaxDelay))
		if i == 0 {
			acc = d
		} else {
			algo.Combine(&acc, d)
		}
	}
	if acc.Allowed {
		for i, r := range reqs {
			if r.Cost > 0 {
				*m.state(r.Key) = next[i]
			}
		}
		return resultOf(&acc), nil
	}
	looks := make([]algo.Decision, len(reqs))
	for i, r := range reqs {
		p := paramsOf(r.Limit)
		st := *m.state(r.Key)
		looks[i] = algo.Step(&p, &st, now, 0, maxDelayOf(r.MaxDelay))
	}
	algo.Refused(&acc, looks)
	return resultOf(&acc), nil
}

func (m *mapStore) Refund(_ context.Context, req sluice.Request) (sluice.Result, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seen = append(m.seen, req)
	p := paramsOf(req.Limit)
	d, err := algo.Refund(&p, m.state(req.Key), m.clock.micros(), req.Cost, req.Window)
	return resultOf(&d), err
}

func (m *mapStore) Reset(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.st, key)
	return nil
}

// outsideEach checks the parts a Limiter over an outside store reports for
// a composite (out) against memstore's (in), made on the same state at the
// same instant: the looks find the same figures, the parts that refused are
// the ones whose look has less than their cost, with the summary's
// RetryAfter, and no part reports a Delay.
func outsideEach(sum sluice.Result, parts []sluice.Part, out, in []sluice.Result) error {
	for j := range out {
		o, w := out[j], in[j]
		if o.Allowed != w.Allowed || o.Remaining != w.Remaining || o.ResetAfter != w.ResetAfter || o.Delay != 0 {
			return fmt.Errorf("%v: part %d: outside %+v, memstore %+v", parts, j, o, w)
		}
		if !o.Allowed && o.RetryAfter != sum.RetryAfter || o.Allowed && o.RetryAfter != 0 {
			return fmt.Errorf("%v: part %d: outside %+v, summary %+v", parts, j, o, sum)
		}
	}
	return nil
}

// TestOutsideStore: a Limiter over a Store from outside the module decides
// as it does over memstore (TakeEach's parts by looks, see outsideEach), hands the store only checked requests (the zero
// Algorithm spelled TokenBucket), and keeps bad requests from it.
func TestOutsideStore(t *testing.T) {
	clock := newFakeClock()
	ms := newMapStore(clock)
	outside := sluice.New(ms, sluice.WithClock(clock))
	inside := sluice.New(memstore.New(memstore.WithClock(clock)))
	ctx := context.Background()
	limits := []sluice.Limit{
		{Rate: 3, Period: time.Second, Burst: 5}, // the zero Algorithm
		sluice.Per(7, 100*time.Millisecond).WithBurst(2).Using(sluice.GCRA),
		sluice.PerSecond(4).Using(sluice.SlidingLog),
		sluice.PerSecond(2).WithBurst(3).Using(sluice.LeakyBucket),
		sluice.PerSecond(5).Using(sluice.AlignedWindow),
	}
	rng := rand.New(rand.NewPCG(testenv.SeedOr(t, 1), 3))
	var outEach, inEach [5]sluice.Result
	for i := range 3000 {
		clock.mu.Lock()
		clock.us += rng.Int64N(300_000)
		clock.mu.Unlock()
		k := rng.IntN(len(limits))
		key, l := string(rune('a'+k)), limits[k]
		var got, want sluice.Result
		var gotErr, wantErr error
		switch rng.IntN(5) {
		case 0, 1:
			cost := rng.Int64N(4)
			got, gotErr = outside.Take(ctx, key, l, cost)
			want, wantErr = inside.Take(ctx, key, l, cost)
		case 2:
			j := (k + 1 + rng.IntN(len(limits)-1)) % len(limits)
			parts := []sluice.Part{{Key: key, Limit: l, Cost: rng.Int64N(3)}, {Key: string(rune('a' + j)), Limit: limits[j], Cost: rng.Int64N(3)}}
			got, gotErr = outside.TakeAll(ctx, parts)
			want, wantErr = inside.TakeAll(ctx, parts)
		case 4:
			parts := make([]sluice.Part, 1+rng.IntN(len(limits)))
			for j, pk := range rng.Perm(len(limits))[:len(parts)] {
				parts[j] = sluice.Part{Key: string(rune('a' + pk)), Limit: limits[pk], Cost: rng.Int64N(3)}
			}
			got, gotErr = outside.TakeEach(ctx, parts, outEach[:len(parts)])
			want, wantErr = inside.TakeEach(ctx, parts, inEach[:len(parts)])
			if err := outsideEach(got, parts, outEach[:len(parts)], inEach[:len(parts)]); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		case 3:
			units := rng.Int64N(3)
			got, gotErr = outside.Refund(ctx, key, l, units)
			want, wantErr = inside.Refund(ctx, key, l, units)
		}
		if got != want || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Fatalf("call %d: outside %+v, %v; memstore %+v, %v", i, got, gotErr, want, wantErr)
		}
	}
	for _, r := range ms.seen {
		if r.Limit.Algorithm == 0 || r.Limit.Validate() != nil || r.Key == "" || r.Cost < 0 {
			t.Fatalf("the store saw an unchecked request: %+v", r)
		}
	}
	n := len(ms.seen)
	outside.Take(ctx, "", limits[0], 1)
	outside.Take(ctx, "k", limits[0], 99)
	outside.Refund(ctx, "k", limits[2], 1) // a sliding log gives nothing back
	outside.TakeAll(ctx, []sluice.Part{{Key: "k", Limit: limits[0], Cost: 1}, {Key: "k", Limit: limits[1], Cost: 1}})
	if len(ms.seen) != n {
		t.Errorf("bad requests reached the store: %+v", ms.seen[n:])
	}
}
