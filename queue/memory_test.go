package queue

import (
	"context"
	"errors"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// randomLimit is a leaky-bucket limit with an emission interval that is
// often not a whole number of µs.
func randomLimit(rng *rand.Rand) sluice.Limit {
	periods := []time.Duration{time.Microsecond, 7 * time.Microsecond, time.Millisecond, time.Second, 1234567 * time.Microsecond}
	return leaky(1+rng.Int64N(7), periods[rng.IntN(len(periods))], rng.Int64N(6))
}

// TestPushIsTheLeakyBucket: on traces of pushes alone, Push makes exactly
// the leaky bucket's decisions (algo.Step, cost 1): accepted as allowed, the
// slot at now + delay, the same retry_after.
func TestPushIsTheLeakyBucket(t *testing.T) {
	rng := rand.New(rand.NewPCG(testenv.SeedOr(t, 1), 2))
	for trace := range 300 {
		l := randomLimit(rng)
		p, err := storelink.Params(l)
		if err != nil {
			t.Fatal(err)
		}
		clk := newFakeClock()
		q, err := NewMemory(l, WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		var st algo.State
		now := t0.UnixMicro()
		tt := ceilDiv(p.Period, p.Rate)
		for i := range 200 {
			now += rng.Int64N(2 * tt)
			clk.t = time.UnixMicro(now)
			d := algo.Step(&p, &st, now, 1, algo.Never)
			r, err := q.Push(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			want := PushResult{Accepted: d.Allowed, RetryAfter: us(d.RetryAfter)}
			if d.Allowed {
				want.ReleaseAt = time.UnixMicro(now + d.Delay)
			}
			if r.Accepted != want.Accepted || !r.ReleaseAt.Equal(want.ReleaseAt) || r.RetryAfter != want.RetryAfter {
				t.Fatalf("trace %d (%v), push %d at %d: %+v, want %+v", trace, l, i, now, r, want)
			}
		}
	}
}

// TestRandomInvariants runs random pushes, pops, acknowledgements and
// abandoned jobs on a fake clock, and checks what the queue promises:
// deliveries at least ⌈T⌉ apart and never before their slot, slots at least
// ⌊T⌋ apart, no acknowledged job delivered again, and nothing lost.
func TestRandomInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(testenv.SeedOr(t, 3), 4))
	redelivered := 0
	for range 200 {
		l := randomLimit(rng)
		p, _ := storelink.Params(l)
		tt := ceilDiv(p.Period, p.Rate)
		vis := time.Duration(1+rng.Int64N(5*tt)) * time.Microsecond
		clk := newFakeClock()
		q, err := NewMemory(l, WithClock(clk), WithVisibilityTimeout(vis))
		if err != nil {
			t.Fatal(err)
		}
		redelivered += checkInvariants(t, q, clk, p, rng, 300)
	}
	if redelivered == 0 {
		t.Error("no trace redelivered a job")
	}
}

// checkInvariants drives q with random operations and returns the number of
// redeliveries; see TestRandomInvariants.
func checkInvariants(t *testing.T, q Queue, clk *fakeClock, p algo.Params, rng *rand.Rand, ops int) int {
	t.Helper()
	ctx := context.Background()
	tt := ceilDiv(p.Period, p.Rate)
	floorT := p.Period / p.Rate
	now := clk.Now().UnixMicro()
	accepted := map[string]bool{}
	acked := map[string]bool{}
	var slots []int64
	var lastDelivered int64 = -1
	redelivered := 0
	deliver := func(j *Job) {
		id := j.ID
		if acked[id] {
			t.Fatalf("job %s delivered after its ack", id)
		}
		if !accepted[id] {
			t.Fatalf("job %s delivered, never pushed", id)
		}
		d, s := j.DeliveredAt.UnixMicro(), j.ReleaseAt.UnixMicro()
		if d < s {
			t.Fatalf("job %s delivered at %d before its slot %d", id, d, s)
		}
		if lastDelivered >= 0 && d-lastDelivered < tt {
			t.Fatalf("deliveries %d apart, T = %d/%d µs", d-lastDelivered, p.Period, p.Rate)
		}
		lastDelivered = d
		if j.Attempt > 1 {
			redelivered++
			slots = append(slots, s) // a redelivery's fresh slot
		}
	}
	for range ops {
		now += rng.Int64N(2 * tt)
		clk.t = time.UnixMicro(now)
		switch rng.IntN(3) {
		case 0:
			r, err := q.Push(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if r.Accepted {
				accepted[r.ID] = true
				slots = append(slots, r.ReleaseAt.UnixMicro())
			}
		default:
			j, _, err := q.TryPop(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if j == nil {
				continue
			}
			deliver(j)
			if rng.IntN(4) > 0 { // else its worker dies
				if err := q.Ack(ctx, j); err != nil {
					t.Fatalf("Ack %s: %v", j.ID, err)
				}
				acked[j.ID] = true
			}
		}
	}
	// Drain: every job pushed comes out, and is acknowledged once.
	for {
		j, wait, err := q.TryPop(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if j == nil {
			if wait < 0 {
				break
			}
			now += wait.Microseconds()
			clk.t = time.UnixMicro(now)
			continue
		}
		deliver(j)
		if err := q.Ack(ctx, j); err != nil {
			t.Fatal(err)
		}
		acked[j.ID] = true
	}
	if len(acked) != len(accepted) {
		t.Fatalf("%d jobs accepted, %d acknowledged", len(accepted), len(acked))
	}
	if n, _ := q.Len(ctx); n != 0 {
		t.Fatalf("Len %d after the drain", n)
	}
	sort.Slice(slots, func(i, j int) bool { return slots[i] < slots[j] })
	for i := 1; i < len(slots); i++ {
		if slots[i]-slots[i-1] < floorT {
			t.Fatalf("slots %d and %d closer than ⌊T⌋ = %d", slots[i-1], slots[i], floorT)
		}
	}
	return redelivered
}

// TestMemoryWorkers: eight workers on the real clock drain 100 jobs at
// 200/s: each delivered once, at least T apart, in 100 × T.
func TestMemoryWorkers(t *testing.T) {
	t.Parallel()
	q, err := NewMemory(leaky(200, time.Second, 100))
	if err != nil {
		t.Fatal(err)
	}
	testWorkers(t, []Queue{q}, 8, 100, 200)
}

// testWorkers has workers goroutines per queue value (each value standing
// for a process) drain n jobs pushed at once through the first, at rate per
// second: each is delivered once, deliveries at least T apart, in about
// n × T (loosely here: the 5% bound is TestDrainAcrossProcesses's, a
// stalled machine makes releases late for good).
func testWorkers(t *testing.T, qs []Queue, workers, n, rate int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second+time.Duration(2*n)*time.Second/time.Duration(rate))
	defer cancel()
	var mu sync.Mutex
	var jobs []*Job
	var wg sync.WaitGroup
	for _, q := range qs {
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					j, err := q.Pop(ctx)
					if err != nil {
						return
					}
					if err := q.Ack(context.Background(), j); err != nil {
						t.Error(err)
					}
					mu.Lock()
					jobs = append(jobs, j)
					done := len(jobs) == n
					mu.Unlock()
					if done {
						cancel()
					}
				}
			}()
		}
	}
	start := time.Now()
	for range n {
		if r, err := qs[0].Push(ctx, nil); err != nil || !r.Accepted {
			t.Fatalf("push: %+v, %v", r, err)
		}
	}
	wg.Wait()
	took := time.Since(start)
	if len(jobs) != n {
		t.Fatalf("%d jobs delivered, want %d", len(jobs), n)
	}
	seen := map[string]bool{}
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].DeliveredAt.Before(jobs[j].DeliveredAt) })
	for i, j := range jobs {
		if seen[j.ID] || j.Attempt != 1 {
			t.Errorf("job %s delivered twice", j.ID)
		}
		seen[j.ID] = true
		if i > 0 {
			if gap := j.DeliveredAt.Sub(jobs[i-1].DeliveredAt); gap < time.Second/time.Duration(rate) {
				t.Errorf("deliveries %v apart", gap)
			}
		}
	}
	want := time.Duration(n) * time.Second / time.Duration(rate)
	t.Logf("%d jobs in %v (first to last delivery %v), want %v", n, took, jobs[n-1].DeliveredAt.Sub(jobs[0].DeliveredAt), want)
	if (took < want*95/100 || took > want*125/100) && testenv.Timing(t, "drained within 25% of n×T") {
		t.Errorf("took %v, want %v within 25%%", took, want)
	}
}

func TestPopContext(t *testing.T) {
	t.Parallel()
	// The default clock waits by timers; a given one by its Sleep.
	for name, opts := range map[string][]Option{"default": nil, "clock": {WithClock(storelink.SystemClock{})}} {
		t.Run(name, func(t *testing.T) {
			q, err := NewMemory(leaky(1, time.Second, 1), append(opts, WithPollInterval(time.Hour))...)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			start := time.Now()
			if j, err := q.Pop(ctx); j != nil || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Pop on an empty queue: %v, %v", j, err)
			}
			if d := time.Since(start); d > time.Second && testenv.Timing(t, "Pop returns within 1s of its deadline") {
				t.Errorf("Pop returned %v after its deadline", d)
			}
			// A Push wakes a waiting Pop at once, whatever the poll interval.
			got := make(chan *Job)
			go func() {
				j, _ := q.Pop(context.Background())
				got <- j
			}()
			time.Sleep(20 * time.Millisecond)
			if _, err := q.Push(context.Background(), []byte("x")); err != nil {
				t.Fatal(err)
			}
			select {
			case j := <-got:
				if string(j.Payload) != "x" {
					t.Errorf("Pop got %q", j.Payload)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Pop not woken by Push")
			}
		})
	}
}

// TestClaimAhead: Pop claims a job up to the claim-ahead before its
// release instant, then returns at the instant, not before.
func TestClaimAhead(t *testing.T) {
	t.Parallel()
	q, err := NewMemory(leaky(10, time.Second, 1), WithClaimAhead(80*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 2 {
		if r, err := q.Push(ctx, nil); err != nil || !r.Accepted {
			t.Fatal(r, err)
		}
	}
	j1, err := q.Pop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// TryPop claims nothing early; Pop claims the second job 80ms before
	// its instant, 100ms after the first's...
	j2, _, _ := q.TryPop(ctx)
	if j2 != nil {
		if gap := j2.DeliveredAt.Sub(j1.DeliveredAt); gap < 100*time.Millisecond {
			t.Fatalf("TryPop released %s %v after the first", j2.ID, gap)
		}
		t.Skipf("the machine stalled %v between the first Pop and TryPop, which then released the second job in time: nothing left to test", time.Since(start))
	}
	j2, err = q.Pop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// ...and handed out at its instant.
	if gap := j2.DeliveredAt.Sub(j1.DeliveredAt); gap != 100*time.Millisecond {
		t.Errorf("releases %v apart, want 100ms", gap)
	}
	if took := time.Since(start); took < 90*time.Millisecond && testenv.Timing(t, "Pop returns at the release instant") {
		t.Errorf("second Pop returned %v after the first, want about 100ms", took)
	}
}

func TestInvalid(t *testing.T) {
	for _, c := range []struct {
		l    sluice.Limit
		opts []Option
		is   error
	}{
		{l: sluice.PerSecond(10), is: sluice.ErrInvalidLimit},
		{l: leaky(0, time.Second, 1), is: sluice.ErrInvalidLimit},
		{l: leaky(1, time.Nanosecond, 1), is: sluice.ErrInvalidLimit},
		{l: leaky(1, time.Second, 1), opts: []Option{WithVisibilityTimeout(0)}},
		{l: leaky(1, time.Second, 1), opts: []Option{WithPollInterval(-1)}},
		{l: leaky(1, time.Second, 1), opts: []Option{WithClaimAhead(-1)}},
		{l: leaky(1, time.Second, 1), opts: []Option{WithTimeout(0)}},
	} {
		if _, err := NewMemory(c.l, c.opts...); err == nil || c.is != nil && !errors.Is(err, c.is) {
			t.Errorf("NewMemory(%v): %v, want %v", c.l, err, c.is)
		}
		if _, err := NewRedis(nil, "q", c.l, c.opts...); err == nil || c.is != nil && !errors.Is(err, c.is) {
			t.Errorf("NewRedis(%v): %v, want %v", c.l, err, c.is)
		}
	}
	for _, name := range []string{"", "a{b", "a}"} {
		if _, err := NewRedis(nil, name, leaky(1, time.Second, 1)); err == nil {
			t.Errorf("NewRedis name %q: no error", name)
		}
	}
	clk := newFakeClock()
	clk.t = time.UnixMicro(-1)
	q, _ := NewMemory(leaky(1, time.Second, 1), WithClock(clk))
	if _, err := q.Push(context.Background(), nil); !errors.Is(err, sluice.ErrInvalidTime) {
		t.Errorf("push before the epoch: %v", err)
	}
}
