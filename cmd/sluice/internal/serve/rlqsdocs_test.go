package serve

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	rlqsfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3" // the example's router
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// docs/rlqs.md's Envoy configuration is what Envoy would load: each
// filter reads into go-control-plane's types and passes their
// validation, and the RLQS filter points at sluice, builds the bucket id
// the example rule keys on, and denies without an assignment.
func TestRLQSDocsEnvoyConfig(t *testing.T) {
	b, err := os.ReadFile("../../../../docs/rlqs.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, _ := strings.Cut(string(b), "\n## Envoy's configuration\n")
	_, block, ok := strings.Cut(sec, "```yaml\n")
	block, _, _ = strings.Cut(block, "```")
	if !ok || block == "" {
		t.Fatal(`docs/rlqs.md: no yaml block under "Envoy's configuration"`)
	}
	var doc struct {
		Filters []any `yaml:"http_filters"`
	}
	if err := yaml.Unmarshal([]byte(block), &doc); err != nil {
		t.Fatal(err)
	}
	var quota *rlqsfilter.RateLimitQuotaFilterConfig
	for i, f := range doc.Filters {
		j, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		var hf hcm.HttpFilter
		if err := protojson.Unmarshal(j, &hf); err != nil {
			t.Fatalf("filter %d: %v", i, err)
		}
		if err := hf.ValidateAll(); err != nil {
			t.Errorf("filter %d: %v", i, err)
		}
		m, err := hf.GetTypedConfig().UnmarshalNew()
		if err != nil {
			t.Fatalf("filter %d: %v", i, err)
		}
		if q, ok := m.(*rlqsfilter.RateLimitQuotaFilterConfig); ok {
			quota = q
		}
	}
	if quota == nil {
		t.Fatal("no rate_limit_quota filter")
	}
	if err := quota.ValidateAll(); err != nil {
		t.Error(err)
	}
	if quota.GetDomain() != "edge" || quota.GetRlqsServer().GetEnvoyGrpc().GetClusterName() != "sluice" {
		t.Errorf("domain %q, cluster %q", quota.GetDomain(), quota.GetRlqsServer().GetEnvoyGrpc().GetClusterName())
	}
	if md := quota.GetRlqsServer().GetInitialMetadata(); len(md) != 2 || md[0].GetKey() != WeightHeader || md[1].GetKey() != ClientHeader {
		t.Errorf("initial_metadata %v, want %s and %s", md, WeightHeader, ClientHeader)
	}
	action, err := quota.GetBucketMatchers().GetOnNoMatch().GetAction().GetTypedConfig().UnmarshalNew()
	if err != nil {
		t.Fatal(err)
	}
	settings, ok := action.(*rlqsfilter.RateLimitQuotaBucketSettings)
	if !ok {
		t.Fatalf("the matcher's action is a %T", action)
	}
	if err := settings.ValidateAll(); err != nil {
		t.Error(err)
	}
	ids := settings.GetBucketIdBuilder().GetBucketIdBuilder()
	if ids["name"].GetStringValue() != "api" || ids["tenant"].GetCustomValue() == nil {
		t.Errorf("bucket_id_builder %v, want name: api and a tenant from a header", ids)
	}
	input, err := ids["tenant"].GetCustomValue().GetTypedConfig().UnmarshalNew()
	if h, ok := input.(*matcherv3.HttpRequestHeaderMatchInput); err != nil || !ok || h.GetHeaderName() != "x-tenant" {
		t.Errorf("the tenant's input: %v, %v", input, err)
	}
	if settings.GetNoAssignmentBehavior().GetFallbackRateLimit().GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL {
		t.Error("no_assignment_behavior is not DENY_ALL")
	}
	fb := settings.GetExpiredAssignmentBehavior().GetFallbackRateLimit().GetTokenBucket()
	if fb.GetMaxTokens() != 5 || fb.GetTokensPerFill().GetValue() != 60 || fb.GetFillInterval().AsDuration().Seconds() != 60 {
		t.Errorf("the expired fallback %v, want 60 a minute, 5 at once", fb)
	}
}
