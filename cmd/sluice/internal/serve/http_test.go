package serve

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/redisstore"
)

// envoy's POST /json: 200 with the response, 429 over the limit, 400 for a
// bad body.
func TestJSONEndpoint(t *testing.T) {
	ts, _ := startTest(t, Options{})
	body := `{"domain": "test", "descriptors": [{"entries": [{"key": "nested", "value": "a"}, {"key": "sub", "value": "x"}]}]}`
	for i, code := range []int{200, 200, 429} {
		resp, out := httpPost(t, ts.base+"/json", body)
		if resp.StatusCode != code {
			t.Fatalf("call %d: %d %s, want %d", i, resp.StatusCode, out, code)
		}
		var r pb.RateLimitResponse
		if err := protojson.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("call %d: %v in %s", i, err, out)
		}
		if r.Statuses[0].CurrentLimit.Name != "sub_limit" {
			t.Errorf("call %d: %s", i, out)
		}
		// A refusal says when to come back, as /v1/take's does: the
		// hour's window ends at 13:00, 59m30s after t0.
		if ra := resp.Header.Get("Retry-After"); (code == 429) != (ra != "") || code == 429 && ra != "3570" {
			t.Errorf("call %d: %d with Retry-After %q, want 3570 on the 429 only", i, code, ra)
		}
	}
	for _, bad := range []string{`{`, `{"domain": 1}`, `{"domain": "test"}`, `{"nope": 1}`} {
		if resp, out := httpPost(t, ts.base+"/json", bad); resp.StatusCode != 400 {
			t.Errorf("%s: %d %s, want 400", bad, resp.StatusCode, out)
		}
	}
}

// sluice's POST /v1/take: configured descriptors or a key and a limit; every
// Result field, the draft-11 headers, Retry-After on 429.
func TestTakeEndpoint(t *testing.T) {
	ts, _ := startTest(t, Options{})
	var r TakeResponse
	for i, code := range []int{200, 200, 429} {
		resp, out := httpPost(t, ts.base+"/v1/take", `{"key": "partner:acme", "limit": "2/1m"}`)
		if resp.StatusCode != code {
			t.Fatalf("key call %d: %d %s", i, resp.StatusCode, out)
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		if code == 429 {
			if r.Allowed || r.RetryAfterUS != 30_000_000 || resp.Header.Get("Retry-After") != "30" {
				t.Errorf("refused: %s, Retry-After %q", out, resp.Header.Get("Retry-After"))
			}
		} else if !r.Allowed || r.Remaining != int64(1-i) {
			t.Errorf("call %d: %s", i, out)
		}
		if p := resp.Header.Get("RateLimit-Policy"); p != `"key";q=2;w=60` {
			t.Errorf("RateLimit-Policy %q", p)
		}
	}
	resp, out := httpPost(t, ts.base+"/v1/take", `{"key": "k", "limit": "10/1s token-bucket burst 50", "cost": 0}`)
	if resp.StatusCode != 200 || !strings.Contains(out, `"remaining":50`) {
		t.Errorf("look: %d %s", resp.StatusCode, out)
	}
	resp, out = httpPost(t, ts.base+"/v1/take", `{"domain": "test", "descriptors": [[{"key": "key1", "value": "value1"}], [{"key": "free"}]], "hits_addend": 2}`)
	if resp.StatusCode != 200 || !strings.Contains(out, `"allowed":true,"remaining":1`) || !strings.Contains(out, `"code":"OK","requests_per_unit":3,"unit":"minute","remaining":1`) {
		t.Errorf("domain: %d %s", resp.StatusCode, out)
	}
	if resp.Header.Get("RateLimit") == "" {
		t.Errorf("domain: no RateLimit header")
	}
	if resp, out := httpPost(t, ts.base+"/v1/take", `{"domain": "test", "descriptors": [[{"key": "blocked"}]]}`); resp.StatusCode != 429 || !strings.Contains(out, `"allowed":false`) {
		t.Errorf("requests_per_unit 0: %d %s, want 429", resp.StatusCode, out)
	}
	resp, out = httpPost(t, ts.base+"/v1/take", `{"domain": "test", "descriptors": [[{"key": "key1", "value": "value1"}]], "hits_addend": 2}`)
	if resp.StatusCode != 429 || !strings.Contains(out, `"code":"OVER_LIMIT"`) {
		t.Errorf("domain over: %d %s", resp.StatusCode, out)
	}
	for bad, msg := range map[string]string{
		`{"key": "k"}`:                                 `"key" and "limit" are both required`,
		`{"key": "k", "limit": "10/0s"}`:               "limit:",
		`{"key": "k", "limit": "1/1s", "cost": 5}`:     "exceeds",
		`{"key": "k", "limit": "1/1s", "domain": "d"}`: "not both",
		`{"domain": "d"}`:                              "at least one descriptor",
		`{"what": 1}`:                                  "unknown field",
		`{}`:                                           `give "domain"`,
		`{"domain": "test", "descriptors": [[]]}`:      "no entries",
		`{"key": "k", "limit": "1/1s", "cost": -1}`:    "negative",
		`{"key": "k", "limit": "1/1s"} {"key": "k2"}`:  "more than one",
	} {
		resp, out := httpPost(t, ts.base+"/v1/take", bad)
		if resp.StatusCode != 400 || !strings.Contains(out, msg) {
			t.Errorf("%s: %d %q, want 400 with %q", bad, resp.StatusCode, out, msg)
		}
	}
	if resp, _ := httpPost(t, ts.base+"/v1/take", `{"key": "`+strings.Repeat("x", 70_000)+`", "limit": "1/1s"}`); resp.StatusCode != 413 {
		t.Errorf("a 70 kB body: %d, want 413", resp.StatusCode)
	}
}

// /healthz, /readyz, /metrics, /debug/config, the bearer token and a mounted
// handler.
func TestHTTPEndpoints(t *testing.T) {
	ts, _ := startTest(t, Options{HTTPToken: "s3cret", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("console")) })})
	if code, _ := httpGet(t, ts.base+"/healthz"); code != 200 {
		t.Errorf("/healthz %d", code)
	}
	if code, body := httpGet(t, ts.base+"/healthcheck"); code != 200 || body != "OK" {
		t.Errorf("/healthcheck (envoyproxy/ratelimit's probe) %d %q, want 200 OK without the token", code, body)
	}
	if code, _ := httpGet(t, ts.base+"/readyz"); code != 200 {
		t.Errorf("/readyz %d", code)
	}
	for _, p := range []string{"/metrics", "/debug/config", "/"} {
		if code, _ := httpGet(t, ts.base+p); code != 401 {
			t.Errorf("%s without the token: %d, want 401", p, code)
		}
	}
	if resp, _ := httpPost(t, ts.base+"/v1/take", `{"key":"k","limit":"1/1s"}`, "Authorization", "Bearer wrong"); resp.StatusCode != 401 {
		t.Errorf("wrong token: %d", resp.StatusCode)
	}
	get := func(p string, hdr ...string) (int, string) {
		return httpGet(t, ts.base+p, append([]string{"Authorization", "Bearer s3cret"}, hdr...)...)
	}
	if code, body := get("/"); code != 200 || body != "console" {
		t.Errorf("mounted handler: %d %q", code, body)
	}
	code, body := get("/debug/config")
	if code != 200 || !strings.Contains(body, "sub_limit") {
		t.Errorf("/debug/config: %d %s", code, body)
	}
	code, body = get("/debug/config?format=json")
	var cfg struct {
		Rules []configRule `json:"rules"`
	}
	if err := json.Unmarshal([]byte(body), &cfg); code != 200 || err != nil || len(cfg.Rules) != 10 {
		t.Errorf("/debug/config JSON: %d %v %d rules\n%s", code, err, len(cfg.Rules), body)
	}
	ts.call(t, "test", desc("key1=zzz"))
	ts.call(t, "test", desc("detail=v1"))
	code, body = get("/metrics")
	if code != 200 {
		t.Errorf("/metrics: %d", code)
	}
	for _, want := range []string{
		`sluice_serve_calls_total{code="ok",door="grpc"} 2`,
		`sluice_serve_config_loads_total{result="ok"} 1`,
		`sluice_serve_rule_decisions_total{domain="test",outcome="allowed",rule="test.detail_v1"} 1`,
		`sluice_serve_call_duration_seconds_count{door="grpc"} 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(body, "zzz") {
		t.Errorf("/metrics has a per-value series for a rule without detailed_metric:\n%s", grep(body, "zzz"))
	}
}

// Hot reload under load: a good config takes effect, a broken one is
// rejected whole (logged, counted, the old one stays), and no call fails;
// every call sees one configuration or the other.
func TestReloadUnderLoad(t *testing.T) {
	dir := writeConfig(t, map[string]string{"test.yaml": testConfig})
	ts := start(t, Options{Config: dir}, &fakeClock{t: t0})
	var calls, failures atomic.Int64
	stop := load(8, func(g, _ int) bool {
		_, err := ts.client.ShouldRateLimit(t.Context(), &pb.RateLimitRequest{Domain: "test", Descriptors: []*rlv3.RateLimitDescriptor{desc("free=x"), desc("key1=g" + string(rune('a'+g)))}})
		calls.Add(1)
		if err != nil {
			failures.Add(1)
			t.Errorf("call failed during reloads: %v", err)
		}
		return err == nil
	})
	write := func(body string) {
		tmp := filepath.Join(dir, ".tmp")
		if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "test.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	loaded := ts.Config().Loaded
	write(strings.Replace(testConfig, "requests_per_unit: 3", "requests_per_unit: 7", 1))
	waitFor("the good config", func() bool { return ts.Config().Loaded.After(loaded) })
	want(t, "after reload", ts.call(t, "test", desc("key1=value1")).Statuses[0], ok, 6, 7, minute)
	loaded = ts.Config().Loaded
	write("domain: test\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	waitFor("the broken config's rejection", func() bool { return ts.Config().LastError != nil })
	if ts.Config().Loaded != loaded {
		t.Errorf("a broken config replaced the good one")
	}
	want(t, "after a broken reload", ts.call(t, "test", desc("key1=value1")).Statuses[0], ok, 5, 7, minute)
	// SIGHUP-equivalent: Reload by hand of the same broken file.
	if err := ts.Reload(); err == nil {
		t.Errorf("Reload of a broken config: no error")
	}
	write(testConfig)
	waitFor("the good config again", func() bool { return ts.Config().LastError == nil })
	stop()
	_, body := httpGet(t, ts.base+"/metrics")
	if !strings.Contains(body, `sluice_serve_config_loads_total{result="failed"}`) || strings.Contains(body, `sluice_serve_config_loads_total{result="failed"} 0`) {
		t.Errorf("failed loads not counted:\n%s", grep(body, "config_loads"))
	}
	t.Logf("%d calls during the reloads, %d failed", calls.Load(), failures.Load())
}

// /v1/take by key has a key namespace of its own: no key a caller names
// reaches a descriptor's budget, and no descriptor reaches a key's. (Before,
// the key "test/key1=alice" was key1=alice's store key: on Redis, taking it
// under a token bucket of burst 10 rewrote the descriptor's window and gave
// alice 10 more in the same minute.)
func TestTakeKeyOwnNamespace(t *testing.T) {
	srv := redistest.Standalone(t)
	for _, c := range []struct {
		name  string
		redis bool
		slot  bool
	}{{"memory", false, false}, {"memory, domain slot", false, true}, {"redis", true, false}, {"redis, domain slot", true, true}} {
		clock := &fakeClock{t: t0}
		o := Options{Config: writeConfig(t, map[string]string{"test.yaml": testConfig}), DomainSlot: c.slot}
		if c.redis {
			srv.Client().FlushAll(context.Background())
			rs, err := redisstore.New(srv.Client(), redisstore.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			o.Store = rs
		}
		ts := start(t, o, clock)
		for range 5 {
			ts.call(t, "test", desc("key1=alice"))
		}
		for _, k := range []string{"test/key1=alice", "{test}/key1=alice"} {
			if resp, out := httpPost(t, ts.base+"/v1/take", `{"key": "`+k+`", "limit": "1000000/1s token-bucket burst 10"}`); resp.StatusCode != 200 {
				t.Fatalf("%s: take %s: %d %s", c.name, k, resp.StatusCode, out)
			}
		}
		clock.Set(t0.Add(time.Second)) // the same minute; the bucket has refilled
		if r := ts.call(t, "test", desc("key1=alice")); r.OverallCode != over {
			t.Errorf("%s: alice's 6th call in the minute, after /v1/take of her descriptor's key: %s, want OVER_LIMIT", c.name, codesOf(r))
		}
		// The other way: spending a key leaves the descriptor's budget.
		for _, k := range []string{"test/key1=bob", "{test}/key1=bob"} {
			for range 5 {
				httpPost(t, ts.base+"/v1/take", `{"key": "`+k+`", "limit": "5/1m aligned-window"}`)
			}
		}
		if st := ts.call(t, "test", desc("key1=bob")).Statuses[0]; st.Code != ok || st.LimitRemaining != 4 {
			t.Errorf("%s: bob's first call after his descriptor's key was spent by key: %v %d left, want OK 4", c.name, st.Code, st.LimitRemaining)
		}
	}
}
