package serve

import (
	"fmt"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-go/sluice"
)

// storeAnswers are a table's store answers, each kind's per part, as
// decide leaves them in a decision.
type storeAnswers struct {
	comp                        sluice.Result
	enf, sha, quota, refunded   []sluice.Result
	enfOver, shaOver, quotaOver []bool
	quotaRefused                bool
}

func (a storeAnswers) decision(p *plan) *decision {
	d := &decision{}
	d.size(p)
	copy(d.enf, a.enf)
	copy(d.sha, a.sha)
	copy(d.enfOver, a.enfOver)
	copy(d.shaOver, a.shaOver)
	d.quota.res, d.quota.over = grow(d.quota.res, len(p.quota)), grow(d.quota.over, len(p.quota))
	copy(d.quota.res, a.quota)
	copy(d.quota.over, a.quotaOver)
	d.refunded = grow(d.refunded, len(p.refunds))
	copy(d.refunded, a.refunded)
	d.comp, d.quotaRefused = a.comp, a.quotaRefused
	return d
}

// responseText renders what respond made: the overall code and each
// status's code/remaining/reset, each descriptor's outcome ("-" when it is
// not counted), the result, the flags and the headers.
func responseText(p *plan, resp *pb.RateLimitResponse, a answer) string {
	var b strings.Builder
	b.WriteString(resp.OverallCode.String() + ":")
	for _, st := range resp.Statuses {
		reset := "-"
		if st.DurationUntilReset != nil {
			reset = st.DurationUntilReset.AsDuration().String()
		}
		fmt.Fprintf(&b, " %s/%d/%s", st.Code, st.LimitRemaining, reset)
	}
	b.WriteString(" |")
	for _, ds := range p.desc {
		if ds.kind == kindNone || ds.kind == kindRefund {
			b.WriteString(" -")
		} else {
			b.WriteString(" " + ds.out.String())
		}
	}
	fmt.Fprintf(&b, " | allowed=%v remaining=%d", a.result.Allowed, a.result.Remaining)
	if a.degraded {
		b.WriteString(" degraded")
	}
	if a.shadowed {
		b.WriteString(" shadowed")
	}
	for _, h := range resp.ResponseHeadersToAdd {
		fmt.Fprintf(&b, " | %s: %s", h.Key, h.Value)
	}
	return b.String()
}

// respond, a table: plans and store answers, and the response, with no
// store and no Server. The testConfig rules count in epoch-aligned windows,
// so their resets count from now, t0 (12:00:30).
func TestRespond(t *testing.T) {
	cfg := planConfig(t)
	names, _ := EnvoyHeaderNames{}.withDefaults()
	admitted := func(rem int64) sluice.Result { return sluice.Result{Allowed: true, Remaining: rem} }
	for _, c := range []struct {
		name string
		req  *pb.RateLimitRequest
		o    respondOptions
		a    storeAnswers
		want string
	}{
		{"admitted", planRequest("test", desc("key1=value1")), respondOptions{},
			storeAnswers{comp: admitted(2), enf: []sluice.Result{admitted(2)}},
			"OK: OK/2/30s | allowed | allowed=true remaining=2"},
		{"refused", planRequest("test", desc("key1=value1"), desc("key1=v")), respondOptions{},
			storeAnswers{comp: sluice.Result{RetryAfter: time.Second}, enf: []sluice.Result{{Remaining: 0}, {Remaining: 4}}, enfOver: []bool{true, false}},
			"OVER_LIMIT: OVER_LIMIT/0/30s OK/4/30s | denied allowed | allowed=false remaining=0"},
		{"a shadow part over, the call admitted", planRequest("test", desc("key1=value1"), desc("shadow=s")), respondOptions{},
			storeAnswers{comp: admitted(2), enf: []sluice.Result{admitted(2)}, sha: []sluice.Result{{}}, shaOver: []bool{true}},
			"OK: OK/2/30s OK/0/30s | allowed shadow_denied | allowed=true remaining=2"},
		{"requests_per_unit 0 refuses without the store", planRequest("test", desc("blocked=b"), desc("key1=v")), respondOptions{},
			storeAnswers{enf: []sluice.Result{{Remaining: 5}}},
			"OVER_LIMIT: OVER_LIMIT/0/1s OK/5/30s | denied allowed | allowed=false remaining=0"},
		{"requests_per_unit 0 alone", planRequest("test", desc("blocked=b")), respondOptions{},
			storeAnswers{comp: sluice.Result{Allowed: true}},
			"OVER_LIMIT: OVER_LIMIT/0/1s | denied | allowed=false remaining=9223372036854775807"},
		{"global shadow", planRequest("test", desc("key1=value1")), respondOptions{globalShadow: true},
			storeAnswers{enf: []sluice.Result{{}}, enfOver: []bool{true}},
			"OK: OVER_LIMIT/0/30s | denied | allowed=false remaining=0 shadowed"},
		{"no limited descriptor", planRequest("test", desc("free=x"), desc("nope")), respondOptions{},
			storeAnswers{comp: sluice.Result{Allowed: true}},
			"OK: OK/4294967295/- OK/0/- | allowed - | allowed=true remaining=9223372036854775807"},
		{"every quota descriptor over", planRequest("quota", desc("service=service_1"), desc("service=service_2")), respondOptions{},
			storeAnswers{comp: sluice.Result{Allowed: true}, quota: []sluice.Result{{}, {}}, quotaOver: []bool{true, true}, quotaRefused: true},
			"OVER_LIMIT: OVER_LIMIT/0/30s OVER_LIMIT/0/30s | denied denied | allowed=false remaining=9223372036854775807"},
		{"one quota descriptor over", planRequest("quota", desc("service=service_1"), desc("service=service_2")), respondOptions{},
			storeAnswers{comp: sluice.Result{Allowed: true}, quota: []sluice.Result{{}, admitted(1)}, quotaOver: []bool{true, false}},
			"OK: OVER_LIMIT/0/30s OK/1/30s | denied allowed | allowed=true remaining=9223372036854775807"},
		{"degraded", planRequest("test", desc("key1=value1")), respondOptions{},
			storeAnswers{comp: sluice.Result{Allowed: true, Remaining: 3, Degraded: true}, enf: []sluice.Result{{Allowed: true, Remaining: 3, Degraded: true}}},
			"OK: OK/3/30s | degraded | allowed=true remaining=3 degraded"},
		{"a give-back is not counted", planRequest("quota", negative(desc("tokens=t"), 2), desc("user=u")), respondOptions{},
			storeAnswers{comp: admitted(0), refunded: []sluice.Result{{Remaining: 9, ResetAfter: 6 * time.Second}}, enf: []sluice.Result{admitted(0)}},
			"OK: OK/9/6s OK/0/30s | - allowed | allowed=true remaining=0"},
		{"envoy's headers: the refusing descriptor", planRequest("test", desc("key1=v"), desc("key1=value1")), respondOptions{headers: HeadersEnvoy, names: &names},
			storeAnswers{enf: []sluice.Result{{Remaining: 1}, {Remaining: 2}}, enfOver: []bool{false, true}},
			"OVER_LIMIT: OK/1/30s OVER_LIMIT/2/30s | allowed denied | allowed=false remaining=0 | RateLimit-Limit: 3 | RateLimit-Remaining: 2 | RateLimit-Reset: 30"},
		{"envoy's headers: the nearest its limit", planRequest("test", desc("key1=v"), desc("key1=value1"), desc("shadow=s")), respondOptions{headers: HeadersEnvoy, names: &names},
			storeAnswers{comp: admitted(1), enf: []sluice.Result{admitted(4), admitted(1)}, sha: []sluice.Result{{}}},
			"OK: OK/4/30s OK/1/30s OK/0/30s | allowed allowed allowed | allowed=true remaining=1 | RateLimit-Limit: 3 | RateLimit-Remaining: 1 | RateLimit-Reset: 30"},
		{"draft 11 headers", planRequest("test", desc("key1=value1"), desc("nested=a", "sub=x")), respondOptions{headers: HeadersDraft11},
			storeAnswers{comp: admitted(1), enf: []sluice.Result{admitted(2), admitted(1)}},
			`OK: OK/2/30s OK/1/59m30s | allowed allowed | allowed=true remaining=1 | RateLimit-Policy: "key1=value1";q=3;w=60, "sub_limit";q=2;w=3600 | RateLimit: "key1=value1";r=2;t=30, "sub_limit";r=1;t=3570`},
	} {
		var p plan
		if err := p.make(c.req, cfg, &Options{}); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		c.o.now = t0.UnixMicro()
		resp := &pb.RateLimitResponse{}
		a := respond(&p, c.a.decision(&p), &c.o, resp)
		if got := responseText(&p, resp, a); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}
