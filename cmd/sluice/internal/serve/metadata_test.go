package serve

import (
	"context"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

const metaConfig = `domain: meta
descriptors:
  - key: tenant
    metadata: {team: payments, limits: {tenant: 2}}
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: user
    metadata: {team: identity, limits: {user: 1}, tier: gold}
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: free
    metadata: {unlimited: yes}
    rate_limit: {unlimited: true}
  - key: detailed
    detailed_metric: true
    metadata: {kept: true}
    rate_limit: {unit: minute, requests_per_unit: 5}
`

// mustStruct is v (JSON) as a google.protobuf.Struct.
func mustStruct(t *testing.T, v string) *structpb.Struct {
	t.Helper()
	var s structpb.Struct
	if err := protojson.Unmarshal([]byte(v), &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

// With --response-dynamic-metadata a response carries envoy's dynamic
// metadata: the domain, each descriptor (entries, limit override,
// hits_addend), the request's hits_addend, and the rules' metadata of the
// descriptors that passed, merged in order (a key already there stays; maps
// merge). Unlimited descriptors and refused ones add none.
func TestDynamicMetadata(t *testing.T) {
	clock := &fakeClock{t: t0}
	ts := start(t, Options{Config: writeConfig(t, map[string]string{"meta.yaml": metaConfig}), DynamicMetadata: true}, clock)
	check := func(what string, r *pb.RateLimitResponse, want string) {
		t.Helper()
		if w := mustStruct(t, want); !proto.Equal(r.DynamicMetadata, w) {
			t.Errorf("%s: dynamic metadata\n got %v\nwant %v", what, r.DynamicMetadata, w)
		}
	}
	r := ts.call(t, "meta", desc("tenant=a"), desc("user=b"), desc("other=x"), desc("free=x"))
	check("both pass", r, `{"domain": "meta",
		"descriptors": [{"entries": ["tenant=a"]}, {"entries": ["user=b"]}, {"entries": ["other=x"]}, {"entries": ["free=x"]}],
		"metadata": {"team": "payments", "limits": {"tenant": 2, "user": 1}, "tier": "gold"}}`)
	r = ts.call(t, "meta", desc("tenant=a"), desc("user=b"))
	if codesOf(r) != "OVER_LIMIT: OK OVER_LIMIT" {
		t.Fatalf("second call: %s", codesOf(r))
	}
	// The merge above left tenant's metadata as configured.
	check("user refused", r, `{"domain": "meta",
		"descriptors": [{"entries": ["tenant=a"]}, {"entries": ["user=b"]}],
		"metadata": {"team": "payments", "limits": {"tenant": 2}}}`)
	override := withHits(desc("user=c"), 0)
	override.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: 1}
	r, err := ts.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "meta", HitsAddend: 3,
		Descriptors: []*rlv3.RateLimitDescriptor{withHits(desc("tenant=b"), 1), override}})
	if err != nil {
		t.Fatal(err)
	}
	check("hits_addend and a limit override", r, `{"domain": "meta", "hitsAddend": 3,
		"descriptors": [{"entries": ["tenant=b"], "hitsAddend": 1}, {"entries": ["user=c"], "hitsAddend": 0, "limit": `+
		mustJSONString(t, override.Limit.String())+`}],
		"metadata": {"team": "payments", "limits": {"tenant": 2}}}`)

	// A detailed_metric rule keeps its metadata (envoy's rebuild of such a
	// rule drops it).
	check("detailed_metric", ts.call(t, "meta", desc("detailed=x")), `{"domain": "meta",
		"descriptors": [{"entries": ["detailed=x"]}], "metadata": {"kept": true}}`)

	// Over HTTP, in envoy's /json.
	resp, body := httpPost(t, ts.base+"/json", `{"domain": "meta", "descriptors": [{"entries": [{"key": "tenant", "value": "z"}]}]}`)
	if resp.StatusCode != 200 || !strings.Contains(body, `"dynamicMetadata"`) || !strings.Contains(body, `"team":"payments"`) && !strings.Contains(body, `"team": "payments"`) {
		t.Errorf("/json: %d %s", resp.StatusCode, body)
	}
	if _, body := httpGet(t, ts.base+"/debug/config"); !strings.Contains(grep(body, "meta: user "), ` metadata={"limits":{"user":1},"team":"identity","tier":"gold"}`) {
		t.Errorf("/debug/config does not show user's metadata:\n%s", body)
	}

	// Without the option: no dynamic metadata.
	plain := start(t, Options{Config: writeConfig(t, map[string]string{"meta.yaml": metaConfig})}, &fakeClock{t: t0})
	if r := plain.call(t, "meta", desc("tenant=a")); r.DynamicMetadata != nil {
		t.Errorf("dynamic metadata without the option: %v", r.DynamicMetadata)
	}
}

// mustJSONString is s as a JSON string literal.
func mustJSONString(t *testing.T, s string) string {
	t.Helper()
	b, err := protojson.Marshal(structpb.NewStringValue(s))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
