package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// jsonLines parses a log, every line of which must be a JSON object.
func jsonLines(t *testing.T, log string) []map[string]any {
	t.Helper()
	var out []map[string]any
	if log == "" {
		return nil
	}
	for _, l := range strings.Split(strings.TrimSuffix(log, "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Errorf("a log line is not JSON: %q", l)
			continue
		}
		out = append(out, m)
	}
	return out
}

// With --log-format json every line of serve's log is JSON, go-redis's own
// lines included, even with the store down; the start line names the
// store (its password hidden), the listeners and the console, and a store
// that does not answer at start is a warning.
func TestServeLogJSON(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String() // nothing listens there once closed
	ln.Close()
	var stderr testenv.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- serveCmd(ctx, []string{"--log-format", "json", "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0", "--key-form",
			"--store", "redis://app:s3cret@" + down + "/0", "--store-timeout", "200ms",
			"--gomaxprocs", fmt.Sprint(runtime.GOMAXPROCS(0)), "--gogc", "0"}, nil, &stderr, &stderr)
	}()
	var start map[string]any
	wait := func(what string, found func(m map[string]any) bool) map[string]any {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			for _, m := range jsonLines(t, stderr.String()) {
				if found(m) {
					return m
				}
			}
		}
		t.Fatalf("no log line %s:\n%s", what, stderr.String())
		return nil
	}
	start = wait("serving", func(m map[string]any) bool { return m["msg"] == "serving" })
	httpAddr, _ := start["http"].(string)
	if want := "redis://app:xxxxx@" + down + "/0"; start["store"] != want || start["console"] != "http://"+httpAddr+"/" || start["grpc"] == nil {
		t.Errorf("start line %v: want store %q, console http://%s/ and the listeners", start, want, httpAddr)
	}
	wait("warning that the store does not answer", func(m map[string]any) bool {
		return m["level"] == "WARN" && strings.Contains(fmt.Sprint(m["msg"]), "the store does not answer at start")
	})
	// A decision dials the store, and go-redis logs its failures.
	resp, err := http.Post("http://"+httpAddr+"/v1/take", "application/json", strings.NewReader(`{"key": "k", "limit": "1/1s"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/v1/take with the store down: %d, want 503", resp.StatusCode)
	}
	wait("from go-redis", func(m map[string]any) bool {
		return m["component"] == "go-redis" && m["level"] == "WARN" && strings.Contains(fmt.Sprint(m["msg"]), "dial")
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve: %v", err)
	}
	log := stderr.String()
	jsonLines(t, log)
	if strings.Contains(log, "s3cret") {
		t.Errorf("the log shows the store's password:\n%s", log)
	}
}

// go-redis's goroutines read its logger whenever they log (a dial that
// failed, in a goroutine a command started), so a serve that points the
// logger at its own while such a dial is under way must not write the
// variable they read: under -race this raced when serve called
// redis.SetLogger itself (CI, in the tests after a Redis-backed serve).
// The dial's failure reaches the serve's logger.
func TestRedisLoggerSwappedUnderADial(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close()
	c := redis.NewClient(&redis.Options{Addr: down, DialerRetries: 2, DialerRetryTimeout: 50 * time.Millisecond})
	defer c.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = c.Ping(ctx).Err()
	}()
	var buf testenv.SyncBuffer
	defer logRedisTo(slog.New(slog.NewJSONHandler(&buf, nil)))()
	<-done
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(buf.String(), "failed to dial"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("go-redis's failed dial is not in the serve's log: %q", buf.String())
		}
	}
	if m := jsonLines(t, buf.String()); m[0]["component"] != "go-redis" || m[0]["level"] != "WARN" {
		t.Errorf("go-redis's line %v: want component go-redis, level WARN", m[0])
	}
}
