package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/fastclock"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/redisstore"
	"github.com/sluice-go/sluice/store"
)

// service is the deciding half of a Server: the configuration in use, the
// stores, and what the answers are counted in. It has no listener; the
// Server's doors (rls, the HTTP handlers) call shouldRateLimit.
type service struct {
	opts Options
	stores
	now     func() time.Time // the store's clock, when it was given one; nil: fastclock
	state   atomic.Pointer[state]
	metrics *metrics
	log     *slog.Logger
	loads   loads        // the configuration's loads (config.go)
	envoy   *envoyStats  // envoy's per-rule series (Options.EnvoyStats), nil without
	holds   *holdTable   // the concurrency leases the lease calls hold (holds.go)
	rlqs    *rlqsService // Options.RLQS's service, nil without
	all     allHolds     // the units every instance holds on the keys of holds' view (holdsall.go)
	// sliceStores are the stores with slices, by label (slicingStores).
	sliceStores map[string]*redisstore.Store

	answered       atomic.Int64           // calls answered, on every door
	storeErrs      atomic.Int64           // store failures not yet logged
	storeErrLogged atomic.Int64           // when the last was logged, fastclock µs
	storeProblems  atomic.Pointer[string] // what the last check of the stores found (checkStores)
}

// newService is the service of o, which has its defaults (Options.
// setDefaults); it has no configuration until its first load.
func newService(o Options) *service {
	m := newMetrics(o.Limits.ValueSeries)
	s := &service{opts: o, stores: newStores(&o, m.storeErrors), metrics: m, log: o.Logger}
	s.sliceStores = slicingStores(o.Store, o.PerSecondStore)
	if c := newSliceCollector(s.sliceStores); c != nil {
		m.reg.MustRegister(c)
	}
	// An epoch-aligned window's reset is read on the store's clock when it
	// was given one (a test's), else on the fast system clock.
	if c := s.lim.Clock(); c != (storelink.SystemClock{}) {
		s.now = c.Now
	}
	s.holds = newHoldTable(s.now, &s.opts.Limits)
	if s.log == nil {
		s.log = slog.Default()
	}
	if o.EnvoyStats {
		s.envoy = newEnvoyStats(o.NearLimitRatio, o.Limits.StatSeries)
		m.reg.MustRegister(s.envoy)
	}
	return s
}

// call is one call's working memory: its plan and the stores' answers,
// pooled.
type call struct {
	plan     plan
	decision decision
}

var callPool = sync.Pool{New: func() any { return new(call) }}

// release returns c to the pool, holding nothing of its call.
func (c *call) release() {
	c.plan.clear()
	callPool.Put(c)
}

// shouldRateLimit answers one call into resp, with the headers hdr asks
// for, and returns the call's composite result (for /v1/take): it plans
// the call on the configuration in use, has the stores decide the plan,
// writes the response, and counts the outcome. Its error is a
// requestError, or the store's.
func (s *service) shouldRateLimit(ctx context.Context, req *pb.RateLimitRequest, resp *pb.RateLimitResponse, hdr Headers) (sluice.Result, error) {
	return s.decideCall(ctx, req, resp, hdr, callOptions{})
}

// callOptions are what the HTTP API's descriptor form asks of a call
// beside a gRPC call's answer.
type callOptions struct {
	// chargeAll: every limited descriptor is charged (/v1/charge), not
	// only those of charge rules.
	chargeAll bool
	// debts, when set, receives each descriptor's Remaining where it is
	// negative (a key in debt), which a status's limit_remaining cannot
	// hold; it must have a place per descriptor.
	debts []int64
}

// decideCall is shouldRateLimit with co.
func (s *service) decideCall(ctx context.Context, req *pb.RateLimitRequest, resp *pb.RateLimitResponse, hdr Headers, co callOptions) (sluice.Result, error) {
	if err := validate(req, &s.opts); err != nil {
		return sluice.Result{}, err
	}
	st := s.state.Load()
	if st == nil {
		return sluice.Result{}, errNoConfig
	}
	c := callPool.Get().(*call)
	defer c.release()
	p, d := &c.plan, &c.decision
	p.chargeAll = co.chargeAll
	if err := p.make(req, st.cfg, &s.opts); err != nil {
		return sluice.Result{}, err
	}
	start := fastclock.Micros()
	if err := s.decide(ctx, p, d); err != nil {
		s.observeError(st, p, err, sinceMicros(start))
		return sluice.Result{}, err
	}
	latency := sinceMicros(start)
	o := respondOptions{headers: hdr, names: &s.opts.HeaderNames, globalShadow: s.opts.GlobalShadow, now: start}
	if s.now != nil {
		o.now = s.now().UnixMicro()
	}
	if s.opts.DynamicMetadata {
		o.dynamicMetadata, o.metadata = true, st.metadata
	}
	a := respond(p, d, &o, resp)
	s.record(st, p, a, latency)
	for i := range co.debts {
		co.debts[i] = min(p.desc[i].res.Remaining, 0)
	}
	return a.result, nil
}

// record counts a decided call: each descriptor's outcome (but those with
// no rule and the give-backs), in order, and the call's.
func (s *service) record(st *state, p *plan, a answer, latency time.Duration) {
	ev := 0 // the call's Events so far
	for i := range p.desc {
		ds := &p.desc[i]
		if ds.kind == kindNone || ds.kind == kindRefund {
			continue
		}
		s.observe(st, p.req.Domain, ds.rule, p.entries[i], ds.out, latency, ev)
		ev++
		if ds.kind == kindCharge && !ds.zero {
			if units := cost(p.req, p.req.Descriptors[i]); units > 0 {
				s.observeCharge(st, p.req.Domain, ds.rule, units)
			}
		}
	}
	if s.envoy != nil {
		s.envoy.record(st, p)
	}
	if a.degraded {
		s.metrics.degraded.Inc()
	}
	if a.shadowed {
		s.metrics.globalShadow.Inc()
	}
}

// sinceMicros is the time since start, a fastclock reading.
func sinceMicros(start int64) time.Duration {
	return time.Duration(fastclock.Micros()-start) * time.Microsecond
}

// errNoConfig answers the calls that come before the first configuration
// does: an xDS server's, which a Server waits for (XDSOptions.ForceStart).
var errNoConfig = errors.New("no rate-limit configuration yet: waiting for the xDS server's first")

// requestError is a request the service will not decide: InvalidArgument.
type requestError struct {
	msg string
	err error // what it wraps, nil when none
}

func (e *requestError) Error() string { return e.msg }
func (e *requestError) Unwrap() error { return e.err }

func badRequest(format string, args ...any) error {
	return &requestError{msg: fmt.Sprintf(format, args...)}
}

// capped is the request error of an input over a cap of the limits
// table (a *limits.Exceeded, which it wraps), nil when err is nil.
func capped(err error) error {
	if err == nil {
		return nil
	}
	return &requestError{msg: err.Error(), err: err}
}

// grpcError maps a decision's error onto a gRPC status.
func grpcError(err error) error {
	var re *requestError
	switch {
	case errors.As(err, &re):
		return status.Error(codes.InvalidArgument, re.msg)
	case errors.Is(err, sluice.ErrStoreUnavailable):
		return status.Error(codes.Unavailable, "rate limit store unavailable")
	case errors.Is(err, errNoConfig):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// checkStores asks each Redis store whether its servers keep the
// limiter's keys (redisstore.Store.CheckConfig): one whose
// maxmemory-policy may evict them forgets what was spent, and its next
// decision admits as on a fresh key. It returns one line per problem
// found, sets sluice_serve_store_may_evict and logs the problems when they
// differ from the last check's; unreachable is the error of the stores
// that did not answer (they are not checked). Serve checks at start,
// /readyz at each probe.
func (s *service) checkStores(ctx context.Context) (problems []string, unreachable error) {
	evict, checked := false, false
	for _, st := range []struct {
		name  string
		store store.Store
	}{{"store", s.opts.Store}, {"per-second store", s.opts.PerSecondStore}} {
		rs, ok := st.store.(*redisstore.Store)
		if !ok {
			continue
		}
		err := rs.CheckConfig(ctx)
		switch {
		case errors.Is(err, sluice.ErrStoreUnavailable):
			unreachable = errors.Join(unreachable, fmt.Errorf("%s: %w", st.name, err))
			continue
		case errors.Is(err, redisstore.ErrEvictingPolicy):
			evict = true
			problems = append(problems, st.name+": "+err.Error())
		case errors.Is(err, redisstore.ErrConfigUnreadable):
			problems = append(problems, st.name+": "+err.Error())
		case err != nil:
			continue // closed, or the caller gone: nothing learnt
		}
		checked = true
	}
	if !checked {
		return problems, unreachable
	}
	if evict {
		s.metrics.mayEvict.Set(1)
	} else {
		s.metrics.mayEvict.Set(0)
	}
	now := strings.Join(problems, "\n")
	if last := s.storeProblems.Swap(&now); last == nil || *last != now {
		for _, p := range problems {
			s.log.Warn("the store may not keep the limiter's budgets", "problem", p)
		}
		if len(problems) == 0 && last != nil {
			s.log.Info("the store keeps the limiter's budgets again (maxmemory-policy noeviction)")
		}
	}
	return problems, unreachable
}
