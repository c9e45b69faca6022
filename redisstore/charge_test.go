package redisstore_test

// Charges in Redis beyond the conformance suite's (store/storetest's
// Charge group, standalone and on a cluster): composites whose keys are in
// different cluster slots, what a charge costs Redis, and a charge during
// an outage. Their TTLs are in ttl_test.go, their slices in slice_test.go.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/redisstore"
	"github.com/sluice-go/sluice/store"
)

// chargeLimits are the limits of TestChargeCrossSlot's keys, one per key:
// each algorithm that can charge, with and without a debt allowance.
var chargeLimits = []store.Limit{
	{Algorithm: uint8(algo.TokenBucket), Rate: 3, Period: 1_000_000, Burst: 4, Debt: 6},
	{Algorithm: uint8(algo.GCRA), Rate: 7, Period: 100_000, Burst: 2},
	{Algorithm: uint8(algo.FixedWindow), Rate: 6, Period: 1_000_000, Debt: 9},
	{Algorithm: uint8(algo.AlignedWindow), Rate: 4, Period: 1_000_000, Debt: 2},
	{Algorithm: uint8(algo.GCRA), Rate: 3, Period: 1_000_000, Burst: 4, Debt: 30},
}

// TestChargeCrossSlot: on a cluster, a composite charge whose keys are in
// different slots is charged part by part; a charge refuses nothing, so
// with no other traffic it reaches the states one atomic script would.
// Random composite charges over keys apart and over keys of one slot,
// composite takes and acquires (concurrency_composite.lua) of one slot,
// and takes and charges of one key, takes leaving headroom now and then (a
// class's remaining keeps a debt), at the caller's times, equal memstore's
// decisions, every part's and the summary.
func TestChargeCrossSlot(t *testing.T) {
	c := redistest.SharedCluster(t).Client()
	prefix := fmt.Sprintf("chargeapart:%d:", time.Now().UnixNano())
	s := newGoRedis(t, c, redisstore.WithPrefix(prefix), redisstore.WithTTLMargin(time.Hour))
	defer s.Close()
	mem := memstore.New()
	slots := map[int]bool{}
	key := func(tagged bool, k int) string {
		if tagged {
			return fmt.Sprintf("{t}k%d", k)
		}
		return fmt.Sprintf("k%d", k)
	}
	for k := range chargeLimits {
		slots[redisrun.Slot(prefix+key(false, k))] = true
	}
	if len(slots) < 2 {
		t.Fatalf("the keys share one slot: nothing is apart")
	}
	seed := testenv.Seed(t)
	r := rand.New(rand.NewPCG(seed, 53))
	n := 400
	if testenv.Long() {
		n = 1500
	}
	now := int64(1_764_000_000_000_000)
	apart := 0
	for i := range n {
		now += r.Int64N(400_000) * int64(r.IntN(2))
		op := store.Op{Kind: store.Charge, At: now, MaxDelay: store.Never}
		tagged := r.IntN(2) == 0
		switch x := r.IntN(7); {
		case x < 3 || x == 6: // a composite charge, or a composite take or acquire of one slot
			switch x {
			case 2:
				op.Kind, tagged = store.Take, true
			case 6:
				op.Kind, tagged, op.Key, op.ID = store.Acquire, true, "{t}job", int64(i+1)
				op.Concurrency, op.Cost = store.Concurrency{Limit: 3, Lifetime: 1_000_000}, 1
			}
			for _, k := range r.Perm(len(chargeLimits))[:1+r.IntN(len(chargeLimits))] {
				l := chargeLimits[k]
				pt := store.Part{Key: key(tagged, k), Limit: l, Cost: r.Int64N(2 * (capacity(l) + l.Debt + 1))}
				if op.Kind != store.Charge {
					pt.Cost = r.Int64N(capacity(l) + 1)
					pt.Headroom = r.Int64N(capacity(l)-pt.Cost+1) * int64(r.IntN(2))
				}
				op.Parts = append(op.Parts, pt)
			}
			if !tagged && len(op.Parts) > 1 {
				apart++
			}
		default: // a take or a charge of one key
			k := r.IntN(len(chargeLimits))
			op.Key, op.Limit = key(tagged, k), chargeLimits[k]
			op.Cost = r.Int64N(2 * (capacity(op.Limit) + op.Limit.Debt + 1))
			if x == 3 {
				op.Kind, op.Cost = store.Take, r.Int64N(capacity(op.Limit)+1)
				op.Headroom = r.Int64N(capacity(op.Limit)-op.Cost+1) * int64(r.IntN(2))
			}
		}
		got, want := runOne(t, s, op), runOne(t, mem, op)
		if got.Err != nil || want.Err != nil || got.Decision != want.Decision || got.Expiry != want.Expiry {
			t.Fatalf("seed %d op %d %+v:\n redis  %+v %v\n memory %+v %v", seed, i, op, got.Decision, got.Err, want.Decision, want.Err)
		}
		for j := range got.Parts {
			if got.Parts[j].Decision != want.Parts[j].Decision {
				t.Fatalf("seed %d op %d, part %d (%s):\n redis  %+v\n memory %+v", seed, i, j, got.Parts[j].Key, got.Parts[j].Decision, want.Parts[j].Decision)
			}
		}
	}
	t.Logf("%d ops, %d of them composite charges over keys in %d slots, equal to memstore's (seed %d)", n, apart, len(slots), seed)
}

// capacity is l's capacity.
func capacity(l store.Limit) int64 {
	return algo.Params{Kind: algo.Kind(l.Algorithm), Rate: l.Rate, Period: l.Period, Burst: l.Burst}.Capacity()
}

// runOne runs a copy of op, and of its parts, alone on st and returns it.
func runOne(t *testing.T, st store.Store, op store.Op) store.Op {
	op.Parts = append([]store.Part(nil), op.Parts...)
	ops := []store.Op{op}
	st.Run(t.Context(), ops)
	return ops[0]
}

// TestChargeIsOneScript counts the scripts Redis runs for charges (INFO
// commandstats, as compositeScriptRuns counts a composite's), on a server
// of its own: a charge is one script, of one key or a composite on one
// node; concurrent charges of single keys that wait together share one, as
// takes do (multi.lua), and concurrent composite charges are one each.
// Inside, one GET and one SET per key charged.
func TestChargeIsOneScript(t *testing.T) {
	srv := redistest.Standalone(t)
	c := srv.Client()
	ctx := context.Background()
	s := newGoRedis(t, c, redisstore.WithPrefix("count:"))
	defer s.Close()
	tb := store.Limit{Algorithm: uint8(algo.TokenBucket), Rate: 1000, Period: 1_000_000, Burst: 1000, Debt: 5000}
	fw := store.Limit{Algorithm: uint8(algo.FixedWindow), Rate: 1000, Period: 60_000_000, Debt: 5000}
	single := func(i int) store.Op {
		return store.Op{Kind: store.Charge, Key: fmt.Sprintf("k%d", i%8), Limit: tb, Cost: 7}
	}
	composite := func(i int) store.Op {
		return store.Op{Kind: store.Charge, Parts: []store.Part{
			{Key: fmt.Sprintf("{u%d}tb", i%8), Limit: tb, Cost: 3},
			{Key: fmt.Sprintf("{u%d}fw", i%8), Limit: fw, Cost: 5},
		}}
	}
	for _, tc := range []struct {
		name       string
		op         func(i int) store.Op
		keys, par  int
		chargesPer int
		merged     bool // charges may share a script
	}{
		{"one key, serial", single, 1, 1, 200, false},
		{"one key, 32 goroutines", single, 1, 32, 20, true},
		{"composite, serial", composite, 2, 1, 200, false},
		{"composite, 32 goroutines", composite, 2, 32, 20, false},
	} {
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for g := range tc.par {
			wg.Go(func() {
				for i := range tc.chargesPer {
					ops := []store.Op{tc.op(g*tc.chargesPer + i)}
					s.Run(ctx, ops)
					if ops[0].Err != nil || !ops[0].Decision.Allowed {
						t.Errorf("%s: %+v %v", tc.name, ops[0].Decision, ops[0].Err)
						return
					}
				}
			})
		}
		wg.Wait()
		charges := int64(tc.par * tc.chargesPer)
		runs, err := compositeScriptRuns(ctx, []*redis.Client{c})
		if err != nil {
			t.Fatal(err)
		}
		calls := commandCalls(t, c)
		t.Logf("%s: %d charges, %d scripts, commands %v", tc.name, charges, runs, calls)
		if runs != charges && (!tc.merged || runs > charges || runs == 0) {
			t.Errorf("%s: %d scripts for %d charges, want one each (merged: at most)", tc.name, runs, charges)
		}
		if want := int(charges) * tc.keys; calls["get"] != want || calls["set"] != want {
			t.Errorf("%s: commands %v, want %d GET and %d SET (one of each per key charged)", tc.name, calls, want, want)
		}
	}
}

// TestChargeNoFailurePolicy: a charge, and a composite charge, that cannot
// reach Redis is an error wrapping ErrStoreUnavailable under every failure
// policy, never a Degraded answer: the work is done, and no policy's answer
// would record it. A take at the same time gets the policy's answer.
func TestChargeNoFailurePolicy(t *testing.T) {
	ctx := context.Background()
	lim := sluice.PerMinute(10)
	lim.Debt = 5
	for _, policy := range []redisstore.FailurePolicy{redisstore.FailClosed, redisstore.FailOpen, redisstore.FailLocal} {
		s := newGoRedis(t, redistest.Unreachable(t), redisstore.WithFailurePolicy(policy), redisstore.WithTimeout(200*time.Millisecond))
		l := sluice.New(s)
		if r, err := l.Charge(ctx, "k", lim, 3); !errors.Is(err, sluice.ErrStoreUnavailable) || r != (sluice.Result{}) {
			t.Errorf("policy %d: charge %+v %v, want no answer and ErrStoreUnavailable", policy, r, err)
		}
		op := store.Op{Kind: store.Charge, Parts: []store.Part{
			{Key: "{a}x", Limit: store.Limit{Algorithm: uint8(algo.TokenBucket), Rate: 1, Period: 1_000_000, Burst: 1}, Cost: 1},
			{Key: "{a}y", Limit: store.Limit{Algorithm: uint8(algo.FixedWindow), Rate: 1, Period: 1_000_000}, Cost: 1},
		}}
		if got := runOne(t, s, op); !errors.Is(got.Err, store.ErrStoreUnavailable) || got.Decision.Degraded {
			t.Errorf("policy %d: composite charge %+v %v, want ErrStoreUnavailable", policy, got.Decision, got.Err)
		}
		r, err := l.Take(ctx, "k", lim, 1)
		if closed := policy == redisstore.FailClosed; closed && err == nil || !closed && (err != nil || !r.Degraded) {
			t.Errorf("policy %d: take %+v %v, want the policy's answer", policy, r, err)
		}
		s.Close()
	}
}
