package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policycore"
	"github.com/sluice-go/sluice/observe"
)

// Transport is an http.RoundTripper for outbound calls that keeps to an
// upstream's limits: before each request it waits (sluice.Limiter.WaitAll)
// until every policy admits it, bounded by the request's context; and when
// the upstream answers 429 or 503 with a Retry-After, the request's host is
// held until then for every Transport that shares the store (every replica
// over one Redis), so that nobody calls it again before it said to.
//
//	lim := sluice.New(store)
//	t, err := httplimit.NewTransport(lim, []httplimit.Policy{
//		{Name: "global", Limit: sluice.PerSecond(100), Key: httplimit.Static("all")},
//		{Name: "per-host", Limit: sluice.PerSecond(10)}, // Key nil: the host
//	})
//	client := &http.Client{Transport: t}
//
// A hold is kept in the store as a GCRA budget of one unit per millisecond
// under the key prefix + "hold:" + host (no policy may be named "hold"): held while a cost-0 look finds it
// not full (Result.ResetAfter > 0). A 429/503 tops it up so that it is full
// again when the Retry-After ends. Two answers that arrive at once may both
// top it up, so a hold can last longer than the longest Retry-After (up to
// their sum), never shorter. Retry-After is capped by WithMaxHold (default
// 1h).
//
// WithTransportObserver reports each request's policies (Source "http-out")
// and what the upstream made of it, as the policy UpstreamPolicy.
//
// A policy with a Used spends what the upstream reports it used (a header,
// a JSON usage field, a function of the response): the request takes its
// Cost as an estimate, and once the response's body has been read to its
// end, or closed, the policy is settled to what the response said, so
// that every process that shares the store keeps to a provider's tokens
// per minute. A streamed body is passed through as it is read, its usage
// read on the way (a text/event-stream's last event that has it); a body
// closed early is settled to what was read of it. A body never read nor
// closed is never settled.
type Transport struct {
	lim      *sluice.Limiter
	base     http.RoundTripper
	policies []*policy
	prefix   string
	maxHold  time.Duration
	clock    sluice.Clock
	hold     sluice.Limit
	obs      observe.Observer
	leaky    bool // a policy is a LeakyBucket: WaitAll bounds its turn by the deadline
	onError  func(req *http.Request, err error)
	// settles: a policy has a Used; scans is how many read Used.JSON.
	settles bool
	scans   int
}

// TransportOption configures a Transport.
type TransportOption func(*Transport) error

// WithBase sets the RoundTripper that sends the requests (default
// http.DefaultTransport).
func WithBase(rt http.RoundTripper) TransportOption {
	return func(t *Transport) error { return policycore.Set("WithBase", &t.base, rt) }
}

// WithMaxHold caps how long an upstream's Retry-After holds its host
// (default 1h, at most 24h).
func WithMaxHold(d time.Duration) TransportOption {
	return func(t *Transport) error {
		if d < time.Millisecond || d > 24*time.Hour {
			return fmt.Errorf("WithMaxHold(%v): not in 1ms..24h", d)
		}
		t.maxHold = d
		return nil
	}
}

// WithHoldClock sets the clock a held request waits by (default
// the system clock); give it the clock the Limiter waits by (its store's,
// as memstore.WithClock set it, unless sluice.WithClock set another).
func WithHoldClock(c sluice.Clock) TransportOption {
	return func(t *Transport) error { return policycore.Set("WithHoldClock", &t.clock, c) }
}

// UpstreamPolicy is the policy name under which a Transport with an observer
// reports the upstream's own limit: Allowed when the upstream served a
// request, Denied when it refused it (429, or 503 with a Retry-After) or held
// it past its context's deadline, Error when the hold could not be read,
// Degraded when the store's failure policy read it; Wait is how long the
// request was held. A request the upstream did not answer, or that a policy
// stopped, reports nothing under it. No policy may take the name.
const UpstreamPolicy = "upstream"

// holdName is the name the holds' store keys are made under, as a
// policy's are, so that no policy's key can be a hold's.
const holdName = "hold"

// WithTransportObserver reports to o, with Source "http-out", one Event per
// policy per request: Allowed (with Wait, how long it waited for its turn,
// and Latency, the store's time for the first decision), Denied (it would
// have waited past the request's deadline, and was not sent: reported for
// the policies that refused the last decision only, every policy when none
// was made), Error or Degraded; and one under UpstreamPolicy for the
// upstream's answer. nil reports nothing.
func WithTransportObserver(o observe.Observer) TransportOption {
	return func(t *Transport) error { t.obs = o; return nil }
}

// WithTransportErrorLog receives the errors a Transport keeps out of its
// answers: what an upstream's response says it used that cannot be read
// (a header that is not a number, bad JSON), and a settle the store
// failed. The response is never changed by them.
func WithTransportErrorLog(f func(req *http.Request, err error)) TransportOption {
	return func(t *Transport) error { t.onError = f; return nil }
}

// WithTransportKeyPrefix sets the prefix of the store keys (default
// "httplimit-out:").
func WithTransportKeyPrefix(prefix string) TransportOption {
	return func(t *Transport) error { t.prefix = prefix; return nil }
}

// Host keys an outbound request on its URL's host (with its port, if any).
func Host() KeyFunc {
	return func(r *http.Request) (string, bool) {
		if r.URL == nil || r.URL.Host == "" {
			return "", false
		}
		return strings.ToLower(r.URL.Host), true
	}
}

// ErrNoKey is returned by Transport.RoundTrip for a request that a
// non-Optional policy finds no key for.
var ErrNoKey = errors.New("httplimit: the request has no key for a policy")

// NewTransport returns a Transport that waits for policies on lim. A policy's
// nil Key is Host(); Shadow policies and counting by outcome (Count) are not
// supported outbound. The policies may be none: the Transport then only
// honours Retry-After holds.
func NewTransport(lim *sluice.Limiter, policies []Policy, opts ...TransportOption) (*Transport, error) {
	if lim == nil {
		return nil, errors.New("httplimit: NewTransport: nil Limiter")
	}
	t := &Transport{lim: lim, base: http.DefaultTransport, prefix: "httplimit-out:", maxHold: time.Hour, clock: lim.Clock()}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(t); err != nil {
			return nil, fmt.Errorf("httplimit: %w", err)
		}
	}
	check := policycore.Checker{Prefix: t.prefix, Noun: "request"}
	for _, p := range policies {
		switch {
		case p.Shadow:
			return nil, fmt.Errorf("httplimit: policy %q: shadow policies are not supported outbound", p.Name)
		case p.Count != nil:
			return nil, fmt.Errorf("httplimit: policy %q: counting by outcome (Count) is not supported outbound", p.Name)
		}
		switch p.Name {
		case UpstreamPolicy:
			return nil, fmt.Errorf("httplimit: policy %q: the name is the Transport's own (UpstreamPolicy)", p.Name)
		case holdName:
			return nil, fmt.Errorf("httplimit: policy %q: the name is the Transport's own (its holds' store keys)", p.Name)
		}
		t.leaky = t.leaky || p.Limit.Algorithm == sluice.LeakyBucket
		pol, err := newPolicy(&check, p, Host)
		if err != nil {
			return nil, err
		}
		if pol.used != nil {
			t.settles = true
			if pol.used.JSON != nil {
				pol.scan = t.scans
				t.scans++
			}
		}
		t.policies = append(t.policies, pol)
	}
	// One unit per millisecond, as many units as the longest hold.
	t.hold = sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: time.Millisecond, Burst: t.maxHold.Milliseconds()}
	return t, nil
}

// RoundTrip waits until the request's host is not held and every policy
// admits it, then sends it. When its context's deadline would pass first,
// it returns an error matching sluice.ErrDeadline at once, spending nothing
// and sending nothing. A store error is returned as it is (wrapped): the
// store's failure policy has already applied.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	host, hasHost := Host()(req)
	var held holdReport
	if hasHost {
		held = t.waitHold(req, host)
		if held.err != nil {
			t.reportUpstream(held, held.err, nil)
			closeBody(req)
			return nil, held.err
		}
	}
	var spent []policycore.Spend // what a policy with a Used settles
	if len(t.policies) > 0 {
		parts := make([]sluice.Part, 0, len(t.policies))
		var names []string // for the observer
		if t.obs != nil {
			names = make([]string, 0, len(t.policies))
		}
		var cps []policycore.Part // the parts, for their Spends
		if t.settles {
			cps = make([]policycore.Part, 0, len(t.policies))
		}
		for _, p := range t.policies {
			key, ok := p.Key(req)
			if !ok || key == "" {
				if p.Optional {
					continue
				}
				closeBody(req)
				return nil, fmt.Errorf("%w %q", ErrNoKey, p.Name)
			}
			cost := p.Cost
			if p.CostFunc != nil {
				c, err := policycore.CheckCost(p.CostFunc(req))
				if err != nil {
					t.report(p.Name, 0, observe.Error, 0, 0)
					closeBody(req)
					return nil, fmt.Errorf("httplimit: policy %q: cost: %w", p.Name, err)
				}
				cost = c
			}
			parts = append(parts, sluice.Part{Key: p.KeyPrefix + key, Limit: p.Limit, Cost: cost, Headroom: p.headroomFor(req)})
			if t.obs != nil {
				names = append(names, p.Name)
			}
			if t.settles {
				cps = append(cps, policycore.Part{Rule: &p.Rule, Key: parts[len(parts)-1].Key, Cost: cost})
			}
		}
		if len(parts) > 0 {
			var each []sluice.Result
			if t.settles {
				each = make([]sluice.Result, len(parts))
			}
			res, each, lat, wait, err := t.take(ctx, parts, each)
			if t.obs != nil {
				o := outcome(err, false, res.Degraded)
				refused := o == observe.Denied && slices.ContainsFunc(each, func(r sluice.Result) bool { return !r.Allowed })
				idx := 0
				for i, n := range names {
					if refused && each[i].Allowed {
						continue // a part that would have granted: the refusal is the others'
					}
					t.report(n, idx, o, lat, wait)
					idx++
				}
			}
			if err != nil {
				closeBody(req)
				return nil, fmt.Errorf("httplimit: waiting for the rate limit of %s: %w", req.URL.Redacted(), err)
			}
			if t.settles && !res.Degraded {
				spent = policycore.AppendSpends(nil, cps, each)
			}
		}
	}
	resp, err := t.base.RoundTrip(req)
	if err == nil && len(spent) > 0 {
		t.watch(req, resp, spent)
	}
	if err != nil || !hasHost {
		return resp, err
	}
	refused := resp.StatusCode == http.StatusTooManyRequests
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), t.clock.Now()); ok {
			refused = true
			t.setHold(req, host, min(d, t.maxHold))
		}
	}
	t.reportUpstream(held, nil, &refused)
	return resp, nil
}

// take waits until every part grants. Unless a leaky bucket's turn must be
// bounded by the deadline (which WaitAll does) or the context has ended, it
// first decides once with TakeAll, whose latency is the store's; WaitAll
// waits out a refusal, and each holds the parts' figures of its last
// decision (given, or made for the wait; nil when TakeAll admitted without
// one). wait is how long the request waited after that first decision, on
// the hold's clock (WithHoldClock: the Limiter's).
func (t *Transport) take(ctx context.Context, parts []sluice.Part, each []sluice.Result) (res sluice.Result, _ []sluice.Result, lat, wait time.Duration, err error) {
	// WaitAll reads the deadline on the Limiter's clock, and takes nothing
	// from a context that has ended: the first decision is left to it then.
	_, bounded := ctx.Deadline()
	fast := ctx.Err() == nil && !(t.leaky && bounded)
	if fast {
		start := time.Now()
		res, err = t.lim.TakeAll(ctx, parts, each)
		lat = time.Since(start)
		if err != nil {
			return res, each, lat, 0, err
		}
		if res.Allowed {
			if res.Delay > 0 { // a leaky bucket's turn, with no deadline to keep
				err = t.clock.Sleep(ctx, res.Delay)
			}
			return res, each, lat, res.Delay, err
		}
	}
	start, waitStart := time.Now(), t.clock.Now()
	if each == nil {
		each = make([]sluice.Result, len(parts))
	}
	res, err = t.lim.WaitAll(ctx, parts, each)
	if !fast { // WaitAll's time is the store's and the wait's together
		lat = time.Since(start)
	} else {
		wait = max(t.clock.Now().Sub(waitStart), 0) // on the clock the Limiter waits by
	}
	return res, each, lat, wait, err
}

// report gives the observer, if any, one policy's Event.
func (t *Transport) report(policy string, index int, o observe.Outcome, lat, wait time.Duration) {
	if t.obs != nil {
		t.obs.Observe(observe.Event{Source: ObserveSourceOutbound, Policy: policy, Outcome: o, Latency: lat, Index: index, Wait: wait})
	}
}

// reportUpstream reports the upstream's part: the hold's failure err, or
// whether it refused the request.
func (t *Transport) reportUpstream(h holdReport, err error, refused *bool) {
	t.report(UpstreamPolicy, 0, outcome(err, refused != nil && *refused, h.degraded), h.latency, h.wait)
}

// outcome is what came of a wait that ended with err (a deadline it could
// not keep is a refusal), then of an answer: refused, or made by the store's
// failure policy.
func outcome(err error, refused, degraded bool) observe.Outcome {
	switch {
	case errors.Is(err, sluice.ErrDeadline):
		return observe.Denied
	case err != nil:
		return observe.Error
	case refused:
		return observe.Denied
	case degraded:
		return observe.Degraded
	}
	return observe.Allowed
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// holdReport is what waitHold found: how long the first look at the hold
// took, how long the request was held, whether the store's failure policy
// answered, and why the request may not go (nil: it may).
type holdReport struct {
	latency, wait time.Duration
	degraded      bool
	err           error
}

// waitHold waits while host is held, bounded by the request's context.
func (t *Transport) waitHold(req *http.Request, host string) (h holdReport) {
	ctx := req.Context()
	key := policycore.KeyPrefix(t.prefix, holdName) + host
	for first := true; ; first = false {
		start := time.Now()
		look, err := t.lim.Take(ctx, key, t.hold, 0)
		if first {
			h.latency = time.Since(start)
		}
		if err != nil {
			h.err = fmt.Errorf("httplimit: reading the hold on %s: %w", host, err)
			return h
		}
		if look.Degraded || look.ResetAfter <= 0 {
			h.degraded = look.Degraded
			return h
		}
		if dl, ok := ctx.Deadline(); ok && dl.Sub(t.clock.Now()) < look.ResetAfter {
			h.err = fmt.Errorf("httplimit: %s is held for %v after its Retry-After: %w (%w)", host, look.ResetAfter, sluice.ErrDeadline, context.DeadlineExceeded)
			return h
		}
		if err := t.clock.Sleep(ctx, look.ResetAfter); err != nil {
			h.err = err
			return h
		}
		h.wait += look.ResetAfter
	}
}

// setHold tops host's hold up so that it ends d from now. A store error
// leaves the host unheld: the next request will learn the Retry-After again.
func (t *Transport) setHold(req *http.Request, host string, d time.Duration) {
	ctx := req.Context()
	key := policycore.KeyPrefix(t.prefix, holdName) + host
	look, err := t.lim.Take(ctx, key, t.hold, 0)
	if err != nil || look.Degraded {
		return
	}
	want := int64((d + time.Millisecond - 1) / time.Millisecond)
	have := int64((look.ResetAfter + time.Millisecond - 1) / time.Millisecond)
	c := min(want-have, look.Remaining)
	if c > 0 {
		_, _ = t.lim.Take(ctx, key, t.hold, c)
	}
}

// parseRetryAfter reads a Retry-After: delay-seconds or an HTTP-date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0, false
		}
		if n > int64(24*time.Hour/time.Second) {
			n = int64(24 * time.Hour / time.Second)
		}
		return time.Duration(n) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		if d := at.Sub(now); d > 0 {
			return d, true
		}
	}
	return 0, false
}
