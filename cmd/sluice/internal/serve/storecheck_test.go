package serve

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/redisstore"
)

// waitLog waits until the log holds s.
func waitLog(t *testing.T, log *testenv.SyncBuffer, s string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(log.String(), s); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the log does not say %q:\n%s", s, log.String())
		}
	}
}

// On a Redis whose maxmemory-policy may evict keys (allkeys-lru), an
// evicted key forgets what was spent: the service says so at start (a
// warning and sluice_serve_store_may_evict 1) and in /readyz's body, which
// stays 200; once the policy is noeviction again, /readyz's next probe
// clears both.
func TestStoreMayEvict(t *testing.T) {
	srv := redistest.Standalone(t)
	ctx := context.Background()
	c := srv.Client()
	if err := c.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	rs, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	var log testenv.SyncBuffer
	ts := start(t, Options{Store: rs, Logger: slog.New(slog.NewJSONHandler(&log, nil)), Ping: func(ctx context.Context) error { return c.Ping(ctx).Err() }}, nil)
	waitLog(t, &log, `"level":"WARN","msg":"the store may not keep the limiter's budgets","problem":"store: redisstore: Redis may evict limiter keys: maxmemory-policy is allkeys-lru`)
	_, page := httpGet(t, ts.base+"/metrics")
	if !strings.Contains(page, "sluice_serve_store_may_evict 1") {
		t.Errorf("/metrics:\n%s", grep(page, "may_evict"))
	}
	code, body := httpGet(t, ts.base+"/readyz")
	if code != 200 || !strings.HasPrefix(body, "ready\nwarning: store: ") || !strings.Contains(body, "allkeys-lru") || !strings.Contains(body, "noeviction") {
		t.Errorf("/readyz on allkeys-lru: %d %q, want 200 with a warning naming the policy and the cure", code, body)
	}
	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if code, body := httpGet(t, ts.base+"/readyz"); code != 200 || body != "ready\n" {
		t.Errorf("/readyz on noeviction: %d %q, want 200 ready", code, body)
	}
	if _, page := httpGet(t, ts.base+"/metrics"); !strings.Contains(page, "sluice_serve_store_may_evict 0") {
		t.Errorf("/metrics after noeviction:\n%s", grep(page, "may_evict"))
	}
	waitLog(t, &log, "the store keeps the limiter's budgets again")
}
