package redisstore_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/redisstore"
)

// syncBuffer is a bytes.Buffer safe for the store's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// sleepServer stalls srv for d (DEBUG SLEEP) and returns once the server
// is asleep; the channel reports the end of the sleep.
func sleepServer(t *testing.T, srv *redistest.Server, d string) <-chan error {
	t.Helper()
	ctx := context.Background()
	slept := make(chan error, 1)
	sleeper := srv.NewClient(t, nil)
	go func() { slept <- sleeper.Do(ctx, "DEBUG", "SLEEP", d).Err() }()
	probe := srv.NewClient(t, func(o *redis.Options) { o.ReadTimeout, o.MaxRetries = 20*time.Millisecond, -1 })
	for asleep := time.Now().Add(5 * time.Second); probe.Ping(ctx).Err() == nil; time.Sleep(time.Millisecond) {
		if time.Now().After(asleep) {
			t.Fatal("the server answered PING for 5s after DEBUG SLEEP was sent")
		}
	}
	return slept
}

// An acquire that fails because Redis stalled past the store's timeout
// holds nothing once the store has given its hold back: the acquires the
// store had sent run when the server wakes, and their holds, which no
// caller knows of, are released (a failed call spends nothing). Without
// the give-back they held their slots for their lifetime (a minute).
func TestFailedAcquireGivesBack(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	var log syncBuffer
	for _, pipelines := range []int{1, 4} {
		st := newGoRedis(t, srv.NewClient(t, nil), redisstore.WithPrefix("giveback:"),
			redisstore.WithTimeout(100*time.Millisecond), redisstore.WithBatching(pipelines),
			redisstore.WithLogger(slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))))
		lim := sluice.New(st)
		ctx := context.Background()
		c := sluice.MaxConcurrent(3)
		key := "pool" + strings.Repeat("x", pipelines)
		if ls, err := lim.Acquire(ctx, key, c, 1); err != nil || !ls.Allowed { // scripts loaded, connections open
			t.Fatalf("first acquire: %+v, %v", ls, err)
		} else if _, err := lim.Release(ctx, ls); err != nil {
			t.Fatal(err)
		}
		slept := sleepServer(t, srv, "0.6")
		var wg sync.WaitGroup
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if ls, err := lim.Acquire(ctx, key, c, 1); !errors.Is(err, sluice.ErrStoreUnavailable) {
					t.Errorf("acquire while the server sleeps: %+v, %v; want ErrStoreUnavailable", ls, err)
				}
			}()
		}
		wg.Wait()
		if err := <-slept; err != nil {
			t.Fatalf("DEBUG SLEEP: %v", err)
		}
		var free int64
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			ls, err := lim.Acquire(ctx, key, c, 0)
			if err != nil {
				t.Fatal(err)
			}
			if free = ls.Remaining; free == 3 || time.Now().After(deadline) {
				break
			}
		}
		if free != 3 {
			t.Errorf("%d pipelines: %d of 3 slots free 10s after the failed acquires, want 3 (their holds given back)\nlog:\n%s", pipelines, free, log.String())
		}
		st.Close()
	}
	if !strings.Contains(log.String(), "hold given back") {
		t.Errorf("no give-back was logged (the test's stall did not leave a hold):\n%s", log.String())
	}
}
