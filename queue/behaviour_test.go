package queue

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

// The behaviour tests run on every implementation (memory here, Redis
// standalone and cluster in redis_test.go) at fixed instants of a fake clock.

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: t0} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Sleep moves the clock forward by d and returns at once.
func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
	return ctx.Err()
}

// at sets the clock to t0 + d.
func (c *fakeClock) at(d time.Duration) {
	c.mu.Lock()
	c.t = t0.Add(d)
	c.mu.Unlock()
}

// maker opens a fresh, empty queue.
type maker func(t *testing.T, l sluice.Limit, opts ...Option) Queue

func leaky(rate int64, period time.Duration, burst int64) sluice.Limit {
	return sluice.Per(rate, period).WithBurst(burst).WithAlgorithm(sluice.LeakyBucket)
}

func runBehaviours(t *testing.T, mk maker) {
	t.Run("Full", func(t *testing.T) { testFull(t, mk) })
	t.Run("Spacing", func(t *testing.T) { testSpacing(t, mk) })
	t.Run("Redelivery", func(t *testing.T) { testRedelivery(t, mk) })
	t.Run("AckRequeued", func(t *testing.T) { testAckRequeued(t, mk) })
	t.Run("Payload", func(t *testing.T) { testPayload(t, mk) })
	t.Run("PopByClock", func(t *testing.T) { testPopByClock(t, mk) })
}

func TestMemoryBehaviours(t *testing.T) {
	runBehaviours(t, func(t *testing.T, l sluice.Limit, opts ...Option) Queue {
		q, err := NewMemory(l, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return q
	})
}

// us is d µs.
func us(d int64) time.Duration { return time.Duration(d) * time.Microsecond }

type pushStep struct {
	at     time.Duration // after t0
	ok     bool
	slot   time.Duration // after t0, when ok
	retryA time.Duration // when refused
}

// testFull: 3/s (T = 333333⅓µs) with Burst 2 takes three jobs at once; the
// fourth is refused with the leaky bucket's exact retry_after, and taken
// exactly when that wait is over.
func testFull(t *testing.T, mk maker) {
	clk := newFakeClock()
	q := mk(t, leaky(3, time.Second, 2), WithClock(clk))
	ctx := context.Background()
	for i, s := range []pushStep{
		{at: 0, ok: true, slot: 0},
		{at: 0, ok: true, slot: us(333334)},
		{at: 0, ok: true, slot: us(666667)},
		{at: 0, retryA: us(333334)},                      // ⌈3T − 2T⌉
		{at: 100 * time.Millisecond, retryA: us(233334)}, // ⌈3T − 0.1s − 2T⌉
		{at: us(333333), retryA: us(1)},                  // 1/3 µs short
		{at: us(333334), ok: true, slot: time.Second},
		{at: us(333334), retryA: us(333333)}, // ⌈4T − 333334µs − 2T⌉
	} {
		clk.at(s.at)
		r, err := q.Push(ctx, []byte{byte(i)})
		if err != nil {
			t.Fatal(err)
		}
		if r.Accepted != s.ok || s.ok && (!r.ReleaseAt.Equal(t0.Add(s.slot)) || r.ID == "" || r.RetryAfter != 0) ||
			!s.ok && (r.RetryAfter != s.retryA || r.ID != "") {
			t.Errorf("push %d at +%v: %+v (release +%v), want accepted=%v slot +%v retry %v",
				i, s.at, r, r.ReleaseAt.Sub(t0), s.ok, s.slot, s.retryA)
		}
	}
	if n, err := q.Len(ctx); err != nil || n != 4 {
		t.Errorf("Len = %d, %v; want 4", n, err)
	}
}

type popStep struct {
	at      time.Duration
	want    string // payload of the job released, "" for none
	attempt int
	slot    time.Duration // the job's ReleaseAt after t0
	wait    time.Duration // no job: the wait TryPop reports
	ack     bool
}

func runPops(t *testing.T, q Queue, clk *fakeClock, steps []popStep) map[string]*Job {
	t.Helper()
	ctx := context.Background()
	got := map[string]*Job{}
	for i, s := range steps {
		clk.at(s.at)
		job, wait, err := q.TryPop(ctx)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if s.want == "" {
			if job != nil {
				t.Fatalf("step %d at +%v: got job %q (attempt %d), want none (wait %v)", i, s.at, job.Payload, job.Attempt, s.wait)
			}
			if wait != s.wait {
				t.Errorf("step %d at +%v: wait %v, want %v", i, s.at, wait, s.wait)
			}
			continue
		}
		if job == nil {
			t.Fatalf("step %d at +%v: no job (wait %v), want %q", i, s.at, wait, s.want)
		}
		if string(job.Payload) != s.want || job.Attempt != s.attempt || !job.ReleaseAt.Equal(t0.Add(s.slot)) ||
			!job.DeliveredAt.Equal(t0.Add(s.at)) || wait != 0 {
			t.Errorf("step %d at +%v: job %q attempt %d slot +%v delivered +%v (wait %v); want %q attempt %d slot +%v delivered +%v",
				i, s.at, job.Payload, job.Attempt, job.ReleaseAt.Sub(t0), job.DeliveredAt.Sub(t0), wait, s.want, s.attempt, s.slot, s.at)
		}
		got[string(job.Payload)] = job
		if s.ack {
			if err := q.Ack(ctx, job); err != nil {
				t.Errorf("step %d: Ack: %v", i, err)
			}
		}
	}
	return got
}

func pushAll(t *testing.T, q Queue, payloads ...string) {
	t.Helper()
	for _, p := range payloads {
		r, err := q.Push(context.Background(), []byte(p))
		if err != nil || !r.Accepted {
			t.Fatalf("push %q: %+v, %v", p, r, err)
		}
	}
}

// testSpacing: releases are at least T apart, also for workers that come
// late to a backlog: it drains at the rate, not in a burst.
func testSpacing(t *testing.T, mk maker) {
	clk := newFakeClock()
	q := mk(t, leaky(10, time.Second, 9), WithClock(clk), WithVisibilityTimeout(time.Minute))
	pushAll(t, q, "a", "b", "c", "d", "e")
	ms := time.Millisecond
	runPops(t, q, clk, []popStep{
		{at: 0, want: "a", attempt: 1, slot: 0, ack: true},
		{at: 0, wait: 100 * ms},
		{at: 50 * ms, wait: 50 * ms},
		{at: 100 * ms, want: "b", attempt: 1, slot: 100 * ms, ack: true},
		// Workers away for a while: c, d and e are overdue.
		{at: 1000 * ms, want: "c", attempt: 1, slot: 200 * ms, ack: true},
		{at: 1000 * ms, wait: 100 * ms},
		{at: 1099 * ms, wait: 1 * ms},
		{at: 1100 * ms, want: "d", attempt: 1, slot: 300 * ms, ack: true},
		{at: 1250 * ms, want: "e", attempt: 1, slot: 400 * ms},
		// e is in flight: the next look worth making is its deadline.
		{at: 1250 * ms, wait: time.Minute},
	})
	if n, err := q.Len(context.Background()); err != nil || n != 1 {
		t.Errorf("Len = %d, %v; want 1 (e in flight)", n, err)
	}
}

// testRedelivery: a job not acknowledged in time comes back at its
// deadline, with a fresh slot and the spacing kept, exactly once more; once
// acknowledged it never comes back.
func testRedelivery(t *testing.T, mk maker) {
	clk := newFakeClock()
	q := mk(t, leaky(10, time.Second, 9), WithClock(clk), WithVisibilityTimeout(time.Second))
	ctx := context.Background()
	pushAll(t, q, "a", "b")
	ms := time.Millisecond
	got := runPops(t, q, clk, []popStep{
		{at: 0, want: "a", attempt: 1, slot: 0}, // its worker dies
		{at: 100 * ms, want: "b", attempt: 1, slot: 100 * ms},
		{at: 999 * ms, wait: 1 * ms},
		// a's deadline: a fresh slot (D, at 200ms, is past), released at once.
		{at: 1000 * ms, want: "a", attempt: 2, slot: 1000 * ms},
		// b's deadline, 1.1s: its fresh slot is 1.1s, released at once (T after a).
		{at: 1100 * ms, want: "b", attempt: 2, slot: 1100 * ms, ack: true},
		{at: 1150 * ms, wait: 850 * ms}, // until a's second deadline
	})
	if !got["a"].Deadline.Equal(t0.Add(2 * time.Second)) {
		t.Errorf("a's deadline +%v, want +2s", got["a"].Deadline.Sub(t0))
	}
	if err := q.Ack(ctx, got["a"]); err != nil {
		t.Fatalf("Ack a: %v", err)
	}
	if err := q.Ack(ctx, got["a"]); !errors.Is(err, ErrUnknownJob) {
		t.Errorf("second Ack a: %v, want ErrUnknownJob", err)
	}
	runPops(t, q, clk, []popStep{{at: 10 * time.Second, wait: -time.Microsecond}})
	if n, err := q.Len(ctx); err != nil || n != 0 {
		t.Errorf("Len = %d, %v; want 0", n, err)
	}
	// A redelivery is never refused, even beyond Burst: it takes the next
	// slot, and pushes wait behind it.
	q2 := mk(t, leaky(10, time.Second, 0), WithClock(clk), WithVisibilityTimeout(50*ms))
	sec := 20 * time.Second
	clk.at(sec)
	pushAll(t, q2, "x")
	runPops(t, q2, clk, []popStep{{at: sec, want: "x", attempt: 1, slot: sec}})
	clk.at(sec + 100*ms)
	pushAll(t, q2, "y")
	// x's deadline (20.05s) has passed: it goes back with slot 20.2s, after
	// y's, before y is released.
	runPops(t, q2, clk, []popStep{{at: sec + 100*ms, want: "y", attempt: 1, slot: sec + 100*ms, ack: true}})
	if r, err := q2.Push(ctx, []byte("z")); err != nil || r.Accepted || r.RetryAfter != 200*ms {
		t.Errorf("push z behind the redelivery: %+v, %v; want refused, retry 200ms", r, err)
	}
	runPops(t, q2, clk, []popStep{{at: sec + 200*ms, want: "x", attempt: 2, slot: sec + 200*ms, ack: true}})
}

// testAckRequeued: a job whose worker acknowledges it after its deadline
// passed, but before it was delivered again, is not delivered again.
func testAckRequeued(t *testing.T, mk maker) {
	clk := newFakeClock()
	q := mk(t, leaky(10, time.Second, 9), WithClock(clk), WithVisibilityTimeout(50*time.Millisecond))
	pushAll(t, q, "a", "b")
	ms := time.Millisecond
	got := runPops(t, q, clk, []popStep{
		{at: 0, want: "a", attempt: 1, slot: 0},
		// a is put back with slot 200ms (after b's); b waits for the gate.
		{at: 60 * ms, wait: 40 * ms},
	})
	if err := q.Ack(context.Background(), got["a"]); err != nil {
		t.Fatalf("late Ack: %v", err)
	}
	runPops(t, q, clk, []popStep{
		{at: 100 * ms, want: "b", attempt: 1, slot: 100 * ms, ack: true},
		{at: 300 * ms, wait: -time.Microsecond},
	})
}

// testPayload: payloads are binary-safe and the caller's to change.
func testPayload(t *testing.T, mk maker) {
	clk := newFakeClock()
	q := mk(t, leaky(1, time.Millisecond, 10), WithClock(clk))
	ctx := context.Background()
	p := []byte{0, 1, 2, '{', 0xff, 0}
	if _, err := q.Push(ctx, p); err != nil {
		t.Fatal(err)
	}
	p[0] = 9
	if _, err := q.Push(ctx, nil); err != nil {
		t.Fatal(err)
	}
	j1, _, err := q.TryPop(ctx)
	if err != nil || j1 == nil || string(j1.Payload) != "\x00\x01\x02{\xff\x00" {
		t.Fatalf("first job %+v, %v", j1, err)
	}
	clk.at(time.Millisecond)
	j2, _, err := q.TryPop(ctx)
	if err != nil || j2 == nil || len(j2.Payload) != 0 || j2.ID == j1.ID {
		t.Fatalf("second job %+v, %v", j2, err)
	}
}

// testPopByClock: Pop waits by the queue's clock, so a fake clock whose Sleep
// moves it drives Pop through a schedule with no real waiting (the poll
// interval is an hour), and each job comes at its release instant.
func testPopByClock(t *testing.T, mk maker) {
	clk := newFakeClock()
	q := mk(t, leaky(2, time.Second, 5), WithClock(clk), WithPollInterval(time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pushAll(t, q, "a", "b", "c")
	for i, want := range []string{"a", "b", "c"} {
		job, err := q.Pop(ctx)
		if err != nil || string(job.Payload) != want {
			t.Fatalf("Pop %d: %+v, %v; want %s", i, job, err, want)
		}
		at := t0.Add(time.Duration(i) * 500 * time.Millisecond)
		if !job.DeliveredAt.Equal(at) || !clk.Now().Equal(at) {
			t.Fatalf("Pop %d: delivered at %v, clock at %v; want both %v", i, job.DeliveredAt, clk.Now(), at)
		}
		if err := q.Ack(ctx, job); err != nil {
			t.Fatal(err)
		}
	}
}
