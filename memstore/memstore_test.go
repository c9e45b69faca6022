package memstore_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/internal/testsupport/storetest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/memstore"
)

const base = int64(1_764_000_000_000_000)

func request(key string, l sluice.Limit, cost int64) storelink.Request {
	p, err := storelink.Params(l)
	if err != nil {
		panic(err)
	}
	return storelink.Request{Key: key, Params: p, Cost: cost, MaxDelay: algo.Never}
}

// Many goroutines on a few keys admit exactly the burst: the entry lock makes
// each step atomic.
func TestConcurrentExact(t *testing.T) {
	for _, l := range []sluice.Limit{
		sluice.PerHour(1).WithBurst(1000),
		sluice.PerHour(1000).WithAlgorithm(sluice.FixedWindow),
		sluice.PerHour(1000).WithAlgorithm(sluice.SlidingLog),
		sluice.PerHour(1000).WithAlgorithm(sluice.SlidingWindow),
		sluice.PerHour(1).WithBurst(1000).WithAlgorithm(sluice.GCRA),
		sluice.PerHour(1).WithBurst(999).WithAlgorithm(sluice.LeakyBucket),
	} {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			var clock atomic.Int64
			clock.Store(base)
			s := memstore.New(memstore.WithClock(storelink.MicroClock(func() int64 { return clock.Add(1) })))
			lim := sluice.New(s)
			var allowed [4]atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < 16; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 1000; i++ {
						k := (g + i) % 4
						r, err := lim.Take(context.Background(), "key:"+strconv.Itoa(k), l, 1)
						if err != nil {
							t.Error(err)
							return
						}
						if r.Allowed {
							allowed[k].Add(1)
						}
					}
				}()
			}
			wg.Wait()
			for k := range allowed {
				if got := allowed[k].Load(); got != 1000 {
					t.Errorf("key %d: %d allowed, want exactly 1000", k, got)
				}
			}
		})
	}
}

// Ten million one-off keys must not stay in memory: keys whose state is fresh
// again are swept as new keys arrive.
func TestOneOffKeysAreDropped(t *testing.T) {
	n := 2_000_000
	if !testenv.Long() {
		n = 200_000
	}
	now := base
	s := memstore.New(memstore.WithClock(storelink.MicroClock(func() int64 { return now })), memstore.WithShards(16))
	req := request("", sluice.PerSecond(10), 1)
	peak := 0
	for i := 0; i < n; i++ {
		now += 10 // 100,000 new keys a second, each fresh again after 100ms
		req.Key = "one-off:" + strconv.Itoa(i)
		if _, err := storetest.TakeAt(context.Background(), s, req, now); err != nil {
			t.Fatal(err)
		}
		if i%50_000 == 0 {
			peak = max(peak, s.Len())
		}
	}
	// About 10,000 keys are live at any time (100ms of arrivals); the sweep
	// lets a shard double before it runs.
	t.Logf("peak %d keys held for about 10,000 live", peak)
	if peak > 4*10_000+16*64 {
		t.Fatalf("peak %d keys held for about 10,000 live", peak)
	}
	now += int64(time.Second / time.Microsecond)
	s.Sweep()
	if s.Len() != 0 {
		t.Fatalf("%d keys left after all are fresh", s.Len())
	}
}

// A key is kept until its state is equivalent to fresh, never dropped before.
func TestSweepKeepsLiveState(t *testing.T) {
	now := base
	s := memstore.New(memstore.WithClock(storelink.MicroClock(func() int64 { return now })))
	lim := sluice.New(s)
	ctx := context.Background()
	l := sluice.PerSecond(1).WithBurst(3)
	lim.Take(ctx, "k", l, 3)
	now += 2_999_999
	s.Sweep()
	if s.Len() != 1 {
		t.Fatal("swept a key that was not yet fresh")
	}
	if r, _ := lim.Take(ctx, "k", l, 3); r.Allowed {
		t.Fatal("the bucket refilled early")
	}
	now += 3_000_000
	s.Sweep()
	if s.Len() != 0 {
		t.Fatal("a fresh key was kept")
	}
}

// A query or a refund under another algorithm leaves the key's state, and
// the time it is fresh at, as they were: a sweep after it keeps what was
// spent.
func TestQueryOfAnotherAlgorithmKeepsState(t *testing.T) {
	now := base
	s := memstore.New(memstore.WithClock(storelink.MicroClock(func() int64 { return now })))
	lim := sluice.New(s)
	ctx := context.Background()
	l := sluice.PerHour(5)
	lim.Take(ctx, "k", l, 5)
	for _, a := range []sluice.Algorithm{sluice.SlidingLog, sluice.FixedWindow, sluice.AlignedWindow} {
		lim.Take(ctx, "k", sluice.PerSecond(5).WithAlgorithm(a), 0)
	}
	now += 2_000_000
	s.Sweep()
	if r, _ := lim.Take(ctx, "k", l, 1); r.Allowed {
		t.Fatal("a sweep after queries of other algorithms forgot the spent units")
	}
}

// A query on an unknown key stores nothing.
func TestQueryStoresNothing(t *testing.T) {
	s := memstore.New()
	lim := sluice.New(s)
	r, err := lim.Take(context.Background(), "k", sluice.PerSecond(7), 0)
	if err != nil || !r.Allowed || r.Remaining != 7 || s.Len() != 0 {
		t.Fatalf("%+v %v, %d keys", r, err, s.Len())
	}
}

func TestBadTime(t *testing.T) {
	s := memstore.New()
	if _, err := storetest.TakeAt(context.Background(), s, request("k", sluice.PerSecond(1), 1), -5); !errors.Is(err, sluice.ErrInvalidTime) {
		t.Fatalf("a negative time: %v, want an error wrapping ErrInvalidTime", err)
	}
}

// TestMemoryPerKey measures the heap held per key, the figure the package doc
// gives, at several key counts: the tables' load, between a quarter and a
// half, moves it.
func TestMemoryPerKey(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("measures memory")
	}
	for _, n := range []int{100_000, 150_000, 200_000, 300_000} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = "user:" + strconv.Itoa(1_000_000+i) // 12 bytes each
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := memstore.New(memstore.WithClock(storelink.MicroClock(func() int64 { return base })))
		req := request("", sluice.PerMinute(10), 1)
		for _, k := range keys {
			req.Key = k
			storetest.TakeAt(context.Background(), s, req, base)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		per := float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
		t.Logf("%d keys: memory per key %.0f bytes (keys of 12 bytes, not counted: they are the caller's)", n, per)
		if per > 190 {
			t.Errorf("%d keys: memory per key %.0f bytes, documented as 150 to 190", n, per)
		}
		runtime.KeepAlive(s)
	}
}

// Decisions, composites, new keys (table growth), sweeps and resets all at
// once: the entry locks keep every step atomic while keys come and go around
// them. Eight hot keys that never become fresh admit exactly their burst,
// whatever the churn; run with -race, it also checks the lock-free lookup.
func TestConcurrentChurn(t *testing.T) {
	var clock atomic.Int64
	clock.Store(base)
	s := memstore.New(memstore.WithClock(storelink.MicroClock(func() int64 { return clock.Add(1) })), memstore.WithShards(4))
	lim := sluice.New(s)
	ctx := context.Background()
	hot := sluice.PerHour(1).WithBurst(500)
	cold := sluice.PerSecond(1_000_000).WithBurst(2) // fresh again 2µs after a take
	const hotKeys, rounds = 8, 5000
	var admitted [hotKeys]atomic.Int64
	var stop atomic.Bool
	var wg, churn sync.WaitGroup
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				k := (g*7 + i) % hotKeys
				if g%3 == 0 {
					// A composite of two hot keys: both or neither.
					k2 := (k + 1 + i%(hotKeys-1)) % hotKeys
					r, err := lim.TakeAll(ctx, []sluice.Part{{Key: "hot:" + strconv.Itoa(k), Limit: hot, Cost: 1}, {Key: "hot:" + strconv.Itoa(k2), Limit: hot, Cost: 1}}, nil)
					if err != nil {
						t.Error(err)
						return
					}
					if r.Allowed {
						admitted[k].Add(1)
						admitted[k2].Add(1)
					}
					continue
				}
				r, err := lim.Take(ctx, "hot:"+strconv.Itoa(k), hot, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if r.Allowed {
					admitted[k].Add(1)
				}
			}
		}()
	}
	for g := 0; g < 3; g++ {
		churn.Add(1)
		go func() {
			defer churn.Done()
			for i := 0; !stop.Load(); i++ {
				key := "cold:" + strconv.Itoa(g) + ":" + strconv.Itoa(i%5000)
				switch {
				case g == 2 && i%50 == 0:
					s.Sweep()
				case g == 2 && i%7 == 0:
					if err := lim.Reset(ctx, key); err != nil {
						t.Error(err)
						return
					}
				default:
					if _, err := lim.Take(ctx, key, cold, 1); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	stop.Store(true)
	churn.Wait()
	for k := range admitted {
		if got := admitted[k].Load(); got != 500 {
			t.Errorf("hot:%d: %d admitted, want exactly its burst, 500", k, got)
		}
	}
	t.Logf("%d keys held at the end", s.Len())
}
