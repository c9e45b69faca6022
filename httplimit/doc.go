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
// (sluice.Limiter.TakeAll): a request passes only if every policy grants,
// and a refusal spends nothing on any of them. The answer names the
// policies that refused. Shadow policies (Policy.Shadow) are decided as a
// composite of their own, after the enforced one, whatever its outcome: they
// spend as they would if enforced, their refusals are only counted (Stats),
// and they can never make an enforced policy refuse. Per-route policies: wrap
// each route's handler in a Middleware of its own, with any router.
//
// A policy may keep part of its limit for critical requests
// (Policy.Headroom, Policy.Critical): the others are refused once the key's
// usage passes their share, and each request's headers are its class's.
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
// composite is decided with sluice.Limiter.TakeAll, which reports every
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
// # Charging what was used
//
// A policy with a Used takes its Cost as an estimate before the handler,
// and once the handler returns is settled to what the request used: a
// response header or trailer (X-Tokens-Used), a JSON usage field of the
// body (read as it goes by; a text/event-stream's last event that has
// it), a function of the response, and what the handler charges
// (Charge), added. The excess is given back, the shortfall charged, into
// debt up to the limit's Debt; a key in debt is refused, its Retry-After
// the wait until it is paid. A streamed response is settled when its
// handler returns, a client that left mid-stream included. A policy with
// a Count counts only the responses whose status it picks (failed
// logins): it looks before the handler and charges after. The Transport
// spends what the upstream reports it used. What cannot be read, and a
// settle the store fails, go to the error log; the response stands.
//
// # Refunds
//
// A handler that learns the request's real cost afterwards gives the excess
// back with Refund(r.Context(), units) (not under the sliding algorithms or the leaky bucket).
// The decision reaches the next handler in a copy of its request whose
// context carries it; a Middleware whose handlers never call Refund,
// RefundPolicy, Charge, ChargePolicy, DecisionFrom or ClientAddr can leave
// the request uncopied with WithoutDecisionContext.
package httplimit
