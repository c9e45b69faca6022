package serve

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/fastclock"
	"github.com/sluice-go/sluice/internal/policycore"
	"github.com/sluice-go/sluice/internal/rlsconfig"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/observe"
)

// Headers chooses the rate-limit headers a response asks Envoy to add.
type Headers uint8

const (
	// HeadersNone adds none.
	HeadersNone Headers = iota
	// HeadersEnvoy adds envoyproxy/ratelimit's RateLimit-Limit,
	// RateLimit-Remaining and RateLimit-Reset, from the descriptor nearest its
	// limit (an over-limit one first).
	HeadersEnvoy
	// HeadersDraft11 adds RateLimit-Policy and RateLimit
	// (draft-ietf-httpapi-ratelimit-headers-11), one item per limited
	// descriptor.
	HeadersDraft11
)

// EnvoyHeaderNames names the headers of HeadersEnvoy, as envoy's
// LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER and LIMIT_RESET_HEADER do; an
// empty name is the default (RateLimit-Limit, RateLimit-Remaining,
// RateLimit-Reset).
type EnvoyHeaderNames struct {
	Limit, Remaining, Reset string
}

// withDefaults fills the empty names, and checks the others are header
// field names (RFC 9110 tokens).
func (n EnvoyHeaderNames) withDefaults() (EnvoyHeaderNames, error) {
	for _, f := range []struct {
		name *string
		def  string
	}{{&n.Limit, "RateLimit-Limit"}, {&n.Remaining, "RateLimit-Remaining"}, {&n.Reset, "RateLimit-Reset"}} {
		if *f.name == "" {
			*f.name = f.def
			continue
		}
		if !isToken(*f.name) {
			return n, fmt.Errorf("response header name %q is not a valid HTTP header name", *f.name)
		}
	}
	return n, nil
}

// isToken reports whether s is an RFC 9110 token, a valid header name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// ParseHeaders reads a --response-headers value: none, envoy or draft11.
func ParseHeaders(s string) (Headers, error) {
	switch s {
	case "none", "":
		return HeadersNone, nil
	case "envoy":
		return HeadersEnvoy, nil
	case "draft11":
		return HeadersDraft11, nil
	}
	return HeadersNone, fmt.Errorf("response headers %q: want none, envoy or draft11", s)
}

// part kinds of a descriptor.
const (
	kindNone      = iota // no rule matched: OK, no limit
	kindUnlimited        // an unlimited rule: OK
	kindEnforced
	kindShadow
	kindQuota  // quota_mode: over only refuses when every quota descriptor is (quota.go)
	kindRefund // is_negative_hits: gives its units back (quota.go)
)

// descState is one descriptor's decision in progress.
type descState struct {
	rule *rlsconfig.Rule
	kind uint8
	zero bool // requests_per_unit 0: over the limit without asking the store
	over bool
	part int // index in the enforced or shadow parts (after merging equal keys)
	res  sluice.Result
}

// scratch is the per-call working memory, pooled.
type scratch struct {
	entries  [][]rlsconfig.Entry
	flat     []rlsconfig.Entry
	desc     []descState
	enforced []sluice.Part
	shadow   []sluice.Part
	results  []sluice.Result // per enforced part, then per shadow part
	over     []bool          // per enforced part, then per shadow part
	both     []sluice.Part   // the enforced parts, then the shadow parts (decideTogether)
	quota    quotaScratch
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

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

// requestError is a request the service will not decide: InvalidArgument.
type requestError struct{ msg string }

func (e *requestError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &requestError{fmt.Sprintf(format, args...)}
}

// grpcError maps a decision's error onto a gRPC status.
func grpcError(err error) error {
	var re *requestError
	switch {
	case errors.As(err, &re):
		return status.Error(codes.InvalidArgument, re.msg)
	case errors.Is(err, sluice.ErrStoreUnavailable):
		return status.Error(codes.Unavailable, "rate limit store unavailable")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// validate checks a request against the service's limits.
func (s *Server) validate(req *pb.RateLimitRequest) error {
	if req.Domain == "" {
		return badRequest("rate limit domain must not be empty")
	}
	if len(req.Descriptors) == 0 {
		return badRequest("rate limit descriptor list must not be empty")
	}
	if len(req.Descriptors) > s.opts.MaxDescriptors {
		return badRequest("%d descriptors: at most %d are allowed", len(req.Descriptors), s.opts.MaxDescriptors)
	}
	if len(req.Domain) > s.opts.MaxEntryBytes {
		return badRequest("domain of %d bytes: at most %d are allowed", len(req.Domain), s.opts.MaxEntryBytes)
	}
	for i, d := range req.Descriptors {
		if d == nil || len(d.Entries) == 0 {
			return badRequest("descriptor %d has no entries", i)
		}
		if len(d.Entries) > s.opts.MaxEntries {
			return badRequest("descriptor %d has %d entries: at most %d are allowed", i, len(d.Entries), s.opts.MaxEntries)
		}
		for j, e := range d.Entries {
			if e == nil {
				return badRequest("descriptor %d entry %d is empty", i, j)
			}
			if len(e.Key) > s.opts.MaxEntryBytes || len(e.Value) > s.opts.MaxEntryBytes {
				return badRequest("descriptor %d entry %d: key or value longer than %d bytes", i, j, s.opts.MaxEntryBytes)
			}
			if e.Key == "" {
				return badRequest("descriptor %d entry %d has an empty key", i, j)
			}
		}
	}
	return nil
}

// cost is a descriptor's cost: its own hits_addend when set (0 only looks),
// else the request's, else 1.
func cost(req *pb.RateLimitRequest, d *rlv3.RateLimitDescriptor) int64 {
	if d.HitsAddend != nil {
		return int64(min(d.HitsAddend.Value, math.MaxInt64>>1))
	}
	if req.HitsAddend != 0 {
		return int64(req.HitsAddend)
	}
	return 1
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

// addPart appends p to parts, merging it into a part of the same key (two
// descriptors that name one counter spend it together); it returns the
// part's index.
func addPart(parts *[]sluice.Part, p sluice.Part) int {
	for i := range *parts {
		if (*parts)[i].Key == p.Key {
			(*parts)[i].Cost = addCost((*parts)[i].Cost, p.Cost)
			return i
		}
	}
	*parts = append(*parts, p)
	return len(*parts) - 1
}

// addCost adds two costs (neither negative), saturating at math.MaxInt64:
// a sum that does not fit is over every limit's capacity, so the call is
// refused as any cost that could never pass is, where a wrapped sum would
// pass as a small cost or fail as a negative one.
func addCost(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// decide answers one request into resp and returns the composite's result
// (for /v1/take). Its error is a requestError, or the store's.
func (s *Server) decide(ctx context.Context, req *pb.RateLimitRequest, resp *pb.RateLimitResponse, hdr Headers) (sluice.Result, error) {
	if err := s.validate(req); err != nil {
		return sluice.Result{}, err
	}
	st := s.state.Load()
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)

	n := len(req.Descriptors)
	total := 0
	for _, d := range req.Descriptors {
		total += len(d.Entries)
	}
	sc.flat = sc.flat[:0]
	if cap(sc.flat) < total {
		sc.flat = make([]rlsconfig.Entry, 0, total)
	}
	sc.entries = sc.entries[:0]
	for _, d := range req.Descriptors {
		lo := len(sc.flat)
		for _, e := range d.Entries {
			sc.flat = append(sc.flat, rlsconfig.Entry{Key: e.Key, Value: e.Value})
		}
		sc.entries = append(sc.entries, sc.flat[lo:len(sc.flat):len(sc.flat)])
	}
	defer clear(sc.flat) // drop the request's strings
	rules := st.cfg.Resolve(req.Domain, sc.entries)

	if cap(sc.desc) < n {
		sc.desc = make([]descState, n)
	}
	sc.desc = sc.desc[:n]
	defer clear(sc.desc) // drop the rules: a pooled scratch must not keep an old configuration alive
	sc.enforced, sc.shadow = sc.enforced[:0], sc.shadow[:0]
	defer func() { clear(sc.enforced[:cap(sc.enforced)]); clear(sc.shadow[:cap(sc.shadow)]) }()
	sc.quota.reset()
	defer sc.quota.clear()
	for i, d := range req.Descriptors {
		ds := &sc.desc[i]
		*ds = descState{}
		var rule *rlsconfig.Rule
		if i < len(rules) {
			rule = rules[i]
		}
		if d.Limit != nil && st.cfg.HasDomain(req.Domain) {
			o, err := rlsconfig.Override(req.Domain, sc.entries[i], d.Limit.RequestsPerUnit, d.Limit.Unit.String())
			if err != nil {
				return sluice.Result{}, badRequest("descriptor %d: limit override: %v", i, err)
			}
			rule = o
		}
		ds.rule = rule
		switch {
		case rule == nil:
			ds.kind = kindNone
			continue
		case rule.Unlimited:
			ds.kind = kindUnlimited
			continue
		}
		p := sluice.Part{Key: rule.Key(sc.entries[i]), Limit: rule.Limit, Cost: cost(req, d)}
		if s.opts.DomainSlot {
			p.Key = domainSlot(p.Key)
		}
		if d.IsNegativeHits && p.Cost > 0 {
			if err := sc.quota.addRefund(i, ds, p); err != nil {
				return sluice.Result{}, err
			}
			continue
		}
		if rule.Limit.Rate == 0 {
			// requests_per_unit 0: every hit is over the limit, as envoy
			// has it; the store is not asked.
			ds.kind, ds.zero = kindEnforced, true
			if rule.Shadow {
				ds.kind = kindShadow
			} else if rule.QuotaMode || s.opts.GlobalQuota {
				ds.kind = kindQuota
			}
			continue
		}
		if rule.Shadow {
			ds.kind = kindShadow
			ds.part = addPart(&sc.shadow, p)
		} else if rule.QuotaMode || s.opts.GlobalQuota {
			ds.kind = kindQuota
			ds.part = addPart(&sc.quota.parts, p)
		} else {
			ds.kind = kindEnforced
			ds.part = addPart(&sc.enforced, p)
		}
	}

	start := fastclock.Micros()
	total = len(sc.enforced) + len(sc.shadow)
	if cap(sc.results) < total {
		sc.results = make([]sluice.Result, total)
	}
	sc.results = sc.results[:total]
	enf, sha := sc.results[:len(sc.enforced)], sc.results[len(sc.enforced):]
	if cap(sc.over) < total {
		sc.over = make([]bool, total)
	}
	sc.over = sc.over[:total]
	clear(sc.over)
	enfOver, shaOver := sc.over[:len(sc.enforced)], sc.over[len(sc.enforced):]
	blocked := false // an enforced requests_per_unit 0 refuses the call
	for i := range sc.desc {
		blocked = blocked || (sc.desc[i].zero && sc.desc[i].kind == kindEnforced)
	}
	var comp sluice.Result
	shadowDone := false // decideTogether decided the shadow parts too
	quotaOver, err := s.decideQuota(ctx, sc, blocked)
	blocked = blocked || quotaOver
	switch {
	case err != nil: // a give-back or a quota part failed: the call is not decided
	case blocked:
		// Refused whatever the others say, so they spend nothing: a look.
		if err = s.look(ctx, sc.enforced, enf); err == nil {
			for i := range enf {
				enfOver[i] = enf[i].Remaining < sc.enforced[i].Cost
			}
		}
	default:
		if len(sc.shadow) > 0 && len(sc.enforced) > 0 && len(sc.quota.parts) == 0 {
			if comp, shadowDone, err = s.decideTogether(ctx, sc, enf, enfOver, sha, shaOver); shadowDone || err != nil {
				break
			}
		}
		comp, err = s.decideParts(ctx, sc.enforced, enf, enfOver)
		if err == nil && !comp.Allowed && len(sc.enforced) > 0 {
			s.undoQuota(ctx, sc)
		}
	}
	if err != nil {
		s.observeError(st, req.Domain, sc, err, sinceMicros(start))
		return sluice.Result{}, err
	}
	// Shadow parts spend as if enforced when the call is admitted, each on
	// its own so that none blocks the others; when the call is refused they
	// only look, since a refused call spends nothing.
	if len(sc.shadow) > 0 && !shadowDone {
		s.decideShadow(ctx, sc.shadow, comp.Allowed, sha, shaOver)
	}
	latency := sinceMicros(start)

	// The response.
	code := pb.RateLimitResponse_OK
	if (!comp.Allowed && len(sc.enforced) > 0) || quotaOver {
		code = pb.RateLimitResponse_OVER_LIMIT
	}
	var boxes []statusBox
	if n == 1 {
		one := new(oneStatus)
		boxes, resp.Statuses = one.box[:], one.ptr[:]
	} else {
		boxes = make([]statusBox, n)
		resp.Statuses = make([]*pb.RateLimitResponse_DescriptorStatus, n)
	}
	now := start
	if s.now != nil {
		now = s.now().UnixMicro()
	}
	ev := 0 // the call's Events so far
	for i := range sc.desc {
		ds := &sc.desc[i]
		b := &boxes[i]
		resp.Statuses[i] = &b.st
		b.st.Code = pb.RateLimitResponse_OK
		switch ds.kind {
		case kindNone:
			continue
		case kindUnlimited:
			b.st.LimitRemaining = math.MaxUint32
			s.observe(st, req.Domain, ds.rule, sc.entries[i], observe.Allowed, latency, ev)
			ev++
			continue
		}
		var r sluice.Result
		var over bool
		switch {
		case ds.kind == kindRefund:
			r = sc.quota.refunded[ds.part]
		case ds.zero:
			over = true
			if ds.kind == kindEnforced {
				code = pb.RateLimitResponse_OVER_LIMIT
			}
			if ds.kind != kindShadow {
				b.st.Code = pb.RateLimitResponse_OVER_LIMIT
			}
		case ds.kind == kindQuota:
			r, over = sc.quota.res[ds.part], sc.quota.over[ds.part]
			if over {
				b.st.Code = pb.RateLimitResponse_OVER_LIMIT
			}
		case ds.kind == kindEnforced:
			r, over = enf[ds.part], enfOver[ds.part]
			if over {
				b.st.Code = pb.RateLimitResponse_OVER_LIMIT
			}
		default:
			r, over = sha[ds.part], shaOver[ds.part]
		}
		ds.res = r
		ds.over = over
		rule := ds.rule
		b.lim.Name = rule.Name
		b.lim.RequestsPerUnit = uint32(min(max(rule.RequestsPerUnit, 0), math.MaxUint32))
		b.lim.Unit = protoUnit(rule.Unit)
		b.st.CurrentLimit = &b.lim
		b.st.LimitRemaining = uint32(min(max(r.Remaining, 0), math.MaxUint32))
		reset := resetAfter(rule.Limit, r, now)
		b.dur.Seconds, b.dur.Nanos = int64(reset/time.Second), int32(reset%time.Second)
		b.st.DurationUntilReset = &b.dur
		if ds.kind == kindRefund {
			continue // a give-back is not a decision
		}
		out := observe.Allowed
		switch {
		case ds.kind == kindShadow && over:
			out = observe.ShadowDenied
		case over:
			out = observe.Denied
		case r.Degraded:
			out = observe.Degraded
		}
		s.observe(st, req.Domain, rule, sc.entries[i], out, latency, ev)
		ev++
	}
	if comp.Degraded {
		s.metrics.degraded.Inc()
	}
	if len(sc.enforced) == 0 {
		comp = sluice.Result{Allowed: true, Remaining: math.MaxInt64}
	}
	if code == pb.RateLimitResponse_OVER_LIMIT {
		comp.Allowed = false // a requests_per_unit of 0 refuses without the store
		if s.opts.GlobalShadow {
			code = pb.RateLimitResponse_OK
			s.metrics.globalShadow.Inc()
		}
	}
	resp.OverallCode = code
	if hdr != HeadersNone {
		resp.ResponseHeadersToAdd = headers(hdr, &s.opts.HeaderNames, sc.desc, resp.Statuses)
	}
	if s.opts.DynamicMetadata {
		resp.DynamicMetadata = s.dynamicMetadata(st, req, sc, resp.Statuses)
	}
	return comp, nil
}

// decideTogether decides the enforced and the shadow parts in one TakeEach,
// one round trip, where that gives what deciding them in turn gives: when
// every part passes (the call is admitted and each shadow part spends as
// decideShadow would have it), or when an enforced part refuses (the call
// is refused, and TakeEach spent nothing and looked at every part). When
// only shadow parts refuse, nothing was spent and done is false: the
// caller decides in turn. It is not tried (done false) for parts in two
// stores (PerSecondStore), a key in both groups, a cost over a capacity,
// or a store it does not pay on (see together).
func (s *Server) decideTogether(ctx context.Context, sc *scratch, enf []sluice.Result, enfOver []bool, sha []sluice.Result, shaOver []bool) (comp sluice.Result, done bool, err error) {
	lim := s.limFor(sc.enforced[0].Limit)
	if (lim == s.lim && !s.togetherMain) || (lim == s.lim2 && !s.togetherSec) {
		return sluice.Result{}, false, nil
	}
	for i := range sc.enforced {
		if s.limFor(sc.enforced[i].Limit) != lim {
			return sluice.Result{}, false, nil
		}
	}
	for i := range sc.shadow {
		if s.limFor(sc.shadow[i].Limit) != lim {
			return sluice.Result{}, false, nil
		}
		for j := range sc.enforced {
			if sc.shadow[i].Key == sc.enforced[j].Key {
				return sluice.Result{}, false, nil
			}
		}
	}
	sc.both = append(append(sc.both[:0], sc.enforced...), sc.shadow...)
	defer clear(sc.both)
	res := sc.results[:len(sc.both)] // enf, then sha
	all, err := lim.TakeEach(ctx, sc.both, res)
	if errors.Is(err, sluice.ErrCostExceedsCapacity) {
		return sluice.Result{}, false, nil // nothing spent
	}
	if err != nil {
		return all, true, err
	}
	if all.Allowed {
		return fold(enf, true), true, nil
	}
	refused := false
	for i := range enf {
		enfOver[i] = !enf[i].Allowed
		refused = refused || enfOver[i]
	}
	if !refused {
		clear(enfOver)
		clear(res)
		return sluice.Result{}, false, nil // only shadow parts refused: in turn
	}
	for i := range sha {
		// Over as decideShadow reads a look for a refused call.
		shaOver[i] = sha[i].Remaining < sc.shadow[i].Cost
	}
	return fold(enf, false), true, nil
}

// fold is the composite of parts' results: allowed as given, the smallest
// Remaining, the largest ResetAfter, Delay and RetryAfter.
func fold(rs []sluice.Result, allowed bool) sluice.Result {
	c := sluice.Result{Allowed: allowed, Remaining: math.MaxInt64}
	for _, r := range rs {
		c.Remaining = min(c.Remaining, r.Remaining)
		c.ResetAfter = max(c.ResetAfter, r.ResetAfter)
		c.Delay = max(c.Delay, r.Delay)
		c.RetryAfter = max(c.RetryAfter, r.RetryAfter)
		c.Degraded = c.Degraded || r.Degraded
	}
	if allowed {
		c.RetryAfter = 0
	}
	return c
}

// decideShadow decides the shadow parts, each on its own: spending as if
// enforced when the call is admitted, looking when it is refused. A store
// error counts, but never fails the call.
func (s *Server) decideShadow(ctx context.Context, parts []sluice.Part, admitted bool, res []sluice.Result, over []bool) {
	s.each(len(parts), func(i int) error {
		p := &parts[i]
		c := p.Cost
		if !admitted {
			c = 0
		}
		r, tooBig, err := s.take(ctx, p, c)
		switch {
		case tooBig:
			over[i] = true
		case err != nil:
			s.metrics.storeErrors.Inc()
			over[i] = false
		default:
			over[i] = !r.Allowed || (c == 0 && r.Remaining < p.Cost)
		}
		res[i] = r
		return nil
	})
}

// sinceMicros is the time since start, a fastclock reading.
func sinceMicros(start int64) time.Duration {
	return time.Duration(fastclock.Micros()-start) * time.Microsecond
}

// resetAfter is a descriptor's duration_until_reset: for an epoch-aligned
// window the time to the window's end, as envoy counts it, else the
// decision's ResetAfter. us is the time in µs since the Unix epoch.
func resetAfter(l sluice.Limit, r sluice.Result, us int64) time.Duration {
	if l.Algorithm == sluice.AlignedWindow && l.Period > 0 {
		p := l.Period.Microseconds()
		if p > 0 {
			return time.Duration(p-us%p) * time.Microsecond
		}
	}
	return r.ResetAfter
}

// decideParts decides the enforced parts, all or nothing, in one Take or
// TakeEach (per store, with Options.PerSecondStore: see decideSplit). res
// receives each part's own numbers at the decision, over (zeroed, one per
// part) which parts refused. The composite's result is returned.
func (s *Server) decideParts(ctx context.Context, parts []sluice.Part, res []sluice.Result, over []bool) (sluice.Result, error) {
	if s.lim2 != nil {
		n := 0
		for i := range parts {
			if perSecond(parts[i].Limit) {
				n++
			}
		}
		switch n {
		case 0:
		case len(parts):
			return s.decideOn(ctx, s.lim2, parts, res, over)
		default:
			return s.decideSplit(ctx, parts, res, over)
		}
	}
	return s.decideOn(ctx, s.lim, parts, res, over)
}

// decideOn is decideParts on one limiter.
func (s *Server) decideOn(ctx context.Context, lim *sluice.Limiter, parts []sluice.Part, res []sluice.Result, over []bool) (sluice.Result, error) {
	if len(parts) == 0 {
		return sluice.Result{Allowed: true}, nil
	}
	if len(parts) == 1 {
		p := &parts[0]
		r, tooBig, err := s.take(ctx, p, p.Cost)
		if err != nil {
			return r, err
		}
		r.Allowed = !tooBig && (r.Allowed || p.Cost == 0) // a look is never refused
		res[0] = r
		over[0] = !r.Allowed
		return r, nil
	}
	// Each part's own numbers come from the decision itself.
	comp, err := lim.TakeEach(ctx, parts, res)
	if errors.Is(err, sluice.ErrCostExceedsCapacity) {
		// A cost that could never pass refuses the call, which spends
		// nothing: the parts' numbers come from a look.
		if err := s.look(ctx, parts, res); err != nil {
			return sluice.Result{}, err
		}
		for i := range parts {
			over[i] = res[i].Remaining < parts[i].Cost
		}
		return sluice.Result{}, nil
	}
	if err != nil {
		return comp, err
	}
	for i := range parts {
		over[i] = !res[i].Allowed
	}
	return comp, nil
}

// decideSplit decides parts some of which are per second (Options.
// PerSecondStore) and some not: the per-second ones first, all or nothing;
// when they refuse, the others are only looked at; when they pass, the
// others are decided, and if those refuse, what the per-second ones spent
// is given back, so that a refused call spends nothing.
func (s *Server) decideSplit(ctx context.Context, parts []sluice.Part, res []sluice.Result, over []bool) (sluice.Result, error) {
	var idx [2][]int
	var group [2][]sluice.Part
	for i := range parts {
		g := 0
		if perSecond(parts[i].Limit) {
			g = 1
		}
		idx[g] = append(idx[g], i)
		group[g] = append(group[g], parts[i])
	}
	var gres [2][]sluice.Result
	var gover [2][]bool
	for g := range 2 {
		gres[g], gover[g] = make([]sluice.Result, len(group[g])), make([]bool, len(group[g]))
	}
	defer func() {
		for g := range 2 {
			for j, i := range idx[g] {
				res[i], over[i] = gres[g][j], gover[g][j]
			}
		}
	}()
	sec, err := s.decideOn(ctx, s.lim2, group[1], gres[1], gover[1])
	if err != nil {
		return sec, err
	}
	if !sec.Allowed {
		if err := s.look(ctx, group[0], gres[0]); err != nil {
			return sluice.Result{}, err
		}
		for j := range group[0] {
			gover[0][j] = gres[0][j].Remaining < group[0][j].Cost
		}
		return sec, nil
	}
	rest, err := s.decideOn(ctx, s.lim, group[0], gres[0], gover[0])
	if err != nil || !rest.Allowed {
		for j := range group[1] {
			p := &group[1][j]
			if p.Cost <= 0 {
				continue
			}
			r, rerr := s.lim2.RefundTake(context.WithoutCancel(ctx), p.Key, p.Limit, p.Cost, gres[1][j])
			if rerr != nil {
				s.metrics.storeErrors.Inc()
				continue
			}
			gres[1][j] = r // what the part has now that nothing is spent
		}
		return rest, err
	}
	return sluice.Result{
		Allowed:    true,
		Remaining:  min(rest.Remaining, sec.Remaining),
		ResetAfter: max(rest.ResetAfter, sec.ResetAfter),
		Delay:      max(rest.Delay, sec.Delay),
		Degraded:   rest.Degraded || sec.Degraded,
	}, nil
}

// perSecond reports whether l is counted per second: an epoch-aligned
// window of one second, envoy's unit second.
func perSecond(l sluice.Limit) bool {
	return l.Algorithm == sluice.AlignedWindow && l.Period == time.Second
}

// limFor is the limiter that keeps l's budgets.
func (s *Server) limFor(l sluice.Limit) *sluice.Limiter {
	if s.lim2 != nil && perSecond(l) {
		return s.lim2
	}
	return s.lim
}

// take spends cost on p alone. A cost that could never pass (over the
// limit's capacity) is refused, as envoy refuses it: r is then a look, and
// tooBig is set.
func (s *Server) take(ctx context.Context, p *sluice.Part, cost int64) (r sluice.Result, tooBig bool, err error) {
	lim := s.limFor(p.Limit)
	r, err = lim.Take(ctx, p.Key, p.Limit, cost)
	if errors.Is(err, sluice.ErrCostExceedsCapacity) {
		r, err = lim.Take(ctx, p.Key, p.Limit, 0)
		return r, true, err
	}
	return r, false, err
}

// headers builds the response headers mode asks for.
func headers(mode Headers, names *EnvoyHeaderNames, desc []descState, sts []*pb.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
	switch mode {
	case HeadersEnvoy:
		best := -1
		for i := range desc {
			if !limits(desc[i].kind) {
				continue
			}
			if best < 0 || (refuses(&desc[i]) && !refuses(&desc[best])) ||
				(refuses(&desc[i]) == refuses(&desc[best]) && sts[i].LimitRemaining < sts[best].LimitRemaining) {
				best = i
			}
		}
		if best < 0 {
			return nil
		}
		st := sts[best]
		reset := st.DurationUntilReset.AsDuration()
		return []*corev3.HeaderValue{
			{Key: names.Limit, Value: strconv.FormatUint(uint64(st.CurrentLimit.RequestsPerUnit), 10)},
			{Key: names.Remaining, Value: strconv.FormatUint(uint64(st.LimitRemaining), 10)},
			{Key: names.Reset, Value: strconv.FormatInt(ceilSeconds(reset), 10)},
		}
	case HeadersDraft11:
		var pol, cur []byte
		for i := range desc {
			d := &desc[i]
			if !limits(d.kind) {
				continue
			}
			name := policyName(d.rule)
			if len(pol) > 0 {
				pol = append(pol, ", "...)
				cur = append(cur, ", "...)
			}
			q, w := draft11Quota(d.rule.Limit)
			pol = policycore.AppendPolicy(pol, name, q, w)
			cur = policycore.AppendLimit(cur, name, d.res.Remaining, ceilSeconds(sts[i].DurationUntilReset.AsDuration()), q)
		}
		if len(pol) == 0 {
			return nil
		}
		return []*corev3.HeaderValue{{Key: "RateLimit-Policy", Value: string(pol)}, {Key: "RateLimit", Value: string(cur)}}
	}
	return nil
}

// draft11Quota is a limit's q and w in the draft-11 fields, as httplimit
// and grpclimit send them: q the capacity r is counted against (a bucket's
// burst, not its rate). A requests_per_unit of 0 admits nothing: q is 0.
func draft11Quota(l sluice.Limit) (q, w int64) {
	p, err := storelink.Params(l)
	if err != nil {
		return 0, max(ceilSeconds(l.Period), 1)
	}
	return policycore.Quota(p)
}

// policyName is a rule's name in headers and metrics: its name, else its
// descriptor path ("key1=value1/key2").
func policyName(r *rlsconfig.Rule) string {
	if r.Name != "" {
		return r.Name
	}
	return r.Path
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// look fills res with a look (cost 0) at each part.
func (s *Server) look(ctx context.Context, parts []sluice.Part, res []sluice.Result) error {
	if len(parts) == 0 {
		return nil
	}
	one := func(i int) error {
		r, err := s.limFor(parts[i].Limit).Take(ctx, parts[i].Key, parts[i].Limit, 0)
		res[i] = r
		if err != nil && !errors.Is(err, sluice.ErrCostExceedsCapacity) {
			return err
		}
		return nil
	}
	if _, local := s.opts.Store.(*memstore.Store); local {
		for i := range parts {
			if err := one(i); err != nil {
				return err
			}
		}
		return nil
	}
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for i := 1; i < len(parts); i++ {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = one(i) }()
	}
	errs[0] = one(0)
	wg.Wait()
	return errors.Join(errs...)
}

// domainSlot makes a store key's domain (the escaped text before its first
// '/', never empty and with no brace) its Redis Cluster hash tag.
func domainSlot(key string) string {
	i := strings.IndexByte(key, '/')
	if i < 0 {
		i = len(key)
	}
	return "{" + key[:i] + "}" + key[i:]
}
