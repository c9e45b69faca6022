package store

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// randomOp draws an op on one of a few keys, under a limit of any
// algorithm, at now: a take (alone or a composite), a refund, an acquire
// (alone or with rate parts), a release or an extension.
func randomOp(r *rand.Rand, now int64) Op {
	key := func() string { return fmt.Sprintf("k%d", r.IntN(3)) }
	lim := func() Limit {
		k := algo.Kinds()[r.IntN(len(algo.Kinds()))]
		return Limit{Algorithm: uint8(k), Rate: 1 + r.Int64N(9), Period: 1000 * (1 + r.Int64N(2000)), Burst: 1 + r.Int64N(8)}
	}
	cost := func(l Limit) int64 { return r.Int64N(params(&l).Capacity() + 1) }
	c := Concurrency{Limit: 1 + r.Int64N(5), Lifetime: 1 + r.Int64N(3_000_000)}
	op := Op{At: now, Key: key(), MaxDelay: Never, Concurrency: c, ID: 1 + r.Int64N(50)}
	switch r.IntN(6) {
	case 0, 1:
		op.Kind, op.Limit = Take, lim()
		op.Cost = cost(op.Limit)
	case 2:
		op.Kind, op.Limit = Refund, lim()
		op.Limit.Algorithm = []uint8{1, 2, 4, 7}[r.IntN(4)]
		op.Cost = cost(op.Limit)
	case 3:
		op.Kind, op.Cost = Acquire, r.Int64N(c.Limit+1)
	case 4:
		op.Kind = []Kind{Release, Extend}[r.IntN(2)]
	default:
		op.Kind = []Kind{Take, Acquire}[r.IntN(2)]
		for _, i := range r.Perm(3)[:1+r.IntN(3)] {
			l := lim()
			op.Parts = append(op.Parts, Part{Key: fmt.Sprintf("k%d", i), Limit: l, Cost: cost(l)})
		}
	}
	return op
}

// states runs n random ops, drawn from seed, on states kept in memory and
// calls f with each state an op changed.
func states(t testing.TB, seed uint64, n int, f func(st *State)) {
	r := rand.New(rand.NewPCG(seed, 41))
	kept := map[Key]*State{}
	now := int64(1_764_000_000_000_000)
	for range n {
		now += r.Int64N(300_000)
		op := randomOp(r, now)
		keys := Keys(&op)
		sts := make([]State, len(keys))
		for i, k := range keys {
			if st := kept[k]; st != nil {
				sts[i] = *st
			}
		}
		if Apply(&op, now, sts); op.Err != nil && !errors.Is(op.Err, ErrIDInUse) {
			t.Fatal(op.Err)
		}
		for i, k := range keys {
			st := sts[i] // back in memory, changed or not: see Apply
			kept[k] = &st
			if op.Err == nil && st.Changed() {
				f(&st)
			}
		}
	}
}

// TestStateRoundTrip checks that every state random ops leave (every
// algorithm's, sliding logs of many entries, hold sets past the size at
// which they are indexed) comes back from its bytes the same, and encodes
// to the same bytes again.
func TestStateRoundTrip(t *testing.T) {
	kinds := map[string]int{}
	states(t, testenv.Seed(t), 5000, func(st *State) {
		b, err := st.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var back State
		if err := back.UnmarshalBinary(b); err != nil {
			t.Fatalf("%x: %v", b, err)
		}
		if !sameState(st, &back) {
			t.Fatalf("%x: %+v came back as %+v", b, st, &back)
		}
		if again, _ := back.MarshalBinary(); !bytes.Equal(again, b) {
			t.Fatalf("%x encoded again as %x", b, again)
		}
		kinds[fmt.Sprintf("tag %d", b[1])]++
	})
	if len(kinds) < 9 {
		t.Errorf("states of %d kinds, want every algorithm's, a hold set's and the fresh one: %v", len(kinds), kinds)
	}
	t.Log(kinds)
}

// sameState reports whether a and b hold the same state and FreshAt (a
// fresh state's is not kept).
func sameState(a, b *State) bool {
	if a.fresh() && b.fresh() {
		return true
	}
	ra, rb := a.rate, b.rate
	return a.freshAt == b.freshAt && ra.Kind == rb.Kind && ra.A == rb.A && ra.B == rb.B && ra.C == rb.C &&
		ra.Rate == rb.Rate && ra.Period == rb.Period && slices.Equal(ra.Log, rb.Log) &&
		slices.Equal(a.holds.AppendList(nil), b.holds.AppendList(nil))
}

// TestUnmarshalRejects checks the errors of bytes that are not a State's,
// and that they leave the State as it was.
func TestUnmarshalRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"one byte", []byte{1}},
		{"another version", []byte{2, 0}},
		{"an unknown tag", []byte{1, 9}},
		{"bytes after a fresh state", []byte{1, 0, 0}},
		{"truncated", []byte{1, 1, 5}},
		{"a rate of 0", []byte{1, 1, 5, 0, 1, 0, 0, 0}},
		{"a period over 2^50", append([]byte{1, 1, 5, 1}, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x04, 0, 0, 0)},
		{"a log of more entries than bytes", []byte{1, 6, 5, 1, 1, 100, 1, 1}},
		{"a log's entries out of order", []byte{1, 6, 5, 1, 1, 2, 7, 1, 0, 1}},
		{"a log entry of 0 units", []byte{1, 6, 5, 1, 1, 1, 7, 0}},
		{"a hold id twice", []byte{1, 8, 5, 2, 3, 1, 7, 3, 1, 0}},
		{"a hold of 0 units", []byte{1, 8, 5, 1, 3, 0, 7}},
		{"a hold id of 0", []byte{1, 8, 5, 1, 0, 1, 7}},
		{"a varint past 64 bits", []byte{1, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
	} {
		st := State{freshAt: 42}
		if err := st.UnmarshalBinary(tc.b); !errors.Is(err, ErrMalformedState) || st.freshAt != 42 {
			t.Errorf("%s (%x): %v, state %+v; want an error wrapping ErrMalformedState and the state as it was", tc.name, tc.b, err, st)
		}
	}
}

// FuzzState checks that bytes either are a State, which encodes again to
// bytes that decode to the same, and on which ops of every kind decide
// without failing, or are refused with ErrMalformedState; never a panic.
func FuzzState(f *testing.F) {
	n := 0
	states(f, testenv.SeedOr(f, 1), 400, func(st *State) {
		if n++; n%10 == 0 {
			b, _ := st.MarshalBinary()
			f.Add(b)
		}
	})
	f.Add([]byte{1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var st State
		if err := st.UnmarshalBinary(b); err != nil {
			if !errors.Is(err, ErrMalformedState) {
				t.Fatalf("%x: %v", b, err)
			}
			return
		}
		b2, err := st.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var back State
		if err := back.UnmarshalBinary(b2); err != nil || !sameState(&st, &back) {
			t.Fatalf("%x encoded again as %x, which decodes to %+v (%v)", b, b2, &back, err)
		}
		r := rand.New(rand.NewPCG(uint64(len(b)), uint64(b[len(b)-1])))
		for range 20 {
			op := randomOp(r, 1+r.Int64N(algo.MaxTime))
			keys := Keys(&op)
			sts := make([]State, len(keys))
			for i := range sts {
				if keys[i].Holds == (st.rate.Kind == 0) {
					_ = sts[i].UnmarshalBinary(b)
				}
			}
			Apply(&op, op.At, sts)
		}
	})
}

// TestManyHoldsRoundTrip checks the round trip of a hold set large enough
// to be indexed (algo.Holds), and that ops decide the same on the state
// and on its copy from bytes.
func TestManyHoldsRoundTrip(t *testing.T) {
	c := Concurrency{Limit: 200, Lifetime: 1_000_000}
	now := int64(1_764_000_000_000_000)
	sts := []State{{}}
	for id := range int64(150) {
		c.Lifetime = 1_000_000 - 5000*(id%7)
		op := Op{Kind: Acquire, At: now + id, Key: "many", Concurrency: c, Cost: 1, ID: id + 1}
		if Apply(&op, op.At, sts); op.Err != nil || !op.Decision.Allowed {
			t.Fatalf("acquire %d: %+v %v", id, op.Decision, op.Err)
		}
	}
	b, err := sts[0].MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	back := []State{{}}
	if err := back[0].UnmarshalBinary(b); err != nil || !sameState(&sts[0], &back[0]) {
		t.Fatalf("150 holds (%d bytes) came back as %d holds (%v)", len(b), back[0].holds.Len(), err)
	}
	t.Logf("150 holds in %d bytes", len(b))
	c.Lifetime = 1_000_000
	for i, op := range []Op{
		{Kind: Release, Key: "many", Concurrency: c, ID: 70},
		{Kind: Extend, Key: "many", Concurrency: c, ID: 3},
		{Kind: Acquire, Key: "many", Concurrency: c, Cost: 60, ID: 500},
		{Kind: Acquire, Key: "many", Concurrency: c, Cost: 40, ID: 501},
	} {
		op.At = now + 990_000 + int64(i)
		op2 := op
		Apply(&op, op.At, sts)
		Apply(&op2, op2.At, back)
		if op.Decision != op2.Decision || op.Expiry != op2.Expiry || op.Err != op2.Err {
			t.Fatalf("op %d: %+v %d %v, on the copy %+v %d %v", i, op.Decision, op.Expiry, op.Err, op2.Decision, op2.Expiry, op2.Err)
		}
	}
}
