package serve

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// The lease calls: two acquires of a limit of 2 are held, a third is 429
// with Retry-After the lifetime; a release frees a slot, a second release
// of it reports it no longer held; an extension moves the expiry, and a
// lease whose lifetime ended can be neither extended nor released.
func TestLeaseEndpoints(t *testing.T) {
	ts, clock := startTest(t, Options{})
	post := func(path, body string, code int) LeaseResponse {
		t.Helper()
		resp, out := httpPost(t, ts.base+path, body)
		if resp.StatusCode != code {
			t.Fatalf("%s %s: %d %s, want %d", path, body, resp.StatusCode, out, code)
		}
		var r LeaseResponse
		if code < 300 || code == 429 {
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("%s: %v (%s)", path, err, out)
			}
		}
		if code == 429 && resp.Header.Get("Retry-After") != "30" {
			t.Errorf("Retry-After %q, want 30", resp.Header.Get("Retry-After"))
		}
		return r
	}
	acq := `{"key": "exports:acme", "limit": 2, "lifetime": "30s"}`
	a := post("/v1/acquire", acq, 200)
	b := post("/v1/acquire", acq, 200)
	if !a.Allowed || a.Lease == "" || a.Lease == b.Lease || b.Remaining != 0 || a.ExpiryUS != t0.UnixMicro()+30_000_000 {
		t.Fatalf("acquires: %+v %+v", a, b)
	}
	if c := post("/v1/acquire", acq, 429); c.Allowed || c.Lease != "" || c.RetryAfterUS != 30_000_000 {
		t.Fatalf("the third: %+v", c)
	}
	rel := func(lease string) string {
		return `{"key": "exports:acme", "limit": 2, "lease": "` + lease + `"}`
	}
	if r := post("/v1/release", rel(a.Lease), 200); !r.Allowed || r.Remaining != 1 {
		t.Fatalf("release: %+v", r)
	}
	if r := post("/v1/release", rel(a.Lease), 200); r.Allowed {
		t.Fatalf("second release: %+v, want not held", r)
	}
	clock.Set(t0.Add(20 * time.Second))
	ext := `{"key": "exports:acme", "limit": 2, "lifetime": "30s", "lease": "` + b.Lease + `"}`
	if r := post("/v1/extend", ext, 200); !r.Allowed || r.ExpiryUS != t0.Add(50*time.Second).UnixMicro() {
		t.Fatalf("extend: %+v", r)
	}
	clock.Set(t0.Add(50 * time.Second))
	if r := post("/v1/extend", ext, 200); r.Allowed {
		t.Fatalf("extend at the expiry: %+v, want not held", r)
	}
	for _, bad := range []string{
		`{"key": "", "limit": 2}`,
		`{"key": "k", "limit": 0}`,
		`{"key": "k", "limit": 2, "lifetime": "soon"}`,
		`{"key": "k", "limit": 2, "units": 3}`,
		`{"key": "k", "limit": 2, "lease": "1"}`,
		`{"key": "k", "limit": 2, "extra": 1}`,
	} {
		resp, out := httpPost(t, ts.base+"/v1/acquire", bad)
		if resp.StatusCode != 400 {
			t.Errorf("acquire %s: %d %s, want 400", bad, resp.StatusCode, out)
		}
	}
	for _, bad := range []string{`{"key": "k", "limit": 2}`, `{"key": "k", "limit": 2, "lease": "x"}`, `{"key": "k", "limit": 2, "lease": "-4"}`} {
		resp, out := httpPost(t, ts.base+"/v1/release", bad)
		if resp.StatusCode != 400 || strings.Contains(out, "internal") {
			t.Errorf("release %s: %d %s, want 400", bad, resp.StatusCode, out)
		}
	}
}

// FuzzDecodeLeaseRequest: any body is an error or a request whose key is
// set and whose limit is valid; never a panic.
func FuzzDecodeLeaseRequest(f *testing.F) {
	for _, s := range []string{`{"key": "k", "limit": 2}`, `{"key": "k", "limit": 2, "lifetime": "1m", "units": 1}`, `{"key": "k", "limit": 1, "lease": "12"}`, `{`, `[]`, `{"limit": -1}`} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, b []byte, needLease bool) {
		r, c, err := decodeLeaseRequest(b, needLease)
		if err != nil {
			return
		}
		if r.Key == "" || c.Validate() != nil || needLease != (r.Lease != "") {
			t.Fatalf("accepted %q: %+v %+v", b, r, c)
		}
	})
}
