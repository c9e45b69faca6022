package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policycore"
	"github.com/sluice-go/sluice/observe"
)

// Policy is one budget a request must fit in.
type Policy struct {
	// Name names the policy in the RateLimit headers, problem bodies and
	// Stats, and in its store keys: unique within a Middleware, 1 to 64
	// printable ASCII characters, no '"', '\' or ':' (a key is prefix +
	// name + ":" + the request's key, so that no request's key can name
	// another policy's).
	Name string
	// Limit is the budget: rate, period, burst and algorithm.
	Limit sluice.Limit
	// Key returns the key a request is counted under; nil is ClientIP().
	Key KeyFunc
	// Cost is what each request spends; 0 means 1. CostFunc, when set,
	// decides instead.
	Cost int64
	// CostFunc returns what r spends (a body's size, an LLM request's
	// tokens). An error or a negative cost answers 400 Bad Request; the
	// error goes to WithErrorLog's function only.
	CostFunc func(r *http.Request) (int64, error)
	// Shadow makes the policy count without refusing: it is decided (and
	// spends) as if enforced, its refusals only counted in Stats. Shadow
	// policies are decided for every request that is not skipped, as a
	// composite of their own after the enforced one, whatever its outcome.
	Shadow bool
	// Optional makes the policy not apply to a request whose key is not
	// found (a per-user budget for anonymous requests); otherwise such a
	// request is answered by WithMissingKey's handler. A shadow policy is
	// always optional, and a shadow policy's cost that cannot be read
	// leaves it out (counted in Stats.Errors): it never answers.
	Optional bool
	// Headroom keeps units of Limit for critical requests (priority
	// classes, headroom): a request Critical does not pick passes
	// only while Headroom units would stay after its cost
	// (a Part with Headroom: sluice.Part), so it is refused once the key's usage
	// passes its share; a critical one may use the whole limit. Both spend
	// from one budget. Its RateLimit fields are its class's: q is the
	// limit's capacity less Headroom, r what its class may still spend. 0
	// keeps nothing; Headroom must leave at least Cost to the others.
	Headroom int64
	// Critical picks the requests that may use Headroom (a health check, a
	// paying customer's checkout); nil picks none.
	Critical func(r *http.Request) bool
	// Used charges what a request actually used, once its response is
	// known (an LLM call's tokens): a response header or trailer, a JSON
	// field of its body, a function of the response, and what the
	// handler charges (Charge); see Used. Cost or CostFunc is then the
	// estimate the request takes before the handler, and once the handler
	// returns the policy is settled to what was used: the excess refunded
	// (to the window it was spent in), the shortfall charged, into debt
	// up to Limit.Debt, as sluice.Limiter.Settle does. A streamed response is
	// settled when its handler returns. nil: the request spends its Cost.
	// Only TokenBucket, GCRA, FixedWindow and AlignedWindow policies can
	// settle.
	Used *Used
	// Count counts only the requests whose response status it picks
	// (failed logins: 401 and 403; errors: 500 and up): before the
	// handler the policy only looks, and refuses while the key could not
	// spend Cost (it is spent, or in debt: Retry-After is when it could);
	// once the handler returns it charges Cost (with a Used, what was
	// used) when Count picks the status, nothing otherwise. Requests at
	// once may all pass the look: their charges beyond the key's budget
	// go into debt, up to Limit.Debt, and the rest is forgiven. nil counts
	// every request as it comes. Only TokenBucket, GCRA, FixedWindow and
	// AlignedWindow policies can count.
	Count func(status int) bool
}

// Middleware limits the requests of the handlers it wraps. It is safe for
// concurrent use.
type Middleware struct {
	lim               *sluice.Limiter
	enforced, shadows []*policy
	ip                policycore.ClientIP
	status            int
	deny, missing     http.Handler
	headers           []HeaderStyle
	shadowHeaders     bool
	skip              func(*http.Request) bool
	unavailable       time.Duration
	onError           func(*http.Request, error)
	obs               observe.Observer
	prefix            string
	clock             sluice.Clock
	// bare: WithoutDecisionContext; userFuncs: a skip predicate, a key or
	// a cost function may read the request's context.
	bare, userFuncs bool
	// policyHeader is RateLimit-Policy's value when the headers name the
	// enforced policies alone, in order (writeHeaders).
	policyHeader string
	// settles: a policy settles or counts (Used, Count), so that each
	// admitted request's response is watched (usedWriter); scans is how
	// many read Used.JSON.
	settles bool
	scans   int
}

// policy is a checked Policy: the rule both doors keep, and its key and
// cost functions.
type policy struct {
	policycore.Rule
	Key      KeyFunc
	CostFunc func(r *http.Request) (int64, error)
	Critical func(r *http.Request) bool
	// clientIP: Key was nil, so the key is the client's address group,
	// which parts appends straight to KeyPrefix (ClientIP() would make a
	// string of it first, and look the Middleware up in the context).
	clientIP bool
	used     *Used // a copy of Policy.Used, checked
	// usedHeader is Used.Header's canonical name; scan, the index of
	// Used.JSON's usage among a request's (usedWriter.scans), else -1.
	usedHeader string
	scan       int
	counts     func(status int) bool
}

// New returns a Middleware that decides policies on lim. The error says
// which policy or option is wrong.
func New(lim *sluice.Limiter, policies []Policy, opts ...Option) (*Middleware, error) {
	if lim == nil {
		return nil, errors.New("httplimit: New: nil Limiter")
	}
	if len(policies) == 0 {
		return nil, errors.New("httplimit: New: no policy")
	}
	m := &Middleware{
		lim:         lim,
		status:      http.StatusTooManyRequests,
		headers:     []HeaderStyle{HeadersDraft11},
		unavailable: time.Second,
		prefix:      "httplimit:",
		clock:       lim.Clock(),
	}
	_ = m.ip.SetField("X-Forwarded-For") // a valid name: no error
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(m); err != nil {
			return nil, fmt.Errorf("httplimit: %w", err)
		}
	}
	check := policycore.Checker{Prefix: m.prefix, Noun: "request"}
	for _, p := range policies {
		pol, err := newPolicy(&check, p, ClientIP)
		if err != nil {
			return nil, err
		}
		if p.Shadow {
			m.shadows = append(m.shadows, pol)
		} else {
			m.enforced = append(m.enforced, pol)
		}
		m.userFuncs = m.userFuncs || !pol.clientIP || p.CostFunc != nil || p.Critical != nil
		m.settles = m.settles || pol.used != nil || pol.counts != nil
		if pol.used != nil && pol.used.JSON != nil {
			pol.scan = m.scans
			m.scans++
		}
	}
	m.userFuncs = m.userFuncs || m.skip != nil
	var hb []byte
	for i, p := range m.enforced {
		if i > 0 {
			hb = append(hb, ", "...)
		}
		hb = policycore.AppendPolicy(hb, p.Name, p.Q, p.W)
	}
	m.policyHeader = string(hb)
	return m, nil
}

// newPolicy checks p, the next of the policies check reads, and returns it
// with its defaults: cost 1, the key defaultKey().
func newPolicy(check *policycore.Checker, p Policy, defaultKey func() KeyFunc) (*policy, error) {
	pol := &policy{
		Rule: policycore.Rule{Name: p.Name, Limit: p.Limit, Cost: p.Cost, Headroom: p.Headroom, Shadow: p.Shadow, Optional: p.Optional,
			Settles: p.Used != nil, Counts: p.Count != nil},
		Key:      p.Key,
		CostFunc: p.CostFunc,
		Critical: p.Critical,
		clientIP: p.Key == nil,
		counts:   p.Count,
		scan:     -1,
	}
	if err := check.Check(&pol.Rule, p.CostFunc != nil); err != nil {
		return nil, fmt.Errorf("httplimit: %w", err)
	}
	if p.Used != nil {
		u := *p.Used
		u.JSON = slices.Clone(u.JSON)
		name, err := checkUsed(&u)
		if err != nil {
			return nil, fmt.Errorf("httplimit: policy %q: %w", p.Name, err)
		}
		pol.used, pol.usedHeader = &u, name
	}
	if pol.Key == nil {
		pol.Key = defaultKey()
	}
	return pol, nil
}

// headroomFor is what r leaves for higher classes under p.
func (p *policy) headroomFor(r *http.Request) int64 {
	return p.HeadroomFor(p.Headroom == 0 || p.Critical != nil && p.Critical(r))
}

// Stats is what one policy decided since the Middleware was made.
type Stats struct {
	// Policy is the policy's name.
	Policy string
	// Shadow reports a shadow policy.
	Shadow bool
	// Allowed counts the requests the policy admitted (for an enforced
	// policy: the composite admitted them).
	Allowed uint64
	// Refused counts the requests the policy refused (a shadow policy: would
	// have refused).
	Refused uint64
	// Degraded counts the requests admitted by the store's failure policy
	// (fail open) rather than by the shared state.
	Degraded uint64
	// Errors counts the decisions the store could not make (answered 503
	// for an enforced policy) and costs that could not be read or could
	// never pass.
	Errors uint64
	// Missing counts the requests that carried no key for the policy.
	Missing uint64
}

// Stats returns each policy's counts, enforced policies first.
func (m *Middleware) Stats() []Stats {
	out := make([]Stats, 0, len(m.enforced)+len(m.shadows))
	for _, ps := range [][]*policy{m.enforced, m.shadows} {
		for _, p := range ps {
			out = append(out, Stats(p.Rule.Stats()))
		}
	}
	return out
}

// Handler returns next limited by m's policies. A nil next answers every
// request 500 with a problem body that says the handler is missing.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	if next == nil {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeProblem(w, http.StatusInternalServerError, "about:blank", "Internal Server Error", "httplimit: Handler was given no handler to limit", nil)
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serve(w, r, next)
	})
}
