package serve

import (
	"path/filepath"
	"strconv"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice/cmd/sluice/internal/envoytest"
)

// llmExample is the worked example: its rules and its Envoy.
var llmExample = filepath.Join("..", "..", "..", "..", "examples", "serve")

// tokensUsed is the format of the stream-done rate limit's hits: the
// tokens Envoy AI Gateway (here the example's Lua filter) puts in dynamic
// metadata.
const tokensUsed = "%DYNAMIC_METADATA(io.envoy.ai_gateway:llm_total_token)%"

// envoyLLM is what examples/serve/envoy/llm.yaml has Envoy send: its rate
// limit filter's domain, and the route's rate limits, those of the request
// path and those sent when the stream is done.
type envoyLLM struct {
	domain            string
	request, whenDone []*routev3.RateLimit
}

// readEnvoyLLM reads the example's Envoy, which must be valid against
// Envoy's protos.
func readEnvoyLLM(t *testing.T) envoyLLM {
	t.Helper()
	boot, err := envoytest.Bootstrap(filepath.Join(llmExample, "envoy", "llm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var e envoyLLM
	var hcm hcmv3.HttpConnectionManager
	if err := boot.StaticResources.Listeners[0].FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	for _, f := range hcm.HttpFilters {
		var rl ratelimitv3.RateLimit
		if f.GetTypedConfig().UnmarshalTo(&rl) == nil {
			e.domain = rl.Domain
		}
	}
	route := hcm.GetRouteConfig().VirtualHosts[0].Routes[0]
	var per ratelimitv3.RateLimitPerRoute
	if err := route.TypedPerFilterConfig["envoy.filters.http.ratelimit"].UnmarshalTo(&per); err != nil {
		t.Fatalf("the route's rate limits: %v", err)
	}
	for _, rl := range per.RateLimits {
		if rl.ApplyOnStreamDone {
			e.whenDone = append(e.whenDone, rl)
		} else {
			e.request = append(e.request, rl)
		}
	}
	if e.domain == "" || len(e.request) == 0 || len(e.whenDone) == 0 {
		t.Fatalf("the example's Envoy: domain %q, %d rate limits on the request path, %d when the stream is done", e.domain, len(e.request), len(e.whenDone))
	}
	return e
}

// call is the RateLimitRequest Envoy sends for rls (one call's rate
// limits) on a request with header x-api-key: apiKey, a call that used
// tokens: one descriptor per rate limit, its entries from its actions
// (the example's generic_key and request_headers), its hits_addend its
// number or, for the tokens used, tokens.
func (e envoyLLM) call(t *testing.T, rls []*routev3.RateLimit, apiKey string, tokens uint64) *pb.RateLimitRequest {
	t.Helper()
	req := &pb.RateLimitRequest{Domain: e.domain}
	for _, rl := range rls {
		d := &rlv3.RateLimitDescriptor{}
		for _, a := range rl.Actions {
			switch {
			case a.GetGenericKey() != nil:
				key := a.GetGenericKey().DescriptorKey
				if key == "" {
					key = "generic_key"
				}
				d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: key, Value: a.GetGenericKey().DescriptorValue})
			case a.GetRequestHeaders() != nil && a.GetRequestHeaders().HeaderName == "x-api-key":
				d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: a.GetRequestHeaders().DescriptorKey, Value: apiKey})
			default:
				t.Fatalf("an action this test does not play: %v", a)
			}
		}
		switch h := rl.HitsAddend; {
		case h == nil:
		case h.Number != nil:
			d.HitsAddend = wrapperspb.UInt64(h.Number.Value)
		case h.Format == tokensUsed:
			d.HitsAddend = wrapperspb.UInt64(tokens)
		default:
			t.Fatalf("hits_addend %v: want a number or %s", h, tokensUsed)
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

// examples/serve/llm.yaml in a real sluice serve, and the two calls its
// Envoy (examples/serve/envoy/llm.yaml) makes for each LLM call, over
// gRPC: the check before the call, and the tokens it used when its stream
// is done. Three calls of 4,000 tokens leave the API key owing 2,000: the
// next check is over the limit, with the wait until they are paid back
// (12s at 10,000 a minute), and passes then; the refused call spent none
// of the key's requests.
func TestLLMExample(t *testing.T) {
	e := readEnvoyLLM(t)
	clock := &fakeClock{t: t0}
	ts := start(t, Options{Config: filepath.Join(llmExample, "llm.yaml")}, clock)
	send := func(req *pb.RateLimitRequest) *pb.RateLimitResponse {
		t.Helper()
		resp, err := ts.client.ShouldRateLimit(t.Context(), req)
		if err != nil {
			t.Fatalf("ShouldRateLimit(%v): %v", req, err)
		}
		return resp
	}
	for i := range 3 {
		if r := send(e.call(t, e.request, "alice", 0)); codesOf(r) != "OK: OK OK" || r.Statuses[1].LimitRemaining != uint32(59-i) {
			t.Fatalf("call %d's check: %s, requests left %d", i+1, codesOf(r), r.Statuses[1].LimitRemaining)
		}
		r := send(e.call(t, e.whenDone, "alice", 4000))
		want := "OK: OK"
		if i == 2 {
			want = "OVER_LIMIT: OVER_LIMIT" // 12,000 past 10,000: charged all the same
		}
		if codesOf(r) != want {
			t.Fatalf("call %d's tokens: %s, want %s", i+1, codesOf(r), want)
		}
	}
	check := func(when string, want string, left uint32, reset time.Duration) {
		t.Helper()
		r := send(e.call(t, e.request, "alice", 0))
		if codesOf(r) != want || r.Statuses[1].LimitRemaining != left {
			t.Errorf("%s: check %s, requests left %d; want %s, %d", when, codesOf(r), r.Statuses[1].LimitRemaining, want, left)
		}
		if d := r.Statuses[0].DurationUntilReset.AsDuration(); reset >= 0 && d != reset {
			t.Errorf("%s: the tokens' duration_until_reset %v, want %v", when, d, reset)
		}
	}
	check("owing 2,000 tokens", "OVER_LIMIT: OVER_LIMIT OK", 57, 12*time.Second)
	clock.Set(t0.Add(12*time.Second - time.Microsecond))
	check("a µs before they are paid", "OVER_LIMIT: OVER_LIMIT OK", 57, time.Microsecond)
	clock.Set(t0.Add(12 * time.Second))
	check("paid", "OK: OK OK", 56, -1)
	// Another key is not held back.
	if r := send(e.call(t, e.request, "bob", 0)); codesOf(r) != "OK: OK OK" {
		t.Errorf("bob: %s", codesOf(r))
	}
	if l := ts.metric(t, `sluice_serve_units_charged_total{domain="llm",rule="tokens"}`); l != `sluice_serve_units_charged_total{domain="llm",rule="tokens"} `+strconv.Itoa(3*4000) {
		t.Errorf("%q, want 12000", l)
	}
}
