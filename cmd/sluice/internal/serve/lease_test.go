package serve

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
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

// FuzzDecodeLeaseRequest: any body is an error, a request by key whose key
// is set and whose limit is valid, or a request by descriptors: an acquire
// with a domain and descriptors, a release or an extension with a token
// alone; never a panic.
func FuzzDecodeLeaseRequest(f *testing.F) {
	for _, s := range []string{`{"key": "k", "limit": 2}`, `{"key": "k", "limit": 2, "lifetime": "1m", "units": 1}`, `{"key": "k", "limit": 1, "lease": "12"}`, `{`, `[]`, `{"limit": -1}`,
		`{"domain": "d", "descriptors": [[{"key": "k", "value": "v"}]], "units": 2}`, `{"lease": "c1.eyJkIjoiZCJ9"}`, `{"domain": "d", "lease": "c1.x"}`} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, b []byte, needLease bool) {
		r, c, err := decodeLeaseRequest(b, needLease)
		if err != nil {
			return
		}
		if r.Units != nil && *r.Units < 0 {
			t.Fatalf("accepted %q: negative units", b)
		}
		switch {
		case !r.byRules():
			if r.Key == "" || c.Validate() != nil || needLease != (r.Lease != "") {
				t.Fatalf("accepted %q: %+v %+v", b, r, c)
			}
		case needLease:
			if r.Key != "" || r.Domain != "" || r.Descriptors != nil || !strings.HasPrefix(r.Lease, tokenPrefix) {
				t.Fatalf("accepted %q as a release by token: %+v", b, r)
			}
		default:
			if r.Key != "" || r.Lease != "" || r.Domain == "" || len(r.Descriptors) == 0 {
				t.Fatalf("accepted %q as an acquire by descriptors: %+v", b, r)
			}
		}
	})
}

// FuzzLeaseToken: any text is a token within the service's bounds or an
// error; never a panic; a token encoded is read back as it was (its text
// valid UTF-8, as a JSON request decodes it).
func FuzzLeaseToken(f *testing.F) {
	f.Add("c1."+(&leaseToken{Domain: "jobs", Entries: [][2]string{{"tenant", "acme"}}, ID: 7, Degraded: true}).encode(), "jobs", "tenant", "acme", int64(7))
	f.Add("c1.e30", "d", "k", "", int64(1))
	f.Add("c1.!!", "", "", "", int64(0))
	o := Options{}
	if err := o.setDefaults(); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s, domain, key, value string, id int64) {
		if tok, entries, err := decodeToken(s, &o); err == nil {
			if tok.ID <= 0 || len(entries) == 0 || int64(len(entries)) > o.Limits.Entries || tok.Domain == "" || int64(len(tok.Domain)) > o.Limits.EntryBytes {
				t.Fatalf("accepted %q: %+v", s, tok)
			}
		}
		want := leaseToken{Domain: domain, Entries: [][2]string{{key, value}}, ID: id}
		got, _, err := decodeToken(want.encode(), &o)
		valid := domain != "" && key != "" && id > 0 && int64(len(domain)) <= o.Limits.EntryBytes && int64(len(key)) <= o.Limits.EntryBytes && int64(len(value)) <= o.Limits.EntryBytes && utf8.ValidString(domain) && utf8.ValidString(key) && utf8.ValidString(value)
		if valid && (err != nil || !reflect.DeepEqual(*got, want)) {
			t.Fatalf("%+v read back as %+v, %v", want, got, err)
		}
	})
}
