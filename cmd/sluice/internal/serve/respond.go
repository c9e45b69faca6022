package serve

import (
	"math"
	"strings"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cmd/sluice/internal/rlsconfig"
	"github.com/sluice-go/sluice/observe"
)

// respondOptions are what a response is written with beside the plan and
// the stores' answers.
type respondOptions struct {
	headers      Headers
	names        *EnvoyHeaderNames // HeadersEnvoy's
	globalShadow bool              // Options.GlobalShadow
	// dynamicMetadata: responses carry dynamic metadata
	// (Options.DynamicMetadata), with the rules' metadata.
	dynamicMetadata bool
	metadata        map[*rlsconfig.Rule]*structpb.Struct
	// now is the time, µs since the Unix epoch, an epoch-aligned window's
	// reset counts from.
	now int64
}

// answer is what respond makes of a call beside its response.
type answer struct {
	// result is the call's composite result, as /v1/take answers it.
	result sluice.Result
	// degraded: the store's failure policy decided the call
	// (sluice_serve_degraded_total).
	degraded bool
	// shadowed: the call was over the limit and answered OK, for
	// Options.GlobalShadow (sluice_serve_global_shadow_total).
	shadowed bool
}

// respond writes the response to a call planned as p and decided as d: the
// overall code, a status per descriptor, the headers and the dynamic
// metadata asked for. It sets each descriptor's result, over and outcome
// (descState), which the headers and the service's counters read.
func respond(p *plan, d *decision, o *respondOptions, resp *pb.RateLimitResponse) answer {
	code := pb.RateLimitResponse_OK
	if (!d.comp.Allowed && len(p.enforced) > 0) || d.quotaRefused || d.chgRefused || p.blocked {
		code = pb.RateLimitResponse_OVER_LIMIT
	}
	boxes := newStatuses(resp, len(p.desc))
	for i := range p.desc {
		descStatus(&p.desc[i], d, &boxes[i], o.now)
	}
	a := answer{result: d.comp, degraded: d.comp.Degraded || d.chgComp.Degraded}
	if len(p.enforced) == 0 {
		a.result = sluice.Result{Allowed: true, Remaining: math.MaxInt64}
	}
	if len(p.charges) > 0 {
		c := &d.chgComp
		a.result.Remaining = min(a.result.Remaining, c.Remaining)
		a.result.ResetAfter = max(a.result.ResetAfter, c.ResetAfter)
		a.result.RetryAfter = max(a.result.RetryAfter, c.RetryAfter)
		a.result.Degraded = a.result.Degraded || c.Degraded
	}
	if code == pb.RateLimitResponse_OVER_LIMIT {
		a.result.Allowed = false // a requests_per_unit of 0 refuses without the store
		if o.globalShadow {
			code = pb.RateLimitResponse_OK
			a.shadowed = true
		}
	}
	if p.chargeAll {
		// /v1/charge answers whether every unit was charged, as
		// sluice.Limiter.Charge does; a charge is never refused.
		a.result.Allowed = d.chgComp.Allowed && !p.blocked
		a.result.RetryAfter = 0
	}
	resp.OverallCode = code
	if o.headers != HeadersNone {
		resp.ResponseHeadersToAdd = headers(o.headers, o.names, p.desc, resp.Statuses)
	}
	if o.dynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(o.metadata, p.req, p.desc, resp.Statuses)
	}
	return a
}

// statusBox holds one descriptor status and what it points to, so that a
// status is one allocation.
type statusBox struct {
	st  pb.RateLimitResponse_DescriptorStatus
	lim pb.RateLimitResponse_RateLimit
	dur durationpb.Duration
}

// oneStatus is a response's statuses when the call has one descriptor: the
// slice and its status in one allocation.
type oneStatus struct {
	ptr [1]*pb.RateLimitResponse_DescriptorStatus
	box [1]statusBox
}

// newStatuses gives resp n statuses and returns their boxes.
func newStatuses(resp *pb.RateLimitResponse, n int) []statusBox {
	var boxes []statusBox
	if n == 1 {
		one := new(oneStatus)
		boxes, resp.Statuses = one.box[:], one.ptr[:]
	} else {
		boxes = make([]statusBox, n)
		resp.Statuses = make([]*pb.RateLimitResponse_DescriptorStatus, n)
	}
	for i := range boxes {
		resp.Statuses[i] = &boxes[i].st
	}
	return boxes
}

// descStatus writes descriptor ds's status into b from the answers in d,
// and sets its result, over and outcome. now is respondOptions.now.
func descStatus(ds *descState, d *decision, b *statusBox, now int64) {
	b.st.Code = pb.RateLimitResponse_OK
	switch ds.kind {
	case kindNone:
		return
	case kindUnlimited:
		b.st.LimitRemaining = math.MaxUint32
		ds.out = observe.Allowed
		return
	}
	var r sluice.Result
	var over bool
	switch {
	case ds.kind == kindRefund:
		r = d.refunded[ds.part]
	case ds.zero:
		over = true
	case ds.kind == kindQuota:
		r, over = d.quota.res[ds.part], d.quota.over[ds.part]
	case ds.kind == kindEnforced:
		r, over = d.enf[ds.part], d.enfOver[ds.part]
	case ds.kind == kindCharge:
		r, over = d.chg[ds.part], d.chgOver[ds.part]
	default:
		r, over = d.sha[ds.part], d.shaOver[ds.part]
	}
	if over && !ds.shadow() {
		b.st.Code = pb.RateLimitResponse_OVER_LIMIT
	}
	ds.res, ds.over = r, over
	rule := ds.rule
	b.lim.Name = rule.Name
	b.lim.RequestsPerUnit = uint32(min(max(rule.RequestsPerUnit, 0), math.MaxUint32))
	b.lim.Unit = protoUnit(rule.Unit)
	b.st.CurrentLimit = &b.lim
	b.st.LimitRemaining = uint32(min(max(r.Remaining, 0), math.MaxUint32))
	reset := resetAfter(rule.Limit, r, now)
	if ds.kind == kindCharge && over && !ds.zero {
		reset = untilPaid(rule.Limit, r) // when the next check passes
	}
	b.dur.Seconds, b.dur.Nanos = int64(reset/time.Second), int32(reset%time.Second)
	b.st.DurationUntilReset = &b.dur
	switch {
	case ds.kind == kindRefund:
		// a give-back is not a decision: it is not counted
	case ds.shadow() && over:
		ds.out = observe.ShadowDenied
	case over:
		ds.out = observe.Denied
	case r.Degraded:
		ds.out = observe.Degraded
	default:
		ds.out = observe.Allowed
	}
}

// protoUnit maps a rule's unit onto the response's enum.
func protoUnit(u string) pb.RateLimitResponse_RateLimit_Unit {
	switch strings.ToLower(u) {
	case "second":
		return pb.RateLimitResponse_RateLimit_SECOND
	case "minute":
		return pb.RateLimitResponse_RateLimit_MINUTE
	case "hour":
		return pb.RateLimitResponse_RateLimit_HOUR
	case "day":
		return pb.RateLimitResponse_RateLimit_DAY
	case "week":
		return pb.RateLimitResponse_RateLimit_WEEK
	case "month":
		return pb.RateLimitResponse_RateLimit_MONTH
	case "year":
		return pb.RateLimitResponse_RateLimit_YEAR
	}
	return pb.RateLimitResponse_RateLimit_UNKNOWN
}

// resetAfter is a descriptor's duration_until_reset: for an epoch-aligned
// window the time to the window's end, as envoy counts it, else (and for
// a key in debt, which carries past the window) the decision's
// ResetAfter. us is the time in µs since the Unix epoch.
func resetAfter(l sluice.Limit, r sluice.Result, us int64) time.Duration {
	if l.Algorithm == sluice.AlignedWindow && l.Period > 0 && r.Remaining >= 0 {
		p := l.Period.Microseconds()
		if p > 0 {
			return time.Duration(p-us%p) * time.Microsecond
		}
	}
	return r.ResetAfter
}

// headed reports whether ds is a limit the headers describe: an enforced,
// a quota_mode or a charge one (not in shadow mode).
func headed(ds *descState) bool {
	return ds.kind == kindEnforced || ds.kind == kindQuota || ds.kind == kindCharge && !ds.rule.Shadow
}

// refuses reports whether ds refused the call on its own (an enforced or
// a charge descriptor over its limit): envoy's headers describe such a one
// first.
func refuses(ds *descState) bool {
	return ds.over && (ds.kind == kindEnforced || ds.kind == kindCharge && !ds.rule.Shadow)
}
