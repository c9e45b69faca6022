package serve

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/dunglas/httpsfv"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
	"google.golang.org/protobuf/encoding/protojson"
)

// fieldsConfig has rules whose names are not printable ASCII, a bucket
// whose burst is above its rate, and one whose burst is beyond an RFC 9651
// Integer.
const fieldsConfig = `domain: fields
descriptors:
  - key: café
    rate_limit:
      unit: minute
      requests_per_unit: 3
  - key: tab
    rate_limit:
      unit: minute
      requests_per_unit: 3
      name: "a\tb \"quoted\" 50%"
  - key: bucket
    rate_limit:
      unit: second
      requests_per_unit: 10
      algorithm: gcra
      burst: 50
  - key: huge
    rate_limit:
      period: 1us
      requests_per_unit: 1
      algorithm: token-bucket
      burst: 1125899906842623
`

// sfFigs is one item of a draft-11 field as an independent RFC 9651
// parser (httpsfv) reads it: its name percent-decoded, and its Integers.
type sfFigs struct {
	name       string
	q, w, r, t int64
}

// readDraft11 parses a RateLimit-Policy and a RateLimit value with httpsfv
// and pairs their items; r is never above q.
func readDraft11(t *testing.T, pol, cur string) []sfFigs {
	t.Helper()
	var out []sfFigs
	for fi, f := range []string{pol, cur} {
		l, err := httpsfv.UnmarshalList([]string{f})
		if err != nil {
			t.Fatalf("%q is not an RFC 9651 List: %v", f, err)
		}
		if fi == 1 && len(l) != len(out) {
			t.Fatalf("RateLimit %q has %d items, RateLimit-Policy %q %d", cur, len(l), pol, len(out))
		}
		for i, m := range l {
			it, ok := m.(httpsfv.Item)
			s, isString := it.Value.(string)
			if !ok || !isString {
				t.Fatalf("%q: %v is not an Item with a String", f, m)
			}
			name, err := url.PathUnescape(s)
			if err != nil {
				t.Fatalf("%q: name %q does not percent-decode", f, s)
			}
			var n [2]int64
			for j, p := range [2][2]string{{"q", "w"}, {"r", "t"}}[fi] {
				v, _ := it.Params.Get(p)
				if n[j], ok = v.(int64); !ok {
					t.Fatalf("%q: %s=%v is not an Integer", f, p, v)
				}
			}
			if fi == 0 {
				out = append(out, sfFigs{name: name, q: n[0], w: n[1]})
				continue
			}
			if out[i].name != name {
				t.Fatalf("item %d: %q in RateLimit-Policy, %q in RateLimit", i, out[i].name, name)
			}
			out[i].r, out[i].t = n[0], n[1]
			if out[i].r > out[i].q {
				t.Errorf("%q: r=%d above q=%d (%s / %s)", name, out[i].r, out[i].q, pol, cur)
			}
		}
	}
	return out
}

func headerValues(hs []*corev3.HeaderValue) (pol, cur string) {
	for _, h := range hs {
		switch h.Key {
		case "RateLimit-Policy":
			pol = h.Value
		case "RateLimit":
			cur = h.Value
		}
	}
	return pol, cur
}

// fieldsRequest names every rule of fieldsConfig, and a key whose override
// holds non-ASCII text.
func fieldsRequest() []*rlv3.RateLimitDescriptor {
	override := desc("wert=grün")
	override.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 4, Unit: typev3.RateLimitUnit_MINUTE}
	return []*rlv3.RateLimitDescriptor{desc("café"), desc("tab"), desc("bucket"), desc("huge"), override}
}

// wantFields is what a client reads for fieldsRequest's first call.
var wantFields = []sfFigs{
	{"café", 3, 60, 2, 30},
	{"a\tb \"quoted\" 50%", 3, 60, 2, 30},
	{"bucket", 50, 5, 49, 1},
	{"huge", 999_999_999_999_999, 1_125_899_907, 999_999_999_999_999, 1},
	{"wert=grün", 4, 60, 3, 30},
}

func checkFields(t *testing.T, where string, got []sfFigs) {
	t.Helper()
	if len(got) != len(wantFields) {
		t.Fatalf("%s: read %+v\nwant %+v", where, got, wantFields)
	}
	for i := range got {
		if got[i] != wantFields[i] {
			t.Errorf("%s: item %d reads %+v, want %+v", where, i, got[i], wantFields[i])
		}
	}
}

// TestDraft11FieldsParse: the fields serve asks Envoy to add (gRPC), puts
// in /json's body and sends from /v1/take are RFC 9651 Lists an
// independent parser reads back, names and all, with q the capacity that
// r counts against.
func TestDraft11FieldsParse(t *testing.T) {
	cfg := map[string]string{"test.yaml": testConfig, "fields.yaml": fieldsConfig}
	newServer := func() *testServer {
		o := Options{Headers: HeadersDraft11, Config: writeConfig(t, cfg), Limits: limits.Table{Units: 1 << 50, Window: 1 << 62}}
		return start(t, o, &fakeClock{t: t0})
	}

	ts := newServer()
	r := ts.call(t, "fields", fieldsRequest()...)
	pol, cur := headerValues(r.ResponseHeadersToAdd)
	checkFields(t, "gRPC", readDraft11(t, pol, cur))

	ts = newServer()
	body, err := protojson.Marshal(&pb.RateLimitRequest{Domain: "fields", Descriptors: fieldsRequest()})
	if err != nil {
		t.Fatal(err)
	}
	resp, out := httpPost(t, ts.base+"/json", string(body))
	var jr pb.RateLimitResponse
	if err := protojson.Unmarshal([]byte(out), &jr); resp.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("/json: %d %s (%v)", resp.StatusCode, out, err)
	}
	pol, cur = headerValues(jr.ResponseHeadersToAdd)
	checkFields(t, "/json", readDraft11(t, pol, cur))

	ts = newServer()
	resp, out = httpPost(t, ts.base+"/v1/take", `{"domain": "fields", "descriptors": [[{"key": "café"}], [{"key": "tab"}], [{"key": "bucket"}], [{"key": "huge"}]]}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/v1/take: %d %s", resp.StatusCode, out)
	}
	got := readDraft11(t, resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit"))
	if len(got) != 4 {
		t.Fatalf("/v1/take: read %+v", got)
	}
	wantFields := wantFields[:4]
	for i := range got {
		if got[i] != wantFields[i] {
			t.Errorf("/v1/take: item %d reads %+v, want %+v", i, got[i], wantFields[i])
		}
	}

	// By key: q is the limit's capacity (the burst), as r is counted
	// against it.
	resp, out = httpPost(t, ts.base+"/v1/take", `{"key": "k", "limit": "10/1s gcra burst 50"}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/v1/take by key: %d %s", resp.StatusCode, out)
	}
	got = readDraft11(t, resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit"))
	if len(got) != 1 || got[0] != (sfFigs{"key", 50, 5, 49, 1}) {
		t.Errorf("/v1/take by key: read %+v, want key q=50 w=5 r=49 t=1", got)
	}
	resp, _ = httpPost(t, ts.base+"/v1/take", `{"key": "big", "limit": "1/1us token-bucket burst 1125899906842623"}`)
	got = readDraft11(t, resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit"))
	if len(got) != 1 || got[0].q != 999_999_999_999_999 {
		t.Errorf("/v1/take by key, a burst of 16 digits: read %+v", got)
	}
}
