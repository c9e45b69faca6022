package main

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/memstore"
)

// The sender delivers every message, never more than one per chat per second
// (beyond the first) nor more than 30 in any second (beyond the burst), and
// turns refusals into re-enqueues, on a simulated clock.
func TestSender(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lim := sluice.New(memstore.New(memstore.WithClock(storelink.TimeClock(func() time.Time { return now }))))
	var sends []Message
	var times []time.Time
	s := NewSender(lim, func(m Message, at time.Time) { sends = append(sends, m); times = append(times, at) })
	start := now
	for c := 0; c < 100; c++ {
		s.Enqueue(Message{Chat: c, Due: start})
	}
	for i := 0; i < 10; i++ {
		s.Enqueue(Message{Chat: 7, Due: start})
	}
	ctx := context.Background()
	for {
		next, err := s.Step(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		if next.IsZero() {
			break
		}
		now = next
	}
	if len(sends) != 110 {
		t.Fatalf("sent %d of 110", len(sends))
	}
	if s.Deferred == 0 {
		t.Fatal("no refusal was re-enqueued")
	}
	// Per chat: sends at least 1s apart. In all: at most 30 + 30·d in any
	// span of d seconds.
	last := map[int]time.Time{}
	for i, m := range sends {
		if l, ok := last[m.Chat]; ok && times[i].Sub(l) < time.Second {
			t.Fatalf("chat %d: two sends %v apart", m.Chat, times[i].Sub(l))
		}
		last[m.Chat] = times[i]
		// Any span [times[j], times[i]] holds at most burst + ⌊d/T⌋.
		for j := i; j >= 0; j-- {
			d := times[i].Sub(times[j])
			if n, bound := i-j+1, 30+int(d*30/time.Second); n > bound {
				t.Fatalf("%d sends within %v, bound %d", n, d, bound)
			}
		}
	}
	// Chat 7's ten messages at one a second take 9s; the rest fit around them.
	if d := times[len(times)-1].Sub(start); d < 9*time.Second || d > 12*time.Second {
		t.Fatalf("took %v", d)
	}
	t.Logf("110 messages in %v (simulated), %d re-enqueues", times[len(times)-1].Sub(start), s.Deferred)
}
