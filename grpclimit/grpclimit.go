package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policycore"
	"github.com/sluice-go/sluice/observe"
)

// The Sources of the Events a Server and a Client report (WithObserver).
const (
	sourceServer = "grpc"
	sourceClient = "grpc-client"
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
	// Headroom keeps units of Limit for critical calls (priority classes,
	// headroom): a call Critical does not pick passes only while
	// Headroom units would stay after its cost
	// (a Part with Headroom: sluice.Part), so it is refused once the key's usage
	// passes its share; a critical one may use the whole limit. Both spend
	// from one budget. The rate-limit metadata a call gets is its class's:
	// q is the limit's capacity less Headroom, r what its class may still
	// spend. 0 keeps nothing; Headroom must leave at least Cost to the
	// others.
	Headroom int64
	// Critical picks the calls that may use Headroom (a health check, a
	// paying customer's calls); nil picks none.
	Critical func(ctx context.Context, method string) bool
	// Used charges what a call actually used, once its handler has
	// returned (an LLM call's tokens): a trailer the handler sets, and
	// what it charges (Charge); see Used. Cost or CostFunc is then the
	// estimate the call takes before the handler (or each message), and
	// once the handler returns the policy is settled to what was used:
	// the excess refunded (to the window it was spent in), the shortfall
	// charged, into debt up to Limit.Debt, as sluice.Limiter.Settle does. A
	// stream is settled when it ends, a client gone mid-way included, to
	// what was said until then. nil: the call spends its Cost. Server
	// only; only TokenBucket, GCRA, FixedWindow and AlignedWindow
	// policies can settle.
	Used *Used
	// Count counts only the calls whose status code it picks (failed
	// authentication: codes.Unauthenticated and codes.PermissionDenied):
	// before the handler (or each message) the policy only looks, and
	// refuses while the key could not spend Cost (it is spent, or in
	// debt: RetryInfo says when it could); once the handler returns it
	// charges Cost for each look (with a Used, what was used) when Count
	// picks the code, nothing otherwise. Calls at once may all pass the
	// look: their charges beyond the key's budget go into debt, up to
	// Limit.Debt, and the rest is forgiven. nil counts every call as it
	// comes. Server only; only TokenBucket, GCRA, FixedWindow and
	// AlignedWindow policies can count.
	Count func(code codes.Code) bool
}

// Used says where a policy reads what a call actually used, once its
// handler has returned (Policy.Used): the trailer Trailer names, and what
// the handler charges (Charge, ChargePolicy), added. The zero Used reads
// only the handler's charges. When nothing says, the call's estimate
// stands; a trailer that is not a number goes to WithErrorLog's function
// and says nothing.
type Used struct {
	// Trailer names a trailer metadata field the handler sets
	// (grpc.SetTrailer, or a stream's SetTrailer) to the units used, a
	// decimal integer ≥ 0: "x-tokens-used".
	Trailer string
}

// policy is a checked Policy: the rule both doors keep, its key and cost
// functions, and when it spends on a stream.
type policy struct {
	policycore.Rule
	Key      KeyFunc
	CostFunc func(ctx context.Context, method string, msg any) (int64, error)
	Critical func(ctx context.Context, method string) bool
	perMsg   bool
	// trailer is Used.Trailer, lower case; counts is Policy.Count.
	trailer string
	counts  func(codes.Code) bool
}

// headroomFor is what a call of method leaves for higher classes under p.
func (p *policy) headroomFor(ctx context.Context, method string) int64 {
	return p.HeadroomFor(p.Headroom == 0 || p.Critical != nil && p.Critical(ctx, method))
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
			out = append(out, Stats(p.Rule.Stats()))
		}
	}
	return out
}

// checkPolicies checks ps and returns them with their defaults and figures.
func checkPolicies(ps []Policy, c *config, defaultKey KeyFunc) ([]*policy, error) {
	check := policycore.Checker{Prefix: c.prefix, Noun: "call"}
	out := make([]*policy, 0, len(ps))
	for _, p := range ps {
		if p.Stream > PerMessage {
			return nil, fmt.Errorf("grpclimit: policy %q: unknown stream mode %d", p.Name, p.Stream)
		}
		mode := p.Stream
		if mode == StreamDefault {
			mode = c.mode
		}
		pol := &policy{Key: p.Key, CostFunc: p.CostFunc, Critical: p.Critical, perMsg: mode == PerMessage, counts: p.Count}
		pol.Rule = policycore.Rule{Name: p.Name, Limit: p.Limit, Cost: p.Cost, Headroom: p.Headroom, Shadow: p.Shadow, Optional: p.Optional,
			Settles: p.Used != nil, Counts: p.Count != nil}
		if err := check.Check(&pol.Rule, p.CostFunc != nil); err != nil {
			return nil, fmt.Errorf("grpclimit: %w", err)
		}
		if p.Used != nil {
			t, err := checkTrailer(p.Used.Trailer)
			if err != nil {
				return nil, fmt.Errorf("grpclimit: policy %q: %w", p.Name, err)
			}
			pol.trailer = t
		}
		if pol.Key == nil {
			pol.Key = defaultKey
		}
		out = append(out, pol)
	}
	return out, nil
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

	// mu guards spent, which a stream's messages add to while its
	// handler may call Refund or Charge; settled is set once the handler
	// returned.
	mu      sync.Mutex
	spent   []policycore.Spend
	settled bool
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

// ErrNoDecision is returned by Refund and Charge for a context that did not
// pass through a Server, or whose call spent nothing (Refund) or has no
// policy with a Used (Charge).
var ErrNoDecision = errors.New("grpclimit: no admitted call in this context")

// Refund gives up to units back to every policy the call spent on (enforced
// and shadow, each message included), never more than it spent there: for a
// handler that learns the real cost afterwards (taken 100, used 30: Refund
// 70). Only TokenBucket, GCRA, FixedWindow and AlignedWindow policies can
// give units back (Limiter.Refund); the others are left as they are and
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
	found, err := policycore.Refund(ctx, cl.lim, cl.spent, "", units)
	if !found {
		return ErrNoDecision
	}
	if err != nil {
		return fmt.Errorf("grpclimit: refund: %w", err)
	}
	return nil
}

// gather reads each policy's key and cost for a call. A failing status is
// returned for a non-Optional enforced policy with no key, or a cost that
// cannot be read; shadow policies are left out instead.
func gather(cl *call, method string, pols []*policy, msg any, out []policycore.Part) ([]policycore.Part, error) {
	for _, p := range pols {
		k, ok := p.Key(cl, method)
		if !ok || k == "" {
			if p.MissingKey() {
				continue
			}
			return out, status.Errorf(codes.InvalidArgument, "the call carries no key for rate-limit policy %q", p.Name)
		}
		cost := p.Cost
		if p.CostFunc != nil {
			c, err := policycore.CheckCost(p.CostFunc(cl, method, msg))
			if err != nil {
				p.Count(observe.Error)
				cl.logError(method, fmt.Errorf("grpclimit: policy %q: cost: %w", p.Name, err))
				if p.Shadow {
					continue
				}
				return out, status.Errorf(codes.InvalidArgument, "the call's cost under rate-limit policy %q cannot be read", p.Name)
			}
			cost = c
		}
		out = append(out, policycore.Part{Rule: &p.Rule, Key: p.KeyPrefix + k, Cost: cost, Headroom: p.headroomFor(cl, method)})
	}
	return out, nil
}

func (cl *call) logError(method string, err error) {
	if cl.cfg.onError != nil {
		cl.cfg.onError(cl.Context, method, err)
	}
}

// spend records what the admitted parts ps cost, each in the window its
// own result each[i] names, for Refund.
func (cl *call) spend(ps []policycore.Part, each []sluice.Result) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.spent = policycore.AppendSpends(cl.spent, ps, each)
}

// figures is one policy's numbers after a decision, as the rate-limit
// metadata reports them.
type figures struct {
	rule             *policycore.Rule
	cost             int64
	quota            int64 // q: the call's class's (policycore.Part.Quota)
	remaining, reset int64 // r, and t in whole seconds
}

// figuresOf returns each policy's figures from its part's own result at the
// decision (sluice.Limiter.TakeAll).
func figuresOf(ps []policycore.Part, each []sluice.Result) []figures {
	out := make([]figures, len(ps))
	for i, p := range ps {
		out[i] = figures{rule: p.Rule, cost: p.Cost, quota: p.Quota(), remaining: each[i].Remaining, reset: policycore.Seconds(each[i].ResetAfter)}
	}
	return out
}

// refusal is the ResourceExhausted status of a refusal by pols: RetryInfo
// with the wait (never 0) and one QuotaFailure violation per policy.
func refusal(pols []*policycore.Rule, retry time.Duration, what string) error {
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
		pol = policycore.AppendPolicy(pol, f.rule.Name, f.quota, f.rule.W)
		cur = policycore.AppendLimit(cur, f.rule.Name, f.remaining, f.reset, f.quota)
	}
	return metadata.MD{"ratelimit-policy": {string(pol)}, "ratelimit": {string(cur)}}
}
