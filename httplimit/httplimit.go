// Package httplimit is HTTP middleware over a *sluice.Limiter: per-client,
// per-user, per-tenant and per-route budgets for a net/http server, with the
// answers clients can act on (429, Retry-After, the IETF RateLimit headers,
// an RFC 9457 problem body).
//
// It imports the standard library and sluice only.
//
//	lim := sluice.New(memstore.New())
//	m, err := httplimit.New(lim, []httplimit.Policy{
//		{Name: "per-ip", Limit: sluice.PerMinute(100)},                                  // keyed on the client IP
//		{Name: "per-user", Limit: sluice.PerSecond(10).WithBurst(50), Key: httplimit.Header("X-User")},
//	})
//	if err != nil { ... }
//	http.ListenAndServe(":8080", m.Handler(mux))
//
// # Policies and composites
//
// A Middleware's enforced policies are decided as one composite
// (sluice.Limiter.TakeEach): a request passes only if every policy grants,
// and a refusal spends nothing on any of them. The answer names the
// policies that refused. Shadow policies (Policy.Shadow) are decided as a
// composite of their own, after the enforced one, whatever its outcome: they
// spend as they would if enforced, their refusals are only counted (Stats),
// and they can never make an enforced policy refuse. Per-route policies: wrap
// each route's handler in a Middleware of its own, with any router.
//
// # Keys
//
// A policy's key is the client's IP by default (ClientIP): the connection's
// peer address. Proxies are believed only when trusted (WithTrustedProxies):
// then X-Forwarded-For (or Forwarded, or a single-value header such as
// CF-Connecting-IP: WithProxyHeader) is read, a list walked from the right,
// skipping trusted hops. IPv6 clients are grouped by prefix (default /64,
// WithIPv6Prefix); an IPv4-mapped IPv6 address is read as IPv4. Header,
// FromContext, Route, MuxRoute, Static and Join build other keys. Each
// policy's keys live under "httplimit:" + its name + ":" in the store
// (WithKeyPrefix).
//
// # Outbound
//
// Transport is the other direction: an http.RoundTripper that waits for its
// policies before each call, and holds an upstream's host after a 429 or 503
// with Retry-After for every caller that shares the store.
//
// A request whose key is not found (no peer address, a missing header) is
// never counted under a shared empty key: an Optional policy does not apply
// to it; otherwise it is answered 400 Bad Request with a problem body naming
// the policy (or by WithMissingKey's handler), and the next handler is not
// called.
//
// # Answers
//
// A refusal is answered 429 (WithStatus) with a Retry-After in whole
// seconds, rounded up and at least 1, and an application/problem+json body
// of type https://iana.org/assignments/http-problem-types#quota-exceeded
// whose "violated-policies" lists the refusing policies; WithDenyHandler
// replaces the body (the headers are set before it runs; DecisionFrom tells
// it why). A cost that could never pass, even on a fresh key, is answered 413
// Content Too Large. An admitted leaky-bucket request waits out its Delay
// before the next handler runs; when the request's context ends first (or
// its deadline comes before the turn, which is answered at once) the units
// stay spent, the next handler is not called and the answer is 503.
//
// # Headers
//
// With HeadersDraft11 (the default) every answer carries one item per policy
// in RateLimit-Policy and RateLimit, as draft-ietf-httpapi-ratelimit-headers-11
// defines them:
//
//	RateLimit-Policy: "per-ip";q=100;w=60, "per-user";q=50;w=5
//	RateLimit: "per-ip";r=99;t=1, "per-user";r=49;t=1
//
// q is the largest cost that can pass at once on a fresh key, and w the time
// (whole seconds, rounded up) in which a budget spent to nothing comes back
// to q with no traffic; r is the units that could still pass now (after this
// request), and t the seconds (rounded up) until the budget is back to q
// with no other traffic. Per algorithm:
//
//   - TokenBucket, GCRA: q is the burst (the bucket's capacity) and w the
//     time to refill it from empty (burst·period/rate); r is the whole tokens
//     left and t the time until the bucket is full again.
//   - LeakyBucket: q is burst+1 (the queue's places and the one leaving), w
//     the time a full queue takes to drain ((burst+1)·period/rate); r is the
//     free places and t the time until the queue is empty.
//   - FixedWindow, AlignedWindow: q is the rate and w the window; r is what
//     the window has left and t the time until it ends (0 for an aligned
//     window nothing has spent in).
//   - SlidingWindow: q is the rate and w the period; r is rate minus the
//     weighted estimate, and t the time until both windows' counts are gone.
//   - SlidingLog: q is the rate and w the trailing period; r is rate minus the
//     units in the log, and t the time until the newest entry leaves it (the
//     oldest leaves earlier, giving some back before t).
//
// The syntax was checked against draft-11's own text (sections 3 and 4):
// each item is a String naming the policy (a '%' in the name is sent as
// %25, as in an RFC 9651 Display String, so that the name percent-decodes
// back); q (required) and w on
// RateLimit-Policy, r (required) and t on RateLimit, all non-negative
// Integers, w at least 1, r never above q. A figure beyond an RFC 9651
// Integer (15 digits) is sent as the largest one. The draft's optional qu (the quota unit, by
// default "requests") and pk (a partition key, a Byte Sequence) are not
// sent: a policy's cost need not count one of the registered units, and the
// key is the server's business.
//
// Each policy's r and t are its own at the decision's instant: the
// composite is decided with sluice.Limiter.TakeEach, which reports every
// part's figures from the same store call (one script on Redis). A refusal
// by a composite of several policies names exactly the policies that could
// not grant the request's cost.
//
// HeadersXRateLimit adds the legacy X-RateLimit-Limit, X-RateLimit-Remaining
// and X-RateLimit-Reset (seconds from now, rounded up) of the policy with
// the fewest units left. WithHeaders chooses the styles (none: no headers);
// a later revision of the draft will be one more HeaderStyle.
//
// # Store failures
//
// The store's failure policy decides. A store that fails open admits the
// request with Result.Degraded: it is served without rate-limit headers and
// counted (Stats.Degraded). A store that fails closed returns
// sluice.ErrStoreUnavailable: the answer is 503 with Retry-After (1s,
// WithUnavailableRetryAfter) and a problem body that says no more than that
// the limiter is unavailable; the error goes to WithErrorLog's function,
// never to the client. Any other store error is answered the same way.
//
// # Metrics
//
// WithObserver (and WithTransportObserver for a Transport) reports each
// policy's outcome of each request to an observe.Observer, with the store's
// latency; package promobserve makes Prometheus metrics of them. With no
// observer the middleware does no timing and no reporting.
//
// # Refunds
//
// A handler that learns the request's real cost afterwards gives the excess
// back with Refund(r.Context(), units) (not under the sliding algorithms or the leaky bucket).
// The decision reaches the next handler in a copy of its request whose
// context carries it; a Middleware whose handlers never call Refund,
// RefundPolicy, DecisionFrom or ClientAddr can leave the request uncopied
// with WithoutDecisionContext.
package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/internal/policycore"
	storeapi "github.com/sluice-go/sluice/internal/storelink"
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
}

// HeaderStyle names a set of rate-limit response headers.
type HeaderStyle uint8

const (
	// HeadersDraft11 sends RateLimit-Policy and RateLimit as
	// draft-ietf-httpapi-ratelimit-headers-11 defines them.
	HeadersDraft11 HeaderStyle = iota + 1
	// HeadersXRateLimit sends the legacy X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset (seconds from now).
	HeadersXRateLimit
)

// ProblemType is the RFC 9457 problem type of a refusal.
const ProblemType = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// Option configures a Middleware.
type Option func(*Middleware) error

// WithStatus sets the status code of a refusal (default 429 Too Many
// Requests); it must be 4xx or 5xx.
func WithStatus(code int) Option {
	return func(m *Middleware) error {
		if code < 400 || code > 599 {
			return fmt.Errorf("WithStatus(%d): not a 4xx or 5xx status", code)
		}
		m.status = code
		return nil
	}
}

// WithDenyHandler answers refusals with h instead of the problem body. The
// Retry-After and rate-limit headers are set when h runs, and the status is
// WithStatus's unless h calls WriteHeader with another;
// DecisionFrom(r.Context()) tells it which policies refused.
func WithDenyHandler(h http.Handler) Option {
	return func(m *Middleware) error {
		if h == nil {
			return errors.New("WithDenyHandler(nil)")
		}
		m.deny = h
		return nil
	}
}

// WithMissingKey answers a request whose key a non-Optional policy cannot
// find with h (default: 400 Bad Request with a problem body naming the
// policy). DecisionFrom(r.Context()).Missing names the policy.
func WithMissingKey(h http.Handler) Option {
	return func(m *Middleware) error {
		if h == nil {
			return errors.New("WithMissingKey(nil)")
		}
		m.missing = h
		return nil
	}
}

// WithHeaders chooses the rate-limit headers sent (default HeadersDraft11);
// with no style, none are.
func WithHeaders(styles ...HeaderStyle) Option {
	return func(m *Middleware) error {
		m.headers = m.headers[:0]
		for _, s := range styles {
			if s != HeadersDraft11 && s != HeadersXRateLimit {
				return fmt.Errorf("WithHeaders: unknown style %d", s)
			}
			m.headers = append(m.headers, s)
		}
		return nil
	}
}

// WithShadowHeaders includes the shadow policies in the rate-limit headers
// (default: only the enforced ones are sent).
func WithShadowHeaders() Option {
	return func(m *Middleware) error { m.shadowHeaders = true; return nil }
}

// WithSkip lets the requests skip reports true pass unlimited and uncounted:
// health checks, allow-listed networks (SkipNetworks).
func WithSkip(skip func(r *http.Request) bool) Option {
	return func(m *Middleware) error {
		if skip == nil {
			return errors.New("WithSkip(nil)")
		}
		m.skip = skip
		return nil
	}
}

// SkipNetworks is a skip predicate for WithSkip: true for a request whose
// client address (ClientAddr) is in one of the prefixes.
func SkipNetworks(prefixes ...netip.Prefix) func(r *http.Request) bool {
	ps := make([]netip.Prefix, 0, len(prefixes))
	for _, p := range prefixes {
		if p.IsValid() {
			ps = append(ps, p.Masked())
		}
	}
	return func(r *http.Request) bool {
		a, ok := ClientAddr(r)
		if !ok {
			return false
		}
		for _, p := range ps {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
}

// WithTrustedProxies names the proxies whose forwarding header is believed:
// a request whose peer address is in one of the prefixes is keyed on the
// client the header names (see WithProxyHeader). IPv4-mapped prefixes are
// read as IPv4.
func WithTrustedProxies(prefixes ...netip.Prefix) Option {
	return func(m *Middleware) error {
		for _, p := range prefixes {
			if !p.IsValid() {
				return fmt.Errorf("WithTrustedProxies: invalid prefix %v", p)
			}
			if p.Addr().Is4In6() && p.Bits() >= 96 {
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			}
			m.ip.trusted = append(m.ip.trusted, p.Masked())
		}
		return nil
	}
}

// WithProxyHeader names the header trusted proxies set: "X-Forwarded-For"
// (the default) or "Forwarded" (RFC 7239), walked from the right, or a
// single-value header ("CF-Connecting-IP", "X-Real-IP") read as it is. Only
// one header is read, so that a client cannot slip an address into the one
// its proxy does not set.
func WithProxyHeader(name string) Option {
	return func(m *Middleware) error {
		name = strings.TrimSpace(name)
		if name == "" || strings.ContainsAny(name, " \t:\r\n") {
			return fmt.Errorf("WithProxyHeader(%q): not a header name", name)
		}
		m.ip.header = http.CanonicalHeaderKey(name)
		return nil
	}
}

// WithIPv6Prefix sets how IPv6 clients are grouped: every address of one
// /bits prefix shares a budget (default 64; 128 keys each address alone).
func WithIPv6Prefix(bits int) Option {
	return func(m *Middleware) error {
		if bits < 1 || bits > 128 {
			return fmt.Errorf("WithIPv6Prefix(%d): not in 1..128", bits)
		}
		m.ip.v6bits = bits
		return nil
	}
}

// WithUnavailableRetryAfter sets the Retry-After of the 503 answered when the
// store fails closed (default 1s; rounded up to whole seconds).
func WithUnavailableRetryAfter(d time.Duration) Option {
	return func(m *Middleware) error {
		if d <= 0 {
			return fmt.Errorf("WithUnavailableRetryAfter(%v): not positive", d)
		}
		m.unavailable = d
		return nil
	}
}

// WithErrorLog receives the errors kept out of responses: store failures, a
// CostFunc's error, a cost that exceeds capacity.
func WithErrorLog(f func(r *http.Request, err error)) Option {
	return func(m *Middleware) error { m.onError = f; return nil }
}

// WithClock sets the clock an admitted leaky-bucket request sleeps out its
// Delay on (default the system clock); tests pass one that does not sleep.
func WithClock(c sluice.Clock) Option {
	return func(m *Middleware) error {
		if c == nil {
			return errors.New("WithClock(nil)")
		}
		m.clock = c
		return nil
	}
}

// WithObserver reports every policy's outcome of every request that reaches
// the store to o, with Source "http": Allowed, Denied (the policies that
// refused a request), ShadowDenied, Error (the store could not decide, or a
// cost could not be read) or Degraded (the store's failure policy admitted
// it), each with the latency of its composite's store call; an admitted
// leaky-bucket request's Event carries its Delay as Wait. A policy that
// granted its part of a composite another refused reports nothing, so the
// counts match Stats. Skipped requests and requests without a key report
// nothing. o is called on the request's path; nil reports nothing. Package
// promobserve makes Prometheus metrics of the Events.
func WithObserver(o observe.Observer) Option {
	return func(m *Middleware) error { m.obs = o; return nil }
}

// The Sources of the Events a Middleware (WithObserver) and a Transport
// (WithTransportObserver) report.
const (
	ObserveSource         = "http"
	ObserveSourceOutbound = "http-out"
)

// WithoutDecisionContext hands the next handler the request as it came, with
// no decision in its context, which saves copying the request (the copy
// that carries the decision is most of what an admitted request costs the
// middleware beyond the store's decision). The next handler then cannot
// call Refund or RefundPolicy (they return ErrNoDecision) or DecisionFrom
// (false), and its ClientAddr reads the peer address without the trusted
// proxies. The deny handler, the missing-key handler, WithErrorLog's function,
// the skip predicate and the policies' key and cost functions still get the
// request with its decision.
func WithoutDecisionContext() Option {
	return func(m *Middleware) error { m.bare = true; return nil }
}

// WithKeyPrefix sets the prefix of the store keys (default "httplimit:"): a
// policy's keys are prefix + name + ":" + key.
func WithKeyPrefix(prefix string) Option {
	return func(m *Middleware) error { m.prefix = prefix; return nil }
}

// Middleware limits the requests of the handlers it wraps. It is safe for
// concurrent use.
type Middleware struct {
	lim               *sluice.Limiter
	enforced, shadows []*policy
	ip                ipConfig
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
}

type policy struct {
	Policy
	q, w  int64 // RateLimit-Policy's q and w
	stats counters
	// keyPrefix is the store key's part before the request's key: the
	// Middleware's prefix, the name and ":".
	keyPrefix string
	// clientIP: Key was nil, so the key is the client's address group,
	// which parts appends straight to keyPrefix (ClientIP() would make a
	// string of it first, and look the Middleware up in the context).
	clientIP bool
}

type counters struct {
	allowed, refused, degraded, errors, missing atomic.Uint64
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
		ip:          ipConfig{v6bits: 64},
		status:      http.StatusTooManyRequests,
		headers:     []HeaderStyle{HeadersDraft11},
		unavailable: time.Second,
		prefix:      "httplimit:",
		clock:       lim.Clock(),
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(m); err != nil {
			return nil, fmt.Errorf("httplimit: %w", err)
		}
	}
	seen := map[string]bool{}
	for i, p := range policies {
		clientIP := p.Key == nil
		p, params, err := checkPolicy(i, p, seen, ClientIP)
		if err != nil {
			return nil, err
		}
		pol := &policy{Policy: p, keyPrefix: policycore.KeyPrefix(m.prefix, p.Name), clientIP: clientIP}
		pol.q, pol.w = policycore.Quota(params)
		if p.Shadow {
			m.shadows = append(m.shadows, pol)
		} else {
			m.enforced = append(m.enforced, pol)
		}
		m.userFuncs = m.userFuncs || !clientIP || p.CostFunc != nil
	}
	m.userFuncs = m.userFuncs || m.skip != nil
	var hb []byte
	for i, p := range m.enforced {
		if i > 0 {
			hb = append(hb, ", "...)
		}
		hb = policycore.AppendPolicy(hb, p.Name, p.q, p.w)
	}
	m.policyHeader = string(hb)
	return m, nil
}

// checkPolicy checks the i-th policy p, whose name must not be in seen
// (it adds it), and returns it with its defaults (cost 1, the key
// defaultKey()) and its limit's params.
func checkPolicy(i int, p Policy, seen map[string]bool, defaultKey func() KeyFunc) (Policy, algo.Params, error) {
	if err := policycore.CheckName(p.Name); err != nil {
		return p, algo.Params{}, fmt.Errorf("httplimit: policy %d: %w", i, err)
	}
	if seen[p.Name] {
		return p, algo.Params{}, fmt.Errorf("httplimit: two policies named %q", p.Name)
	}
	seen[p.Name] = true
	params, err := storeapi.Params(p.Limit)
	if err != nil {
		return p, params, fmt.Errorf("httplimit: policy %q: %w", p.Name, err)
	}
	if p.Cost < 0 {
		return p, params, fmt.Errorf("httplimit: policy %q: negative cost %d", p.Name, p.Cost)
	}
	if p.Cost == 0 {
		p.Cost = 1
	}
	if p.CostFunc == nil && p.Cost > params.Capacity() {
		return p, params, fmt.Errorf("httplimit: policy %q: cost %d exceeds the limit's capacity %d: no request could pass", p.Name, p.Cost, params.Capacity())
	}
	if p.Key == nil {
		p.Key = defaultKey()
	}
	return p, params, nil
}

func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a-1)/b + 1
}

// seconds rounds d up to whole seconds.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return ceilDiv(int64(d), int64(time.Second))
}

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
	// Quota and Window are RateLimit-Policy's q and w (whole seconds).
	Quota, Window int64
	// Remaining is RateLimit's r, and Reset its t (whole seconds).
	Remaining, Reset int64
}

type stateKey struct{}

// state is one request's passage through a Middleware. It is also the
// request's context: the parent's, with the state under stateKey{}. That
// saves context.WithValue's allocation. Its bytes are most of what the
// middleware allocates, and the garbage collector runs in proportion to
// them, so that it holds what an admitted request under one policy needs
// and no more: that request's Decision is made only if DecisionFrom or
// Refund asks for it (from one and the figures below), with no lock (made
// twice at once, one is kept), and the copy of the request the next
// handler gets lives in the same allocation (stateReq).
type state struct {
	// in is the request as it came: its context is st's parent.
	in *http.Request
	m  *Middleware
	// req is the copy of the request that carries the state (stateReq's),
	// nil when serve needs none (WithoutDecisionContext).
	req *http.Request
	// dec is the decision and what the request spent, nil until one of
	// serve's slower paths, DecisionFrom or Refund makes it.
	dec atomic.Pointer[decision]
	// one is set when the request was admitted at once by its one enforced
	// policy and no shadow policy applied: dec is made from it and the
	// result's figures.
	one                           part
	remaining, resetAfter, window int64
	// headerVals backs RateLimit-Policy's and RateLimit's values
	// (writeHeaders).
	headerVals [2]string
}

// decision is a Decision and what the request spent, with room for two
// policies' numbers and charges: one allocation for them all.
type decision struct {
	Decision
	charged   []charge
	resultBuf [2]PolicyResult
	chargeBuf [2]charge
}

// newDecision returns a decision whose slices start in its buffers.
func newDecision() *decision {
	d := new(decision)
	d.charged = d.chargeBuf[:0]
	return d
}

// stateReq is a state and the request the next handler gets, which carries
// it: one allocation for both.
type stateReq struct {
	state
	r http.Request
}

// Deadline is the parent context's.
func (st *state) Deadline() (time.Time, bool) { return st.in.Context().Deadline() }

// Done is the parent context's.
func (st *state) Done() <-chan struct{} { return st.in.Context().Done() }

// Err is the parent context's.
func (st *state) Err() error { return st.in.Context().Err() }

// Value is the state for stateKey{}, else the parent context's value.
func (st *state) Value(key any) any {
	if _, ok := key.(stateKey); ok {
		return st
	}
	return st.in.Context().Value(key)
}

type charge struct {
	pol      *policy
	key      string // the store key
	cost     int64
	window   int64 // the window the units were spent in (sluice.Result.Window)
	refunded atomic.Int64
}

func stateOf(ctx context.Context) *state {
	st, _ := ctx.Value(stateKey{}).(*state)
	return st
}

// decision returns st's decision, making it first if need be. Until serve
// calls the next handler (or a handler it gives st to), only serve's
// goroutine has st.
func (st *state) decision() *decision {
	if d := st.dec.Load(); d != nil {
		return d
	}
	d := newDecision()
	if p := &st.one; p.pol != nil {
		d.Allowed = true
		d.Result = sluice.Result{Allowed: true, Remaining: st.remaining, ResetAfter: time.Duration(st.resetAfter), Window: st.window}
		if len(st.m.headers) > 0 {
			d.Policies = append(d.resultBuf[:0], p.result(st.remaining, st.resetAfter))
		}
		if p.cost > 0 {
			d.charged = append(d.charged, charge{pol: p.pol, key: p.skey, cost: p.cost, window: st.window})
		}
	}
	if st.dec.CompareAndSwap(nil, d) {
		return d
	}
	return st.dec.Load()
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

// ErrNoDecision is returned by Refund for a context that did not pass through
// a Middleware, or whose request spent nothing.
var ErrNoDecision = errors.New("httplimit: no admitted request in this context")

// Refund gives up to units back to every policy the request spent on
// (enforced and shadow), never more than it spent there: for a handler that
// learns the real cost afterwards (taken 100, used 30: Refund 70). Only
// TokenBucket, GCRA, FixedWindow and AlignedWindow policies can give units
// back (Limiter.RefundTake); the others are left as they are and named in
// the error (wrapping algo.ErrNoRefund). A window policy gives back only
// while its key is still in the window the request spent in: a handler that
// ran across the window's end has nothing to give back there.
func Refund(ctx context.Context, units int64) error {
	return refund(ctx, "", units)
}

// RefundPolicy is Refund for the one policy named name.
func RefundPolicy(ctx context.Context, name string, units int64) error {
	if name == "" {
		return errors.New("httplimit: RefundPolicy: empty policy name")
	}
	return refund(ctx, name, units)
}

func refund(ctx context.Context, name string, units int64) error {
	if units < 0 {
		return fmt.Errorf("httplimit: refund of %d units", units)
	}
	st := stateOf(ctx)
	if st == nil {
		return ErrNoDecision
	}
	var errs []error
	found := false
	charged := st.decision().charged
	for i := range charged {
		c := &charged[i]
		if name != "" && c.pol.Name != name {
			continue
		}
		found = true
		// Take the units from what is left to give back before the store
		// call, and return them if it fails: refunds at once never give
		// back more than was spent.
		var n int64
		for {
			done := c.refunded.Load()
			n = min(units, c.cost-done)
			if n <= 0 || c.refunded.CompareAndSwap(done, done+n) {
				break
			}
		}
		if n <= 0 {
			continue
		}
		if _, err := st.m.lim.RefundTake(ctx, c.key, c.pol.Limit, n, sluice.Result{Window: c.window}); err != nil {
			c.refunded.Add(-n)
			errs = append(errs, fmt.Errorf("policy %q: %w", c.pol.Name, err))
		}
	}
	if !found {
		if name != "" {
			return fmt.Errorf("%w: no spend on policy %q", ErrNoDecision, name)
		}
		return ErrNoDecision
	}
	if len(errs) > 0 {
		return fmt.Errorf("httplimit: refund: %w", errors.Join(errs...))
	}
	return nil
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
	var out []Stats
	for _, ps := range [][]*policy{m.enforced, m.shadows} {
		for _, p := range ps {
			out = append(out, Stats{
				Policy: p.Name, Shadow: p.Shadow,
				Allowed: p.stats.allowed.Load(), Refused: p.stats.refused.Load(),
				Degraded: p.stats.degraded.Load(), Errors: p.stats.errors.Load(),
				Missing: p.stats.missing.Load(),
			})
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

// part is one policy's share of a request.
type part struct {
	pol  *policy
	skey string // the store key: pol.keyPrefix + the request's key
	cost int64
}

// key is the request's key, without the store prefix.
func (p part) key() string { return p.skey[len(p.pol.keyPrefix):] }

// result is p's numbers from a result's Remaining and ResetAfter.
func (p part) result(remaining, resetAfter int64) PolicyResult {
	return PolicyResult{Name: p.pol.Name, Shadow: p.pol.Shadow, Key: p.key(), Cost: p.cost, Quota: p.pol.q, Window: p.pol.w,
		Remaining: remaining, Reset: seconds(time.Duration(resetAfter))}
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	// st stays nil with WithoutDecisionContext and no user's function, until
	// a path other than the common one needs it: the common one needs none.
	var st *state
	in := r // the request as it came, for the next handler without the context
	if !m.bare || m.userFuncs {
		// The copy of the request is made here when a user's function
		// may read its context, else once the request is admitted.
		sr := &stateReq{}
		sr.in, sr.m, sr.req = r, m, &sr.r
		st = &sr.state
		if m.userFuncs {
			r = st.request(r)
		}
	}
	if m.skip != nil && m.skip(r) {
		next.ServeHTTP(w, m.nextRequest(st, in, r))
		return
	}
	var partBuf [2]part
	enforced, ok := m.parts(partBuf[:0], w, r, st, m.enforced)
	if !ok {
		return
	}
	// The shadows' parts go after the enforced ones while they fit.
	var spare []part
	if len(enforced) <= len(partBuf) {
		spare = partBuf[len(enforced):len(enforced)]
	}
	shadows, ok := m.parts(spare, w, r, st, m.shadows)
	if !ok {
		return
	}
	if len(enforced) == 1 && len(shadows) == 0 {
		p := enforced[0]
		res, lat, err := m.takeAll(r.Context(), enforced, nil)
		if err == nil && res.Allowed && !res.Degraded && res.Delay == 0 {
			// The common case: its Decision is made only if asked for,
			// its headers are written from the one result.
			p.pol.stats.allowed.Add(1)
			if m.obs != nil {
				m.report(enforced, nil, observe.Allowed, lat, res.Delay)
			}
			var vals *[2]string // the header values' backing
			if st != nil {
				st.one = p
				st.remaining, st.resetAfter, st.window = res.Remaining, int64(res.ResetAfter), res.Window
				vals = &st.headerVals
			}
			if len(m.headers) > 0 {
				if vals == nil {
					vals = new([2]string)
				}
				one := [1]PolicyResult{p.result(res.Remaining, int64(res.ResetAfter))}
				m.writeHeaders(w.Header(), one[:], vals)
			}
			next.ServeHTTP(w, m.nextRequest(st, in, r)) // in when st is nil (bare)
			return
		}
		m.decide(w, r, in, st, enforced, nil, &decided{res, lat, err}, next)
		return
	}
	m.decide(w, r, in, st, enforced, shadows, nil, next)
}

// decided is the enforced composite's outcome, when serve has it.
type decided struct {
	res sluice.Result
	lat time.Duration
	err error
}

// decide is serve past the common case (a refusal, a degraded decision, a
// leaky bucket's delay, several policies or shadow policies): the enforced composite is decided
// here unless serve has (pre).
func (m *Middleware) decide(w http.ResponseWriter, r, in *http.Request, st *state, enforced, shadows []part, pre *decided, next http.Handler) {
	if st == nil {
		st = &state{in: in, m: m}
	}
	ctx := r.Context()
	send := len(m.headers) > 0
	d := st.decision()
	dec := &d.Decision
	results := d.resultBuf[:0]

	// The enforced composite. each holds each part's own result at the
	// decision, the enforced parts' then the shadows'.
	var eachBuf [2]sluice.Result
	each := eachBuf[:]
	if n := len(enforced) + len(shadows); n > len(eachBuf) {
		each = make([]sluice.Result, n)
	}
	enfEach, shaEach := each[:len(enforced)], each[len(enforced):len(enforced)+len(shadows)]
	var res sluice.Result
	allowed := true
	if len(enforced) > 0 {
		var err error
		var lat time.Duration
		if pre != nil { // one enforced part
			res, lat, err = pre.res, pre.lat, pre.err
			enfEach[0] = res
		} else {
			res, lat, err = m.takeAll(ctx, enforced, enfEach)
		}
		if err != nil {
			m.report(enforced, nil, observe.Error, lat, 0)
			m.failed(w, st.request(r), enforced, err)
			return
		}
		dec.Result = res
		allowed = res.Allowed
		switch {
		case res.Degraded:
			for _, p := range enforced {
				p.pol.stats.degraded.Add(1)
			}
			send = false // numbers the store did not make
		case allowed:
			for _, p := range enforced {
				p.pol.stats.allowed.Add(1)
			}
			st.charge(enforced, enfEach)
		}
		if !res.Degraded && send {
			results = numbers(results, enforced, enfEach)
		}
		if !allowed {
			dec.Refused = refusers(enforced, enfEach)
			for _, p := range enforced {
				for _, n := range dec.Refused {
					if n == p.pol.Name {
						p.pol.stats.refused.Add(1)
					}
				}
			}
		}
		if m.obs != nil {
			switch {
			case res.Degraded:
				m.report(enforced, nil, observe.Degraded, lat, 0)
			case allowed:
				m.report(enforced, nil, observe.Allowed, lat, res.Delay)
			default:
				m.report(enforced, dec.Refused, observe.Denied, lat, 0)
			}
		}
	}
	dec.Allowed = allowed

	// The shadow composite: counted, never refusing.
	if len(shadows) > 0 {
		sres, lat, err := m.takeAll(ctx, shadows, shaEach)
		switch {
		case err != nil:
			for _, p := range shadows {
				p.pol.stats.errors.Add(1)
			}
			m.report(shadows, nil, observe.Error, lat, 0)
			m.logError(st, r, err)
		case sres.Degraded:
			for _, p := range shadows {
				p.pol.stats.degraded.Add(1)
			}
			m.report(shadows, nil, observe.Degraded, lat, 0)
		default:
			// With shadow headers, the shadows' numbers follow the
			// enforced ones in results.
			if send && m.shadowHeaders {
				results = numbers(results, shadows, shaEach)
			}
			if sres.Allowed {
				for _, p := range shadows {
					p.pol.stats.allowed.Add(1)
				}
				st.charge(shadows, shaEach)
				m.report(shadows, nil, observe.Allowed, lat, 0)
			} else {
				dec.ShadowRefused = refusers(shadows, shaEach)
				for _, p := range shadows {
					for _, n := range dec.ShadowRefused {
						if n == p.pol.Name {
							p.pol.stats.refused.Add(1)
						}
					}
				}
				m.report(shadows, dec.ShadowRefused, observe.ShadowDenied, lat, 0)
			}
		}
	}
	if len(results) > 0 {
		dec.Policies = results
	}
	if send {
		m.writeHeaders(w.Header(), results, &st.headerVals)
	}

	if !allowed {
		retry := max(seconds(res.RetryAfter), 1)
		w.Header().Set("Retry-After", strconv.FormatInt(retry, 10))
		if m.deny != nil {
			sw := &statusWriter{ResponseWriter: w, status: m.status}
			m.deny.ServeHTTP(sw, st.request(r))
			if !sw.wrote {
				sw.WriteHeader(m.status)
			}
			return
		}
		detail := fmt.Sprintf("refused by %s; retry in %ds", quoteList(dec.Refused), retry)
		writeProblem(w, m.status, ProblemType, "Request cannot be satisfied as assigned quota has been exceeded", detail, dec.Refused)
		return
	}
	m.pass(w, r, in, st, res.Delay, next)
}

// pass hands an admitted request to next, once a leaky bucket's delay has
// passed.
func (m *Middleware) pass(w http.ResponseWriter, r, in *http.Request, st *state, delay time.Duration, next http.Handler) {
	if delay > 0 { // a leaky bucket's turn
		ctx := r.Context()
		if dl, ok := ctx.Deadline(); ok && dl.Sub(m.clock.Now()) < delay {
			// Its turn comes after the request's deadline: say so now
			// rather than wait for it to pass.
			writeProblem(w, http.StatusServiceUnavailable, "about:blank", "Service Unavailable", "the request's turn comes after its deadline", nil)
			return
		}
		if err := m.clock.Sleep(ctx, delay); err != nil {
			writeProblem(w, http.StatusServiceUnavailable, "about:blank", "Service Unavailable", "the request ended while it waited for its turn", nil)
			return
		}
	}
	next.ServeHTTP(w, m.nextRequest(st, in, r))
}

// nextRequest is the request the next handler gets: the one that came (in)
// with WithoutDecisionContext, else r carrying st.
func (m *Middleware) nextRequest(st *state, in, r *http.Request) *http.Request {
	if m.bare {
		return in
	}
	return st.request(r)
}

// parts appends each policy's key and cost to out; false when the request
// was answered (a missing key, a bad cost). st is nil when serve has made
// none yet (WithoutDecisionContext, no user's function): a missing key's
// answer makes one.
func (m *Middleware) parts(out []part, w http.ResponseWriter, r *http.Request, st *state, pols []*policy) ([]part, bool) {
	if len(pols) == 0 {
		return out, true
	}
	for _, p := range pols {
		var skey string
		ok := false
		if p.clientIP {
			// ClientIP(), with the address written after the prefix
			// in a stack buffer: the store key is the one allocation.
			var buf [128]byte
			b := append(buf[:0], p.keyPrefix...)
			if len(m.ip.trusted) == 0 {
				// The peer's IPv4 address as RemoteAddr writes it, when
				// that is its canonical form.
				b, ok = appendIPv4Host(b, r.RemoteAddr)
			}
			if !ok {
				var a netip.Addr
				if a, ok = m.ip.clientAddr(r); ok {
					b = m.ip.appendGroup(b[:len(p.keyPrefix)], a)
				}
			}
			if ok {
				skey = string(b)
			}
		} else {
			var key string
			key, ok = p.Key(r)
			ok = ok && key != ""
			if ok {
				skey = p.keyPrefix + key
			}
		}
		if !ok {
			p.stats.missing.Add(1)
			if p.Optional || p.Shadow { // a shadow policy never answers
				continue
			}
			if st == nil {
				st = &state{in: r, m: m} // r is the request as it came
			}
			st.decision().Missing = p.Name
			if m.missing != nil {
				m.missing.ServeHTTP(w, st.request(r))
			} else {
				writeProblem(w, http.StatusBadRequest, "about:blank", "Bad Request",
					fmt.Sprintf("the request carries no key for rate-limit policy %q", p.Name), nil)
			}
			return nil, false
		}
		cost := p.Cost
		if p.CostFunc != nil {
			c, err := p.CostFunc(r)
			if err == nil && c < 0 {
				err = fmt.Errorf("negative cost %d", c)
			}
			if err != nil {
				p.stats.errors.Add(1)
				if m.obs != nil { // the store was not called
					m.obs.Observe(observe.Event{Source: ObserveSource, Policy: p.Name, Outcome: observe.Error})
				}
				m.logError(st, r, fmt.Errorf("httplimit: policy %q: cost: %w", p.Name, err))
				if p.Shadow {
					continue
				}
				writeProblem(w, http.StatusBadRequest, "about:blank", "Bad Request",
					fmt.Sprintf("the request's cost under rate-limit policy %q cannot be read", p.Name), nil)
				return nil, false
			}
			cost = c
		}
		out = append(out, part{pol: p, skey: skey, cost: cost})
	}
	return out, true
}

// sluiceParts lends takeAll room for two parts: a []sluice.Part escapes
// (the Limiter hands it to its store, an interface), and the Limiter keeps
// no reference to it once TakeAll returns.
var sluiceParts = sync.Pool{New: func() any { return new([2]sluice.Part) }}

// takeAll decides ps as one composite and, unless each is nil, writes each
// part's own result at the decision into each[i] (sluice.Limiter.TakeEach).
// With an observer, it returns how long the store took.
func (m *Middleware) takeAll(ctx context.Context, ps []part, each []sluice.Result) (sluice.Result, time.Duration, error) {
	if len(ps) == 1 { // a composite of one is a Take, without the parts
		var start time.Time
		if m.obs != nil {
			start = time.Now()
		}
		res, err := m.lim.Take(ctx, ps[0].skey, ps[0].pol.Limit, ps[0].cost)
		var lat time.Duration
		if m.obs != nil {
			lat = time.Since(start)
		}
		if each != nil {
			each[0] = res
		}
		return res, lat, err
	}
	buf := sluiceParts.Get().(*[2]sluice.Part)
	sp := buf[:0]
	for _, p := range ps {
		sp = append(sp, sluice.Part{Key: p.skey, Limit: p.pol.Limit, Cost: p.cost})
	}
	var start time.Time
	if m.obs != nil {
		start = time.Now()
	}
	res, err := m.lim.TakeEach(ctx, sp, each)
	var lat time.Duration
	if m.obs != nil {
		lat = time.Since(start)
	}
	*buf = [2]sluice.Part{} // hold no keys in the pool
	sluiceParts.Put(buf)
	return res, lat, err
}

// report gives the observer, if any, one Event per part of one store call
// (only those named in only, when it is not nil).
func (m *Middleware) report(ps []part, only []string, o observe.Outcome, lat, wait time.Duration) {
	if m.obs == nil {
		return
	}
	i := 0
	for _, p := range ps {
		if only != nil && !slices.Contains(only, p.pol.Name) {
			continue
		}
		m.obs.Observe(observe.Event{Source: ObserveSource, Policy: p.pol.Name, Outcome: o, Latency: lat, Index: i, Wait: wait})
		i++
	}
}

// charge records what the admitted parts ps spent, each in the window its
// own result each[i] names, for Refund.
func (st *state) charge(ps []part, each []sluice.Result) {
	d := st.decision()
	for i, p := range ps {
		if p.cost > 0 {
			d.charged = append(d.charged, charge{pol: p.pol, key: p.skey, cost: p.cost, window: each[i].Window})
		}
	}
}

// numbers appends each part's figures, from its own result at the
// decision (each[i] is ps[i]'s), to out.
func numbers(out []PolicyResult, ps []part, each []sluice.Result) []PolicyResult {
	for i, p := range ps {
		out = append(out, p.result(each[i].Remaining, int64(each[i].ResetAfter)))
	}
	return out
}

// refusers names the parts of a refused composite that could not grant
// their cost (each[i] is ps[i]'s result).
func refusers(ps []part, each []sluice.Result) []string {
	var names []string
	for i, p := range ps {
		if !each[i].Allowed {
			names = append(names, p.pol.Name)
		}
	}
	return names
}

// failed answers a decision the store could not make.
func (m *Middleware) failed(w http.ResponseWriter, r *http.Request, ps []part, err error) {
	for _, p := range ps {
		p.pol.stats.errors.Add(1)
	}
	if m.onError != nil {
		m.onError(r, err)
	}
	if errors.Is(err, sluice.ErrCostExceedsCapacity) {
		writeProblem(w, http.StatusRequestEntityTooLarge, "about:blank", "Content Too Large",
			"the request's cost exceeds what a rate-limit policy can ever admit", nil)
		return
	}
	w.Header().Set("Retry-After", strconv.FormatInt(max(seconds(m.unavailable), 1), 10))
	writeProblem(w, http.StatusServiceUnavailable, "about:blank", "Service Unavailable",
		"the rate limiter is unavailable", nil)
}

// logError gives err to WithErrorLog's function with r carrying st.
func (m *Middleware) logError(st *state, r *http.Request, err error) {
	if m.onError != nil {
		m.onError(st.request(r), err)
	}
}

// request returns r with st as its context: r itself when it already is,
// else st's copy of r (made once), or with no room for one a new copy.
func (st *state) request(r *http.Request) *http.Request {
	if c, ok := r.Context().(*state); ok && c == st {
		return r
	}
	if st.req == nil {
		return r.WithContext(st)
	}
	if st.req.Context() != context.Context(st) { // not made yet
		*st.req = *r.WithContext(st)
	}
	return st.req
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	if len(q) == 1 {
		return "policy " + q[0]
	}
	return "policies " + strings.Join(q, ", ")
}
