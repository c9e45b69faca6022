package serve

import (
	"fmt"
	"math"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cmd/sluice/internal/rlsconfig"
)

// planConfig is the configuration the plan and respond tables run on:
// testConfig's rules and quotaConfig's, and a quota_mode rule in shadow
// mode.
func planConfig(t *testing.T) *rlsconfig.Config {
	t.Helper()
	cfg, err := rlsconfig.Parse(map[string][]byte{"test.yaml": []byte(testConfig), "quota.yaml": []byte(quotaConfig + `  - key: watch
    quota_mode: true
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 3}
`)})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// kindNames name the kinds in the tables.
var kindNames = [...]string{kindNone: "none", kindUnlimited: "unlimited", kindEnforced: "enforced", kindShadow: "shadow", kindQuota: "quota", kindRefund: "refund"}

// planText renders a plan: each descriptor's kind and part ("enforced0",
// "enforced!" for requests_per_unit 0), then each kind's parts as
// key*cost, then its flags.
func planText(p *plan) string {
	var b strings.Builder
	for i, ds := range p.desc {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(kindNames[ds.kind])
		switch {
		case ds.kind == kindNone || ds.kind == kindUnlimited:
		case ds.zero:
			b.WriteByte('!')
		default:
			fmt.Fprint(&b, ds.part)
		}
	}
	for _, k := range []struct {
		name  string
		parts []sluice.Part
	}{{"enforced", p.enforced}, {"shadow", p.shadow}, {"quota", p.quota}, {"refunds", p.refunds}} {
		for i, pt := range k.parts {
			if i == 0 {
				fmt.Fprintf(&b, " | %s:", k.name)
			}
			fmt.Fprintf(&b, " %s*%d", pt.Key, pt.Cost)
		}
	}
	if p.blocked {
		b.WriteString(" | blocked")
	}
	if p.quotaDecides {
		b.WriteString(" | quota decides")
	}
	return b.String()
}

// planRequest builds a request of domain with descriptors.
func planRequest(domain string, ds ...*rlv3.RateLimitDescriptor) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: domain, Descriptors: ds}
}

// withLimit sets a descriptor's limit override.
func withLimit(d *rlv3.RateLimitDescriptor, rpu uint32, unit typev3.RateLimitUnit) *rlv3.RateLimitDescriptor {
	d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
	return d
}

// plan, a table: requests and the service's modes on one configuration,
// and what the stores are asked, with no store and no Server.
func TestPlan(t *testing.T) {
	cfg := planConfig(t)
	for _, c := range []struct {
		name string
		o    Options
		req  *pb.RateLimitRequest
		want string // planText, or the error
	}{
		{"one enforced", Options{}, planRequest("test", desc("key1=value1")),
			"enforced0 | enforced: test/key1=value1*1"},
		{"kinds", Options{}, planRequest("test", desc("nope"), desc("free=x"), desc("shadow=s"), desc("key1=v"), desc("blocked=b")),
			"none unlimited shadow0 enforced0 enforced! | enforced: test/key1=v*1 | shadow: test/shadow=s*1 | blocked"},
		{"unknown domain", Options{}, planRequest("nowhere", desc("key1=value1")), "none"},
		{"one counter twice", Options{}, planRequest("test", withHits(desc("key1=value1"), 2), desc("key1=v"), withHits(desc("key1=value1"), 3)),
			"enforced0 enforced1 enforced0 | enforced: test/key1=value1*5 test/key1=v*1"},
		{"request's hits_addend", Options{}, &pb.RateLimitRequest{Domain: "test", HitsAddend: 4, Descriptors: []*rlv3.RateLimitDescriptor{desc("key1=a"), withHits(desc("key1=b"), 0)}},
			"enforced0 enforced1 | enforced: test/key1=a*4 test/key1=b*0"},
		{"a cost is at most half the largest", Options{}, planRequest("test", withHits(desc("key1=a"), math.MaxUint64)),
			fmt.Sprintf("enforced0 | enforced: test/key1=a*%d", int64(math.MaxInt64>>1))},
		{"costs saturate", Options{}, planRequest("test", withHits(desc("key1=a"), math.MaxUint64), withHits(desc("key1=a"), math.MaxUint64), withHits(desc("key1=a"), math.MaxUint64)),
			fmt.Sprintf("enforced0 enforced0 enforced0 | enforced: test/key1=a*%d", int64(math.MaxInt64))},
		{"domain slot", Options{DomainSlot: true}, planRequest("test", desc("key1=value1"), desc("shadow=s")),
			"enforced0 shadow0 | enforced: {test}/key1=value1*1 | shadow: {test}/shadow=s*1"},
		{"quota", Options{}, planRequest("quota", desc("service=service_1"), desc("service=service_2"), desc("user=u")),
			"quota0 quota1 enforced0 | enforced: quota/user=u*1 | quota: quota/service=service_1*1 quota/service=service_2*1 | quota decides"},
		{"quota, requests_per_unit 0", Options{}, planRequest("quota", desc("service=empty")), "quota! | quota decides"},
		{"a shadow quota descriptor always passes", Options{}, planRequest("quota", desc("service=service_1"), desc("watch=w")),
			"quota0 shadow0 | shadow: quota/watch=w*1 | quota: quota/service=service_1*1"},
		{"global quota", Options{GlobalQuota: true}, planRequest("quota", desc("user=u"), desc("service=service_1")),
			"quota0 quota1 | quota: quota/user=u*1 quota/service=service_1*1 | quota decides"},
		{"global quota, a descriptor without a rule", Options{GlobalQuota: true}, planRequest("quota", desc("user=u"), desc("nope")),
			"quota0 none | quota: quota/user=u*1"},
		{"give-backs", Options{}, planRequest("quota", negative(desc("tokens=t"), 2), negative(desc("cells=c"), 1), negative(desc("user=u"), 0)),
			"refund0 refund1 enforced0 | enforced: quota/user=u*0 | refunds: quota/tokens=t*2 quota/cells=c*1"},
		{"a give-back to a quota descriptor always passes", Options{}, planRequest("quota", desc("service=service_1"), negative(desc("service=bucket"), 1)),
			"quota0 refund0 | quota: quota/service=service_1*1 | refunds: quota/service=bucket*1"},
		{"no give-back to a sliding window", Options{}, planRequest("quota", negative(desc("sliding=s"), 1)),
			`descriptor 0: is_negative_hits: rule "per_sliding" counts with sliding-window, which cannot give units back (token-bucket, gcra, fixed-window and aligned-window can)`},
		{"limit override", Options{}, planRequest("test", withLimit(desc("key1=value1"), 7, typev3.RateLimitUnit_HOUR), withLimit(desc("new=n"), 0, typev3.RateLimitUnit_SECOND)),
			"enforced0 enforced! | enforced: test/key1=value1*1 | blocked"},
		{"no override on an unknown domain", Options{}, planRequest("nowhere", withLimit(desc("key1=value1"), 7, typev3.RateLimitUnit_HOUR)), "none"},
		{"a bad override", Options{}, planRequest("test", withLimit(desc("key1=value1"), 7, typev3.RateLimitUnit_UNKNOWN)), "descriptor 0: limit override: "},
	} {
		var p plan
		got := ""
		c.o.Limits.FillDefaults()
		if err := p.make(c.req, cfg, &c.o); err != nil {
			if _, ok := err.(*requestError); !ok {
				t.Errorf("%s: error %T %v, want a requestError", c.name, err, err)
			}
			got = err.Error()
		} else {
			got = planText(&p)
		}
		if got != c.want && !(strings.HasSuffix(c.want, ": ") && strings.HasPrefix(got, c.want)) {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}

// One plan reused, as the pool reuses it, plans each request as a new one
// would, and clear leaves it holding nothing of the last.
func TestPlanReused(t *testing.T) {
	cfg := planConfig(t)
	reqs := []*pb.RateLimitRequest{
		planRequest("quota", desc("service=service_1"), negative(desc("tokens=t"), 2), desc("user=u"), desc("watch=w")),
		planRequest("test", desc("key1=value1")),
		planRequest("test", desc("blocked=b"), desc("shadow=s"), desc("nested=a", "sub=x")),
		planRequest("nowhere", desc("a=b")),
	}
	var reused plan
	for round := range 2 {
		for i, req := range reqs {
			var fresh plan
			if err := fresh.make(req, cfg, &Options{}); err != nil {
				t.Fatal(err)
			}
			if err := reused.make(req, cfg, &Options{}); err != nil {
				t.Fatal(err)
			}
			if a, b := planText(&reused), planText(&fresh); a != b {
				t.Errorf("round %d request %d: reused %s, fresh %s", round, i, a, b)
			}
			reused.clear()
			if reused.req != nil || (len(reused.desc) > 0 && reused.desc[0].rule != nil) || (len(reused.flat) > 0 && reused.flat[0].Key != "") {
				t.Errorf("round %d request %d: a cleared plan still holds the request or a rule", round, i)
			}
		}
	}
}

// quotaRefuses: over the limit when every quota descriptor is over
// (requests_per_unit 0 always is), never when one always passes.
func TestQuotaRefuses(t *testing.T) {
	cfg := planConfig(t)
	for _, c := range []struct {
		req  *pb.RateLimitRequest
		over []bool // per quota part
		want bool
	}{
		{planRequest("quota", desc("service=service_1"), desc("service=service_2")), []bool{true, true}, true},
		{planRequest("quota", desc("service=service_1"), desc("service=service_2")), []bool{true, false}, false},
		{planRequest("quota", desc("service=service_1"), desc("service=empty")), []bool{true}, true},
		{planRequest("quota", desc("service=service_1"), desc("service=empty")), []bool{false}, false},
		{planRequest("quota", desc("service=service_1"), desc("watch=w")), []bool{true}, false},
		{planRequest("quota", desc("user=u")), nil, false},
	} {
		var p plan
		if err := p.make(c.req, cfg, &Options{}); err != nil {
			t.Fatal(err)
		}
		if got := p.quotaRefuses(c.over); got != c.want {
			t.Errorf("%s with quota parts over %v: %v, want %v", planText(&p), c.over, got, c.want)
		}
	}
}
