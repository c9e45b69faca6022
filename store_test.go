package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/store"
)

// mapStore is a store.Store written from outside the module, as package
// store's documentation says one may be: a map of each key's State, as
// bytes, under one lock, decided by store.Apply. It holds no concurrency
// limits: it answers them errors.ErrUnsupported, as a store that cannot do
// an op does.
type mapStore struct {
	mu    sync.Mutex
	clock *fakeClock
	st    map[store.Key][]byte
	seen  []store.Op
}

var _ store.Store = (*mapStore)(nil)

func newMapStore(c *fakeClock) *mapStore { return &mapStore{clock: c, st: map[store.Key][]byte{}} }

func paramsOf(l *store.Limit) algo.Params {
	return algo.Params{Kind: algo.Kind(l.Algorithm), Rate: l.Rate, Period: l.Period, Burst: l.Burst, Debt: l.Debt}
}

func (m *mapStore) Run(_ context.Context, ops []store.Op) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range ops {
		m.run(&ops[i])
	}
}

// run loads op's states, applies it, and saves what changed.
func (m *mapStore) run(op *store.Op) {
	seen := *op
	seen.Parts = slices.Clone(op.Parts) // Run keeps nothing of an op
	m.seen = append(m.seen, seen)
	switch op.Kind {
	case store.Acquire, store.Release, store.Extend:
		op.Err = fmt.Errorf("mapStore: op %d: %w", op.Kind, errors.ErrUnsupported)
		return
	}
	now := op.At
	if now == 0 {
		now = m.clock.micros()
	}
	keys := store.Keys(op)
	states := make([]store.State, len(keys))
	for i, k := range keys {
		if b, ok := m.st[k]; ok {
			if err := states[i].UnmarshalBinary(b); err != nil {
				op.Err = err
				return
			}
		}
	}
	store.Apply(op, now, states)
	if op.Err != nil {
		return
	}
	for i, k := range keys {
		switch st := &states[i]; {
		case st.FreshAt() <= now:
			delete(m.st, k)
		case st.Changed():
			b, _ := st.MarshalBinary()
			m.st[k] = b
		}
	}
}

// checked reports why op, as a store received it, was not checked by the
// Limiter (its algorithm spelled out, a valid limit, a key, a cost from
// 0), or nil.
func checked(op *store.Op) error {
	one := func(key string, l *store.Limit, cost int64) error {
		p := paramsOf(l)
		if l.Algorithm == 0 || p.Validate() != nil || key == "" || cost < 0 {
			return fmt.Errorf("an unchecked op: %q %+v cost %d", key, *l, cost)
		}
		return nil
	}
	if len(op.Parts) == 0 {
		return one(op.Key, &op.Limit, op.Cost)
	}
	for i := range op.Parts {
		if err := one(op.Parts[i].Key, &op.Parts[i].Limit, op.Parts[i].Cost); err != nil {
			return err
		}
	}
	return nil
}

// TestOutsideStore: a Limiter over a store.Store from outside the module
// decides as it does over memstore, each part's result of a composite
// included, hands the store only checked ops (the zero Algorithm spelled
// TokenBucket), and keeps bad requests from it. An op the store cannot do
// (a lease) is an error wrapping errors.ErrUnsupported.
func TestOutsideStore(t *testing.T) {
	clock := newFakeClock()
	ms := newMapStore(clock)
	outside := sluice.New(ms, sluice.WithClock(clock))
	inside := sluice.New(memstore.New(memstore.WithClock(clock)))
	if sluice.Paths(outside) || !sluice.Paths(inside) {
		t.Fatalf("memstore's direct path: outside %v, memstore %v", sluice.Paths(outside), sluice.Paths(inside))
	}
	ctx := context.Background()
	limits := []sluice.Limit{
		{Rate: 3, Period: time.Second, Burst: 5}, // the zero Algorithm
		sluice.Per(7, 100*time.Millisecond).WithBurst(2).WithAlgorithm(sluice.GCRA),
		sluice.PerSecond(4).WithAlgorithm(sluice.SlidingLog),
		sluice.PerSecond(2).WithBurst(3).WithAlgorithm(sluice.LeakyBucket),
		sluice.PerSecond(5).WithAlgorithm(sluice.AlignedWindow),
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
		switch rng.IntN(6) {
		case 0, 1:
			cost := rng.Int64N(4)
			got, gotErr = outside.Take(ctx, key, l, cost)
			want, wantErr = inside.Take(ctx, key, l, cost)
		case 2:
			j := (k + 1 + rng.IntN(len(limits)-1)) % len(limits)
			parts := []sluice.Part{{Key: key, Limit: l, Cost: rng.Int64N(3)}, {Key: string(rune('a' + j)), Limit: limits[j], Cost: rng.Int64N(3)}}
			got, gotErr = outside.TakeAll(ctx, parts, nil)
			want, wantErr = inside.TakeAll(ctx, parts, nil)
		case 4:
			parts := make([]sluice.Part, 1+rng.IntN(len(limits)))
			for j, pk := range rng.Perm(len(limits))[:len(parts)] {
				parts[j] = sluice.Part{Key: string(rune('a' + pk)), Limit: limits[pk], Cost: rng.Int64N(3)}
			}
			got, gotErr = outside.TakeAll(ctx, parts, outEach[:len(parts)])
			want, wantErr = inside.TakeAll(ctx, parts, inEach[:len(parts)])
			if outEach != inEach {
				t.Fatalf("call %d: %v: parts outside %+v, memstore %+v", i, parts, outEach[:len(parts)], inEach[:len(parts)])
			}
		case 5: // a lower class's take: a one-part composite with headroom
			cost := rng.Int64N(2)
			parts := []sluice.Part{{Key: key, Limit: l, Cost: cost, Headroom: rng.Int64N(2)}}
			got, gotErr = outside.TakeAll(ctx, parts, nil)
			want, wantErr = inside.TakeAll(ctx, parts, nil)
		case 3:
			units := rng.Int64N(3)
			got, gotErr = outside.Refund(ctx, key, l, units, sluice.Result{})
			want, wantErr = inside.Refund(ctx, key, l, units, sluice.Result{})
		}
		if got != want || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Fatalf("call %d: outside %+v, %v; memstore %+v, %v", i, got, gotErr, want, wantErr)
		}
	}
	for i := range ms.seen {
		if err := checked(&ms.seen[i]); err != nil {
			t.Fatal(err)
		}
	}
	n := len(ms.seen)
	outside.Take(ctx, "", limits[0], 1)
	outside.Take(ctx, "k", limits[0], 99)
	outside.Refund(ctx, "k", limits[2], 1, sluice.Result{}) // a sliding log gives nothing back
	outside.TakeAll(ctx, []sluice.Part{{Key: "k", Limit: limits[0], Cost: 1}, {Key: "k", Limit: limits[1], Cost: 1}}, nil)
	outside.TakeAll(ctx, []sluice.Part{{Key: "k", Limit: limits[0], Cost: 5, Headroom: 1}}, nil)
	if len(ms.seen) != n {
		t.Errorf("bad requests reached the store: %+v", ms.seen[n:])
	}
	if _, err := outside.Acquire(ctx, "job", sluice.MaxConcurrent(2), 1); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("a lease from a store that holds none: %v, want an error wrapping errors.ErrUnsupported", err)
	}
}
