package httplimit

import (
	"context"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policycore"
)

// Decision is what the Middleware decided for a request, for a deny handler,
// a missing-key handler or the next handler: DecisionFrom returns it.
type Decision struct {
	// Allowed reports whether the enforced policies admitted the request.
	Allowed bool
	// Refused names the enforced policies that refused it.
	Refused []string
	// ShadowRefused names the shadow policies that would have refused it.
	ShadowRefused []string
	// Missing names the policy whose key the request does not carry.
	Missing string
	// Result is the enforced composite's result.
	Result sluice.Result
	// Policies holds each policy's numbers, as the headers report them
	// (filled when headers are sent or several policies refused).
	Policies []PolicyResult
}

// PolicyResult is one policy's numbers after a decision.
type PolicyResult struct {
	// Name is the policy's name.
	Name string
	// Shadow reports a shadow policy.
	Shadow bool
	// Key is the request's key under the policy (without the store prefix).
	Key string
	// Cost is what the request spends, or would have.
	Cost int64
	// Quota and Window are RateLimit-Policy's q and w (whole seconds). A
	// request of a lower class (Policy.Headroom) has its class's q: the
	// limit's capacity less the headroom.
	Quota, Window int64
	// Remaining is RateLimit's r, and Reset its t (whole seconds).
	Remaining, Reset int64
}

// DecisionFrom returns the decision of the Middleware the request passed
// through, from its context.
func DecisionFrom(ctx context.Context) (*Decision, bool) {
	st := stateOf(ctx)
	if st == nil {
		return nil, false
	}
	return &st.decision().Decision, true
}

// result is p's numbers from a result's Remaining and ResetAfter.
func result(p *policycore.Part, remaining, resetAfter int64) PolicyResult {
	return PolicyResult{Name: p.Rule.Name, Shadow: p.Rule.Shadow, Key: p.RequestKey(), Cost: p.Cost, Quota: p.Quota(), Window: p.Rule.W,
		Remaining: remaining, Reset: policycore.Seconds(time.Duration(resetAfter))}
}

// numbers appends each part's figures, from its own result at the
// decision (each[i] is ps[i]'s), to out.
func numbers(out []PolicyResult, ps []policycore.Part, each []sluice.Result) []PolicyResult {
	for i := range ps {
		out = append(out, result(&ps[i], each[i].Remaining, int64(each[i].ResetAfter)))
	}
	return out
}
