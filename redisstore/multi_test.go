package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// TestMultiMatchesSingle checks the batcher's merged scripts against the
// single-decision scripts (which the conformance tests hold to the model):
// the same decisions, sent once one script each and once merged into
// multi.lua calls (one per algorithm, as the batcher sends them), give the
// same replies, decision by decision. The batches mix every algorithm, costs
// 0..capacity+1, charges among the takes (charge.lua alone), debt
// allowances, several limits per batch (past
// the eight where merge switches from a scan to a map), decisions on one key
// in a row, and batches all at the caller's time, all at the server's, or
// mixed.
func TestMultiMatchesSingle(t *testing.T) {
	t.Parallel()
	client := redisrun.GoRedis(redistest.Shared(t).Client())
	ctx := context.Background()
	r := rand.New(rand.NewPCG(7, testenv.Seed(t)))
	var ps []algo.Params
	for _, k := range algo.Kinds() {
		for _, rp := range [][3]int64{{3, 1_000_000, 4}, {7, 100_000, 2}, {1, 60_000_000, 2}, {5, 1_000_000, 5}} {
			ps = append(ps, algo.Params{Kind: k, Rate: rp[0], Period: rp[1], Burst: rp[2]})
		}
	}
	for _, p := range ps {
		if err := p.Validate(); err != nil {
			t.Fatalf("%+v: %v", p, err)
		}
	}
	run := time.Now().UnixNano()
	now := int64(1_764_000_000_000_000)
	var decisions, batches int
	for b := 0; b < 300; b++ {
		// The limits of this batch: one, a few, or more than eight.
		nl := []int{1, 3, 12}[b%3]
		lim := make([]algo.Params, nl)
		for i := range lim {
			lim[i] = ps[r.IntN(len(ps))]
			if algo.Chargeable(lim[i].Kind) {
				lim[i].Debt = []int64{0, 0, 3, 40}[r.IntN(4)] // read as the limit's: sent with it
			}
		}
		mode := b % 4 // 0, 1: caller's time; 2: server's; 3: mixed
		n := 2 + r.IntN(40)
		var singles []*redisrun.Call
		var nows []int64
		merged := map[algo.Kind][]*decision{} // the batcher merges per algorithm
		var order []algo.Kind
		for i := 0; i < n; i++ {
			p := lim[r.IntN(nl)]
			key := fmt.Sprintf("k%d", r.IntN(6))
			now += r.Int64N(p.Period/2 + 1)
			at := now
			if mode == 2 || (mode == 3 && r.IntN(2) == 0) {
				at = -1
				key = "srv" + key // the two runs read TIME apart: keys of their own
			}
			cost := r.Int64N(p.Capacity() + 2)
			if b%5 == 4 {
				cost = 1 // one cost for the batch: sent once
			}
			maxDelay := int64(-1)
			if p.Kind == algo.LeakyBucket && r.IntN(2) == 0 {
				maxDelay = r.Int64N(2 * p.Period)
			}
			l := limit{kind: int64(p.Kind), rate: p.Rate, period: p.Period, burst: p.Burst, debt: p.Debt, maxDelay: maxDelay}
			if algo.Chargeable(p.Kind) && r.IntN(4) == 0 { // a charge, sent with the takes
				l.charge, cost = 1, r.Int64N(p.Capacity()+p.Debt+2)
			}
			one := single{
				key:    fmt.Sprintf("multi:%d:s:%s:%d", run, key, p.Kind),
				lim:    l,
				cost:   cost,
				now:    at,
				margin: 1_000_000,
			}
			nows = append(nows, at)
			singles = append(singles, scripts.singleCall(&one))
			m := one
			m.key = fmt.Sprintf("multi:%d:m:%s:%d", run, key, p.Kind)
			merged[p.Kind] = append(merged[p.Kind], &decision{one: m})
			order = append(order, p.Kind)
		}
		for _, c := range singles {
			client.Run(ctx, []*redisrun.Call{c})
			if c.Err != nil {
				t.Fatalf("single: %v", c.Err)
			}
		}
		replies := map[algo.Kind][]int64{}
		for k, ps := range merged {
			m := scripts.merge(ps)
			client.Run(ctx, []*redisrun.Call{m})
			if m.Err != nil {
				t.Fatalf("multi: %v", m.Err)
			}
			if len(m.Reply) != width*len(ps) {
				t.Fatalf("multi replied %d values for %d decisions", len(m.Reply), len(ps))
			}
			replies[k] = m.Reply
		}
		for i, c := range singles {
			k := order[i]
			got := replies[k][:width]
			replies[k] = replies[k][width:]
			// At the server's time the two runs are apart in time: only
			// decisions at the caller's time must agree to the µs.
			if nows[i] < 0 {
				continue
			}
			if !slices.Equal(got, c.Reply) {
				t.Fatalf("batch %d (%d limits, mode %d), decision %d %v on %s: multi %v, single %v", b, nl, mode, i, c.Args, c.Keys[0], got, c.Reply)
			}
			decisions++
		}
		batches++
	}
	t.Logf("%d batches, %d decisions at the caller's time compared", batches, decisions)

	// Batches as under load: one limit, one cost, the server's time, so each
	// decision sends only its key. A bucket refilling once an hour decides
	// the same (allowed, remaining) at either run's time.
	hourly := limit{kind: int64(algo.TokenBucket), rate: 1, period: 3_600_000_000, burst: 5, maxDelay: -1}
	for b := 0; b < 20; b++ {
		var singles []*redisrun.Call
		var ps []*decision
		for i := 0; i < 30; i++ {
			k := r.IntN(6)
			one := single{key: fmt.Sprintf("multi:%d:us:%d", run, k), lim: hourly, cost: 1, now: -1, margin: 1_000_000}
			singles = append(singles, scripts.singleCall(&one))
			ps = append(ps, &decision{one: single{key: fmt.Sprintf("multi:%d:um:%d", run, k), lim: hourly, cost: 1, now: -1, margin: 1_000_000}})
		}
		m := scripts.merge(ps)
		if len(m.Args) != 4+7 {
			t.Fatalf("a uniform batch sends %d arguments, want the header and its limit, 11: %v", len(m.Args), m.Args)
		}
		client.Run(ctx, append(singles, m))
		for _, c := range append(singles, m) {
			if c.Err != nil {
				t.Fatal(c.Err)
			}
		}
		for i, c := range singles {
			got := m.Reply[width*i : width*(i+1)]
			if got[0] != c.Reply[0] || got[1] != c.Reply[1] {
				t.Fatalf("uniform batch %d, decision %d on %s: multi %v, single %v", b, i, ps[i].one.key, got, c.Reply)
			}
		}
	}
}

// TestCompositesMergedMatchAlone checks the batcher's merged composite calls
// against the same composites sent one call each: the same replies, part by
// part. Random composites of one to three parts over a few keys (a key twice
// in one composite now and then), every algorithm, costs 0..capacity+1,
// headroom now and then, at the caller's time.
func TestCompositesMergedMatchAlone(t *testing.T) {
	client := redisrun.GoRedis(redistest.Shared(t).Client())
	ctx := context.Background()
	seed := testenv.Seed(t)
	r := rand.New(rand.NewPCG(11, seed))
	var ps []algo.Params
	for _, k := range algo.Kinds() {
		for _, rp := range [][3]int64{{3, 1_000_000, 4}, {7, 100_000, 2}, {5, 1_000_000, 5}} {
			ps = append(ps, algo.Params{Kind: k, Rate: rp[0], Period: rp[1], Burst: rp[2]})
		}
	}
	run := time.Now().UnixNano()
	now := int64(1_764_000_000_000_000)
	compared := 0
	for b := 0; b < 200; b++ {
		n := 1 + r.IntN(12)
		var alone []*redisrun.Call
		var pend []*decision
		for i := 0; i < n; i++ {
			now += r.Int64N(300_000)
			parts := 1 + r.IntN(3)
			build := func() *redisrun.Call {
				return &redisrun.Call{Script: scripts.composite, Args: []any{int64(1_000_000), int64(1), now, int64(parts)}}
			}
			a, m := build(), build()
			for j := 0; j < parts; j++ {
				p := ps[r.IntN(len(ps))]
				key := fmt.Sprintf("k%d:%d", r.IntN(4), p.Kind) // a key keeps one algorithm
				cost := r.Int64N(p.Capacity() + 2)
				headroom := int64(0) // a lower class's part now and then
				if r.IntN(3) == 0 {
					headroom = r.Int64N(p.Capacity() + 1)
				}
				l := limit{kind: int64(p.Kind), rate: p.Rate, period: p.Period, burst: p.Burst, maxDelay: -1}
				if algo.Chargeable(p.Kind) {
					l.debt = r.Int64N(3) * p.Capacity()
				}
				addPart(a, fmt.Sprintf("comp:%d:a:%s", run, key), l, cost, headroom)
				addPart(m, fmt.Sprintf("comp:%d:m:%s", run, key), l, cost, headroom)
			}
			alone = append(alone, a)
			pend = append(pend, &decision{comp: m})
		}
		for _, c := range alone {
			client.Run(ctx, []*redisrun.Call{c})
			if c.Err != nil {
				t.Fatalf("composite alone: %v", c.Err)
			}
		}
		merged := scripts.mergeComposites(pend)
		client.Run(ctx, []*redisrun.Call{merged})
		splitComposites(merged, pend)
		for i, c := range alone {
			got := pend[i].comp
			if got.Err != nil {
				t.Fatalf("batch %d, composite %d: %v", b, i, got.Err)
			}
			if !slices.Equal(got.Reply, c.Reply) {
				t.Fatalf("seed %d, batch %d, composite %d on %v, args %v: merged %v, alone %v", seed, b, i, c.Keys, c.Args, got.Reply, c.Reply)
			}
			compared++
		}
	}
	t.Logf("%d composites compared", compared)
}
