package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policycore"
	storeapi "github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/observe"
)

// Policy is one budget a call must fit in.
type Policy struct {
	// Name names the policy in QuotaFailure violations, the rate-limit
	// metadata, Stats and Events, and in its store keys: unique within a
	// Server or Client, 1 to 64 printable ASCII characters, no '"', '\' or
	// ':' (a key is prefix + name + ":" + the call's key, so that no call's
	// key can name another policy's).
	Name string
	// Limit is the budget: rate, period, burst and algorithm.
	Limit sluice.Limit
	// Key returns the key a call is counted under; nil is PeerIP() on a
	// Server and Target() on a Client.
	Key KeyFunc
	// Cost is what each call (or message, PerMessage) spends; 0 means 1.
	// CostFunc, when set, decides instead.
	Cost int64
	// CostFunc returns what a call spends: msg is a unary call's request, a
	// message received (Server) or sent (Client) under PerMessage, and nil
	// at the start of a stream under PerCall. An error or a negative cost
	// fails the call with InvalidArgument; the error goes to WithErrorLog's
	// function only.
	CostFunc func(ctx context.Context, method string, msg any) (int64, error)
	// Shadow makes the policy count without refusing (Server only): it is
	// decided, and spends, as if enforced, in a composite of its own after
	// the enforced one; its refusals are only counted. A shadow policy
	// whose key or cost cannot be read is left out of the call.
	Shadow bool
	// Optional makes the policy not apply to a call whose key is not found
	// (a per-user budget for anonymous calls). A call that a non-Optional
	// policy finds no key for fails with InvalidArgument naming the policy,
	// and the handler (or, on a Client, the upstream) is not called.
	Optional bool
	// Stream says when the policy spends on a stream: StreamDefault (the
	// interceptor's WithStreamMode), PerCall or PerMessage. A unary call
	// spends once, whatever the mode.
	Stream StreamMode
}

// policy is a checked Policy with what its calls need.
type policy struct {
	Policy
	keyPrefix string // the store key's head: the prefix, the name, ":"
	q, w      int64  // ratelimit-policy's q and w
	perMsg    bool
	stats     counters
}

type counters struct {
	allowed, refused, degraded, errors, missing atomic.Uint64
}

// Stats holds one policy's counts since its Server or Client was made, one
// for each outcome WithObserver reports, and the calls it found no key in.
type Stats struct {
	Policy   string // the policy's name
	Shadow   bool   // a shadow policy
	Allowed  uint64 // calls or messages that went on with the policy's units spent
	Refused  uint64 // refused by it (shadow: would have been; Client: could not wait)
	Degraded uint64 // let through by the store's fail-open policy, unlimited
	Errors   uint64 // store failures, and costs unreadable or beyond capacity
	Missing  uint64 // calls with no key for the policy
}

// statsOf snapshots the counts of each group's policies in order.
func statsOf(groups ...[]*policy) []Stats {
	var out []Stats
	for _, g := range groups {
		for _, p := range g {
			c := &p.stats
			out = append(out, Stats{p.Name, p.Shadow, c.allowed.Load(), c.refused.Load(), c.degraded.Load(), c.errors.Load(), c.missing.Load()})
		}
	}
	return out
}

// checkPolicies checks ps and returns them with their defaults and figures.
func checkPolicies(ps []Policy, c *config, defaultKey KeyFunc) ([]*policy, error) {
	seen := map[string]bool{}
	out := make([]*policy, 0, len(ps))
	for i, p := range ps {
		if err := policycore.CheckName(p.Name); err != nil {
			return nil, fmt.Errorf("grpclimit: policy %d: %w", i, err)
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("grpclimit: two policies named %q", p.Name)
		}
		seen[p.Name] = true
		params, err := storeapi.Params(p.Limit)
		if err != nil {
			return nil, fmt.Errorf("grpclimit: policy %q: %w", p.Name, err)
		}
		if p.Stream > PerMessage {
			return nil, fmt.Errorf("grpclimit: policy %q: unknown stream mode %d", p.Name, p.Stream)
		}
		switch {
		case p.Cost < 0:
			return nil, fmt.Errorf("grpclimit: policy %q: negative cost %d", p.Name, p.Cost)
		case p.Cost == 0:
			p.Cost = 1
		}
		pol := &policy{Policy: p, keyPrefix: policycore.KeyPrefix(c.prefix, p.Name)}
		pol.q, pol.w = policycore.Quota(params)
		if p.CostFunc == nil && p.Cost > pol.q {
			return nil, fmt.Errorf("grpclimit: policy %q: cost %d exceeds the limit's capacity %d: no call could pass", p.Name, p.Cost, pol.q)
		}
		if pol.Key == nil {
			pol.Key = defaultKey
		}
		mode := p.Stream
		if mode == StreamDefault {
			mode = c.mode
		}
		pol.perMsg = mode == PerMessage
		out = append(out, pol)
	}
	return out, nil
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// call is one call's passage through a Server or Client. It is also the
// call's context: the parent's, with the call under callKey{}, so that key
// functions and Refund find it.
type call struct {
	context.Context
	cfg    *config
	lim    *sluice.Limiter
	client bool
	target string // a Client's ClientConn target

	mu      sync.Mutex
	charged []charge
}

type callKey struct{}

// Value is the call for callKey{}, else the parent context's value.
func (cl *call) Value(k any) any {
	if _, ok := k.(callKey); ok {
		return cl
	}
	return cl.Context.Value(k)
}

func callOf(ctx context.Context) *call {
	cl, _ := ctx.Value(callKey{}).(*call)
	return cl
}

type charge struct {
	pol            *policy
	key            string
	cost, refunded int64
	window         int64 // the window the units were spent in (sluice.Result.Window)
}

// ErrNoDecision is returned by Refund for a context that did not pass
// through a Server, or whose call spent nothing.
var ErrNoDecision = errors.New("grpclimit: no admitted call in this context")

// Refund gives up to units back to every policy the call spent on (enforced
// and shadow, each message included), never more than it spent there: for a
// handler that learns the real cost afterwards (taken 100, used 30: Refund
// 70). Only TokenBucket, GCRA, FixedWindow and AlignedWindow policies can
// give units back (Limiter.RefundTake); the others are left as they are and
// named in the error (wrapping algo.ErrNoRefund). A window policy gives
// back only while its key is still in the window the call spent in.
// ctx is the handler's context (a stream's: its Context()).
func Refund(ctx context.Context, units int64) error {
	if units < 0 {
		return fmt.Errorf("grpclimit: refund of %d units", units)
	}
	cl := callOf(ctx)
	if cl == nil {
		return ErrNoDecision
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if len(cl.charged) == 0 {
		return ErrNoDecision
	}
	var errs []error
	for i := range cl.charged {
		c := &cl.charged[i]
		n := min(units, c.cost-c.refunded)
		if n <= 0 {
			continue
		}
		if _, err := cl.lim.RefundTake(ctx, c.key, c.pol.Limit, n, sluice.Result{Window: c.window}); err != nil {
			errs = append(errs, fmt.Errorf("policy %q: %w", c.pol.Name, err))
			continue
		}
		c.refunded += n
	}
	if len(errs) > 0 {
		return fmt.Errorf("grpclimit: refund: %w", errors.Join(errs...))
	}
	return nil
}

// spend is one policy's share of a call.
type spend struct {
	pol  *policy
	key  string // the store key
	cost int64
}

// gather reads each policy's key and cost for a call. A failing status is
// returned for a non-Optional enforced policy with no key, or a cost that
// cannot be read; shadow policies are left out instead.
func gather(cl *call, method string, pols []*policy, msg any, out []spend) ([]spend, error) {
	for _, p := range pols {
		k, ok := p.Key(cl, method)
		if !ok || k == "" {
			p.stats.missing.Add(1)
			if p.Optional || p.Shadow {
				continue
			}
			return out, status.Errorf(codes.InvalidArgument, "the call carries no key for rate-limit policy %q", p.Name)
		}
		cost := p.Cost
		if p.CostFunc != nil {
			c, err := p.CostFunc(cl, method, msg)
			if err == nil && c < 0 {
				err = fmt.Errorf("negative cost %d", c)
			}
			if err != nil {
				p.stats.errors.Add(1)
				cl.logError(method, fmt.Errorf("grpclimit: policy %q: cost: %w", p.Name, err))
				if p.Shadow {
					continue
				}
				return out, status.Errorf(codes.InvalidArgument, "the call's cost under rate-limit policy %q cannot be read", p.Name)
			}
			cost = c
		}
		out = append(out, spend{pol: p, key: p.keyPrefix + k, cost: cost})
	}
	return out, nil
}

func (cl *call) logError(method string, err error) {
	if cl.cfg.onError != nil {
		cl.cfg.onError(cl.Context, method, err)
	}
}

func toParts(ss []spend) []sluice.Part {
	parts := make([]sluice.Part, len(ss))
	for i, s := range ss {
		parts[i] = sluice.Part{Key: s.key, Limit: s.pol.Limit, Cost: s.cost}
	}
	return parts
}

// charge records what the admitted spends ss cost, each in the window its
// own result each[i] names, for Refund.
func (cl *call) charge(ss []spend, each []sluice.Result) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for i, s := range ss {
		if s.cost > 0 {
			cl.charged = append(cl.charged, charge{pol: s.pol, key: s.key, cost: s.cost, window: each[i].Window})
		}
	}
}

// figures is one policy's numbers after a decision, as the rate-limit
// metadata reports them.
type figures struct {
	pol              *policy
	cost             int64
	remaining, reset int64 // r, and t in whole seconds
}

// figuresOf returns each policy's figures from its part's own result at the
// decision (sluice.Limiter.TakeEach).
func figuresOf(ss []spend, each []sluice.Result) []figures {
	out := make([]figures, len(ss))
	for i, s := range ss {
		out[i] = figures{pol: s.pol, cost: s.cost, remaining: each[i].Remaining, reset: ceilSeconds(each[i].ResetAfter)}
	}
	return out
}

// refusedOf returns the policies whose part could not grant its cost in a
// refused composite (sluice.Limiter.TakeEach).
func refusedOf(ss []spend, each []sluice.Result) []*policy {
	var out []*policy
	for i, s := range ss {
		if !each[i].Allowed {
			out = append(out, s.pol)
		}
	}
	return out
}

// record counts outcome oc of policy p in its Stats and reports it to o; idx
// is the Event's place among the Events of one store call.
func record(o observe.Observer, source string, p *policy, oc observe.Outcome, lat time.Duration, idx int) {
	switch oc {
	case observe.Allowed:
		p.stats.allowed.Add(1)
	case observe.Denied, observe.ShadowDenied:
		p.stats.refused.Add(1)
	case observe.Error:
		p.stats.errors.Add(1)
	case observe.Degraded:
		p.stats.degraded.Add(1)
	}
	if o != nil {
		o.Observe(observe.Event{Source: source, Policy: p.Name, Outcome: oc, Latency: lat, Index: idx})
	}
}

// recordAll records one outcome for every policy of ss.
func recordAll(o observe.Observer, source string, ss []spend, oc observe.Outcome, lat time.Duration) {
	for i, s := range ss {
		record(o, source, s.pol, oc, lat, i)
	}
}

// refusal is the ResourceExhausted status of a refusal by pols: RetryInfo
// with the wait (never 0) and one QuotaFailure violation per policy.
func refusal(pols []*policy, retry time.Duration, what string) error {
	retry = max(retry, time.Microsecond)
	names := ""
	qf := &errdetails.QuotaFailure{}
	for i, p := range pols {
		if i > 0 {
			names += ", "
		}
		names += strconv.Quote(p.Name)
		qf.Violations = append(qf.Violations, &errdetails.QuotaFailure_Violation{
			Subject:     p.Name,
			Description: fmt.Sprintf("rate limit %s exceeded", limitText(p.Limit)),
		})
	}
	st := status.New(codes.ResourceExhausted, fmt.Sprintf("%s refused by rate-limit policy %s; retry in %v", what, names, retry))
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)}, qf); err == nil {
		st = d
	}
	return st.Err()
}

// limitText describes a limit for a violation: "100 per 1m0s (token-bucket,
// burst 100)".
func limitText(l sluice.Limit) string {
	switch l.Algorithm {
	case sluice.TokenBucket, sluice.GCRA, sluice.LeakyBucket:
		return fmt.Sprintf("%d per %v (%s, burst %d)", l.Rate, l.Period, l.Algorithm, l.Burst)
	}
	return fmt.Sprintf("%d per %v (%s)", l.Rate, l.Period, l.Algorithm)
}

// unavailable is the status of a decision the store could not make.
func unavailable(retry time.Duration) error {
	st := status.New(codes.Unavailable, "the rate limiter is unavailable")
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)}); err == nil {
		st = d
	}
	return st.Err()
}

// storeError is the status of err, an error from the Limiter: the context's
// own end, a cost that can never pass, or an unavailable limiter. No
// internal text reaches the client.
func storeError(ctx context.Context, err error, retry time.Duration) error {
	switch {
	case errors.Is(err, sluice.ErrCostExceedsCapacity):
		return status.Error(codes.InvalidArgument, "the call's cost exceeds what a rate-limit policy can ever admit")
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return status.FromContextError(ctx.Err()).Err()
	}
	return unavailable(retry)
}

// draft11 is the ratelimit-policy and ratelimit metadata of figs, one item
// per policy, as draft-ietf-httpapi-ratelimit-headers-11 writes the HTTP
// fields: "name";q=100;w=60 and "name";r=99;t=1.
func draft11(figs []figures) metadata.MD {
	var pol, cur []byte
	for i, f := range figs {
		if i > 0 {
			pol = append(pol, ", "...)
			cur = append(cur, ", "...)
		}
		pol = policycore.AppendPolicy(pol, f.pol.Name, f.pol.q, f.pol.w)
		cur = policycore.AppendLimit(cur, f.pol.Name, f.remaining, f.reset, f.pol.q)
	}
	return metadata.MD{"ratelimit-policy": {string(pol)}, "ratelimit": {string(cur)}}
}
