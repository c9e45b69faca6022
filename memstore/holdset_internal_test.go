package memstore

import (
	"testing"

	"github.com/sluice-go/sluice/internal/algo"
)

// TestHoldSetsSameHash: two keys whose hashes are equal (forced: a chance
// of 2^-64 otherwise) keep their own hold sets, found by key, and a sweep
// drops each when it holds nothing.
func TestHoldSetsSameHash(t *testing.T) {
	var sh holdShard
	const h = 42
	c := algo.Concurrency{Limit: 1, Lifetime: 10}
	step := func(key string, op, now, id int64) algo.Decision {
		t.Helper()
		set := sh.find(h, key)
		if set == nil {
			set = sh.insert(h, key, now)
		}
		var d algo.Decision
		units := int64(0)
		if op == algo.OpAcquire {
			units = 1
		}
		if _, err := algo.HoldStep(&c, &set.held, op, now, units, id, &d); err != nil {
			t.Fatal(err)
		}
		set.freshAt = d.FreshAt
		return d
	}
	if !step("a", algo.OpAcquire, 100, 1).Allowed || !step("b", algo.OpAcquire, 105, 1).Allowed {
		t.Fatal("a or b refused: the keys share a set")
	}
	if step("a", algo.OpAcquire, 101, 2).Allowed {
		t.Fatal("a's second lease allowed over its limit of 1")
	}
	if sh.find(h, "a") == sh.find(h, "b") || sh.find(h, "c") != nil {
		t.Fatal("find does not tell the keys apart")
	}
	count := func() int {
		n := 0
		for _, set := range sh.sets {
			for ; set != nil; set = set.next {
				n++
			}
		}
		return n
	}
	sh.sweep(109) // a's lease comes back at 110, b's at 115
	if count() != 2 {
		t.Fatalf("%d sets after a sweep at 109, want 2", count())
	}
	sh.sweep(110) // a holds nothing from 110
	if count() != 1 || sh.find(h, "a") != nil || sh.find(h, "b") == nil {
		t.Fatalf("after a sweep at 110: %d sets, a %v, b %v; want b's alone", count(), sh.find(h, "a"), sh.find(h, "b"))
	}
	sh.sweep(115)
	if len(sh.sets) != 0 {
		t.Fatalf("%d hashes after the last sweep, want 0", len(sh.sets))
	}
}
