package grpclimit_test

import (
	"context"
	"sync"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/grpclimit"
	"github.com/sluice-go/sluice/observe"
)

// TestEventIndex: the Events of one store call are numbered from 0, so an
// adapter that counts calls (a latency histogram) counts each call once.
func TestEventIndex(t *testing.T) {
	var mu sync.Mutex
	first := map[string]int{} // policy -> Events with Index 0
	indexes := map[int]int{}
	s := mustNew(t, frozen(), []grpclimit.Policy{
		{Name: "per-ip", Limit: sluice.PerMinute(100)},
		{Name: "per-method", Limit: sluice.PerMinute(100), Key: grpclimit.Method()},
		{Name: "trial", Limit: sluice.PerMinute(100), Shadow: true},
	}, grpclimit.WithObserver(observe.Func(func(e observe.Event) {
		mu.Lock()
		defer mu.Unlock()
		indexes[e.Index]++
		if e.Index == 0 {
			first[e.Policy]++
		}
	})))
	conn := serve(t, s, &echoServer{})
	const calls = 5
	for i := range calls {
		if err := echo(context.Background(), conn); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// Per call: the enforced composite (Index 0, 1) and the shadow one (0).
	if indexes[0] != 2*calls || indexes[1] != calls || len(indexes) != 2 {
		t.Errorf("indexes %v, want 0:%d 1:%d", indexes, 2*calls, calls)
	}
	if first["per-ip"] != calls || first["trial"] != calls || first["per-method"] != 0 {
		t.Errorf("Index 0 by policy %v", first)
	}
}
