// Package grpclimit puts a *sluice.Limiter in front of a gRPC server and
// behind a gRPC client: server interceptors that refuse calls over budget
// with a status a client can act on, and client interceptors that pace
// outgoing calls to an upstream's limits.
//
// It is a package of its own so that importing sluice, its stores or
// httplimit compiles no gRPC.
//
// # Server
//
//	lim := sluice.New(memstore.New())
//	s, err := grpclimit.New(lim, []grpclimit.Policy{
//		{Name: "per-ip", Limit: sluice.PerMinute(600)}, // keyed on the peer's address
//		{Name: "per-user", Limit: sluice.PerSecond(10).WithBurst(50), Key: grpclimit.Metadata("x-user")},
//	})
//	if err != nil { ... }
//	srv := grpc.NewServer( // after your authentication, if FromContext keys read its identity
//		grpc.ChainUnaryInterceptor(auth, s.UnaryServerInterceptor()),
//		grpc.ChainStreamInterceptor(authStream, s.StreamServerInterceptor()),
//	)
//
// A Server's enforced policies are decided as one composite
// (sluice.Limiter.TakeAll): a call goes on only if every policy grants, and
// a refusal spends nothing on any of them. Shadow policies (Policy.Shadow)
// are decided as a composite of their own after the enforced one, whatever
// its outcome: they spend as if enforced, their refusals are only counted
// (Stats, WithObserver), and they never refuse a call. WithSkip lets calls
// through uncounted (SkipMethods: health checks). A policy may keep part
// of its limit for critical calls (Policy.Headroom, Policy.Critical): the
// others are refused once the key's usage passes their share, and each
// call's rate-limit metadata is its class's.
//
// # Keys
//
// A Server policy's key is the client's address by default (PeerIP): the
// peer's IP address, IPv6 addresses grouped by prefix (default /64,
// WithIPv6Prefix), IPv4-mapped IPv6 read as IPv4. A proxy's forwarding
// metadata is believed only when the peer is a trusted proxy
// (WithTrustedProxies): then x-forwarded-for is read from the right,
// passing over trusted hops, and the first untrusted address is the client
// (WithProxyHeader names forwarded, RFC 7239, or a single-value field such
// as x-real-ip instead). The rules are httplimit's, written once.
// Metadata (a metadata field: an API key, a tenant), Method (the full method
// name), FromContext (an identity an earlier interceptor put in the
// context), Static and Join build other keys. A policy's keys live under
// "grpclimit:" + its name + ":" in the store (WithKeyPrefix).
//
// A call that a policy finds no key for (a peer without an IP address, a
// missing metadata field) is never counted under a shared empty key: an
// Optional policy does not apply to it; otherwise it fails with
// codes.InvalidArgument naming the policy, and the handler is not called. A
// shadow policy always treats a missing key as Optional does.
//
// # Streams
//
// A policy limits a stream per call (PerCall: once, before the handler
// runs) or per message (PerMessage: each message the handler receives,
// once it has arrived, so that Policy.CostFunc can weigh it), set per
// policy (Policy.Stream) or for all (WithStreamMode). A refused message is
// not handed to the handler: RecvMsg returns the refusal, and the handler
// ends the stream with it by returning it. A unary call spends once,
// whatever the mode.
//
// # Refusals
//
// A refused call fails with codes.ResourceExhausted and two details a
// client reads with status.FromError(err) and Status.Details():
//
//   - errdetails.RetryInfo, whose RetryDelay is the Result's RetryAfter (to
//     the microsecond, never 0): the smallest wait after which the same call
//     would pass with no other traffic;
//   - errdetails.QuotaFailure, with one violation per refusing policy: the
//     policy's name as Subject, its limit in Description.
//
// The composite reports each policy's own result at the decision's instant
// (in the same store call), so a refusal names exactly the policies that
// could not grant. A Client's pacing (Limiter.WaitAll) likewise names the
// policies that refused its last decision before the deadline (every policy
// when the deadline left no time for one). A cost that no policy could ever
// admit fails with InvalidArgument.
//
// An admitted leaky-bucket call waits out its Result.Delay before the
// handler runs, so that calls leave evenly spaced; when its turn comes after
// the call's deadline it fails at once with DeadlineExceeded (the units stay
// spent), and a call whose context ends while it waits fails with its
// context's status.
//
// # Metadata
//
// With HeadersDraft11 (the default; WithHeaders with no style sends none)
// every call's response header metadata carries one item per enforced
// policy (WithShadowHeaders: the shadow ones too) in two fields named and
// written as draft-ietf-httpapi-ratelimit-headers-11 writes the HTTP ones:
//
//	ratelimit-policy: "per-ip";q=600;w=60, "per-user";q=50;w=5
//	ratelimit: "per-ip";r=599;t=1, "per-user";r=49;t=1
//
// q is the largest cost a fresh key admits at once (a bucket's burst, a
// leaky bucket's burst+1, a window's rate) and w the whole seconds, rounded
// up, in which a budget spent to nothing comes back to q; r is the units
// that could still pass now, and t the seconds (rounded up) until the
// budget is back to q with no other traffic. httplimit's package doc says
// what they mean for each algorithm. A client reads them with
// grpc.Header(&md). Each policy's r and t are its own at the decision; r is
// never above q, and a figure beyond an RFC 9651 Integer (15 digits) is
// sent as the largest one. A '%' in a name is sent as %25, as in an RFC
// 9651 Display String, so that the name percent-decodes back.
//
// A stream names each policy once, with its latest figures: those decided
// at its start and for the messages received before its header goes out
// (its first message sent, SendHeader, or its end). When PerMessage
// policies decide messages after that, the trailer (grpc.Trailer(&md))
// carries every policy once more, with the figures of the last decision.
//
// # Store failures
//
// The store's failure policy decides. A store that fails open admits the
// call with Result.Degraded: it is served, without rate-limit metadata, and
// counted (Stats.Degraded, observe.Degraded). A store that fails closed
// returns sluice.ErrStoreUnavailable: the call fails with codes.Unavailable,
// the message "the rate limiter is unavailable" and a RetryInfo of 1s
// (WithUnavailableRetryAfter); the error itself goes to WithErrorLog's
// function, never to the client. Any other store error is answered the same
// way, and a call whose own context ended with its context's status.
//
// # Charging what was used
//
// A policy with a Used takes its Cost as an estimate before the handler,
// and once the handler returns is settled to what the call used: the
// trailer it names, set by the handler, and what the handler charges
// (Charge), added; the excess is given back, the shortfall charged, into
// debt up to the limit's Debt. A stream is settled when it ends, a client
// that left mid-way included. A policy with a Count counts only the calls
// whose status code it picks (codes.Unauthenticated: failed
// authentication): it looks before the handler and charges after. Server
// only.
//
// # Refunds
//
// A handler that learns the call's real cost afterwards gives the excess
// back with Refund(ctx, units) (not under the sliding algorithms or the leaky bucket), ctx
// being the handler's context or a stream's Context().
//
// # Client
//
//	c, err := grpclimit.NewClient(lim, []grpclimit.Policy{
//		{Name: "upstream", Limit: sluice.PerSecond(20)}, // keyed on the ClientConn's target
//	})
//	conn, err := grpc.NewClient(target,
//		grpc.WithChainUnaryInterceptor(c.UnaryClientInterceptor()),
//		grpc.WithChainStreamInterceptor(c.StreamClientInterceptor()),
//	)
//
// A Client waits before each call (sluice.Limiter.WaitAll) until every
// policy admits it, bounded by the call's context: a call whose deadline
// would pass first fails at once with ResourceExhausted (RetryInfo and
// QuotaFailure, as above) without being sent, spending nothing. PerMessage
// policies pace each message a stream sends. A store that fails closed fails
// the call with Unavailable, unsent.
//
// # Observing
//
// WithObserver reports one observe.Event per policy for each decision
// (each call, or each message under PerMessage): Source "grpc" on a Server,
// with Latency the store call's duration (the composite TakeAll); Source
// "grpc-client" on a Client, with Latency the whole WaitAll, waiting
// included. The outcomes are those of Stats: a refused composite reports
// Denied for the policies that refused it and nothing for those that would
// have granted; a shadow policy's refusal is ShadowDenied; an admitted
// leaky-bucket call whose turn comes too late reports Denied for its
// leaky-bucket policies. A call with a missing key or a cost that cannot be
// read reports nothing: the store was not asked.
package grpclimit
