package rlqs

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// sliceModel is what redisstore's rate_slices.lua does, on one clock:
// each replica's slice of each budget, granted from what the others'
// live slices leave (its fair share left out: TestClaimRates checks it).
type sliceModel map[string]map[int]struct{ tokens, end int64 }

func (m sliceModel) claim(now, life int64, replica int, c Claim) Slice {
	hs := m[c.Key]
	if hs == nil {
		hs = map[int]struct{ tokens, end int64 }{}
		m[c.Key] = hs
	}
	mine, others := int64(0), int64(0)
	for r, s := range hs {
		switch {
		case s.end <= now:
		case r == replica:
			mine = s.tokens
		default:
			others += s.tokens
		}
	}
	tokens := max(0, min(c.Want, max(mine, c.Rate-others)))
	hs[replica] = struct{ tokens, end int64 }{tokens, now + life}
	return Slice{Key: c.Key, Fill: c.Fill, Tokens: tokens, Fair: c.Rate / 3}
}

// Three sliced replicas over one model store, holders reporting to any
// of them on random traces, replicas that stop renewing (a store that
// fails, or dead) and start again: at every instant the leases of every
// replica's grants add up to at most the rate.
func TestSlicesBound(t *testing.T) {
	r := rand.New(rand.NewPCG(testenv.Seed(t), 34))
	for trace := range 20 {
		t.Run(fmt.Sprint(trace), func(t *testing.T) { slicesTrace(t, r) })
	}
}

func slicesTrace(t *testing.T, r *rand.Rand) {
	const replicas = 3
	b := Budget{Key: "b", Rate: int64(1 + r.IntN(200)), Fill: time.Second}
	store := sliceModel{}
	var as [replicas]*Allocator
	renewing := [replicas]bool{}
	for i := range as {
		a, err := New(Config{Sliced: true})
		if err != nil {
			t.Fatal(err)
		}
		as[i], renewing[i] = a, true
	}
	life := as[0].sliceLife
	slack := as[0].slack
	// every grant made, by replica and holder: a holder's outstanding
	// rate at a replica is the largest of its grants' whose lease has
	// not ended
	type grant struct{ tokens, end int64 }
	grants := map[[2]int][]grant{}
	granted := int64(0)
	record := func(i int, h Holder, now int64, act Action) {
		if !act.Wait && !act.Abandon {
			granted += act.Tokens
			k := [2]int{i, int(h)}
			grants[k] = append(grants[k], grant{act.Tokens, now + act.TTL.Microseconds() + slack})
		}
	}
	now := int64(1_000_000)
	for step := 0; step < 3000; step++ {
		now += int64(r.IntN(300_000))
		i := r.IntN(replicas)
		switch x := r.IntN(20); {
		case x == 0:
			renewing[i] = !renewing[i]
		case x < 6:
			claims := as[i].Claims(now, nil)
			if !renewing[i] {
				continue
			}
			var got []Slice
			for _, c := range claims {
				got = append(got, store.claim(now, life, i, c))
			}
			as[i].SetSlices(now, got)
		case x < 9:
			as[i].Round(now, func(h Holder, act Action) { record(i, h, now, act) })
		default:
			h := Holder(r.IntN(8)*replicas + i + 1)
			n := uint64(r.IntN(int(b.Rate)*6 + 1))
			act, err := as[i].Report(now, b, h, 1, n/2, n/2, func(o Holder, act Action) { record(i, o, now, act) })
			if err != nil {
				t.Fatal(err)
			}
			record(i, h, now, act)
		}
		// The bound: the replicas' outstanding rates add up to at most
		// the rate, and each replica's is within its live slice in the
		// store (none once that has ended).
		var held [replicas]int64
		for k, gs := range grants {
			o := int64(0)
			for _, g := range gs {
				if g.end > now {
					o = max(o, g.tokens)
				}
			}
			held[k[0]] += o
		}
		live := int64(0)
		for j := range replicas {
			sl := store[b.Key][j]
			if sl.end <= now {
				sl.tokens = 0
			}
			if held[j] > sl.tokens {
				t.Fatalf("step %d: replica %d: its grants hold %d, over its slice %d", step, j, held[j], sl.tokens)
			}
			live += sl.tokens
		}
		if live > b.Rate {
			t.Fatalf("step %d: live slices %d, over the rate %d", step, live, b.Rate)
		}
	}
	if granted == 0 {
		t.Fatal("nothing was granted")
	}
}
