package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policycore"
	"github.com/sluice-go/sluice/observe"
)

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
	return func(m *Middleware) error { return policycore.Set("WithDenyHandler", &m.deny, h) }
}

// WithMissingKey answers a request whose key a non-Optional policy cannot
// find with h (default: 400 Bad Request with a problem body naming the
// policy). DecisionFrom(r.Context()).Missing names the policy.
func WithMissingKey(h http.Handler) Option {
	return func(m *Middleware) error { return policycore.Set("WithMissingKey", &m.missing, h) }
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
		return ok && slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(a) })
	}
}

// WithTrustedProxies names the proxies whose forwarding header is believed:
// a request whose peer address is in one of the prefixes is keyed on the
// client the header names (see WithProxyHeader). IPv4-mapped prefixes are
// read as IPv4.
func WithTrustedProxies(prefixes ...netip.Prefix) Option {
	return func(m *Middleware) error { return m.ip.Trust(prefixes) }
}

// WithProxyHeader names the header trusted proxies set: "X-Forwarded-For"
// (the default) or "Forwarded" (RFC 7239), walked from the right, or a
// single-value header ("CF-Connecting-IP", "X-Real-IP") read as it is. Only
// one header is read, so that a client cannot slip an address into the one
// its proxy does not set.
func WithProxyHeader(name string) Option {
	return func(m *Middleware) error { return m.ip.SetField(http.CanonicalHeaderKey(strings.TrimSpace(name))) }
}

// WithIPv6Prefix sets how IPv6 clients are grouped: every address of one
// /bits prefix shares a budget (default 64; 128 keys each address alone).
func WithIPv6Prefix(bits int) Option {
	return func(m *Middleware) error { return m.ip.SetIPv6Prefix(bits) }
}

// WithUnavailableRetryAfter sets the Retry-After of the 503 answered when the
// store fails closed (default 1s; rounded up to whole seconds).
func WithUnavailableRetryAfter(d time.Duration) Option {
	return func(m *Middleware) error { return policycore.SetUnavailableRetryAfter(&m.unavailable, d) }
}

// WithErrorLog receives the errors kept out of responses: store failures, a
// CostFunc's error, a cost that exceeds capacity, what a response says it
// used that cannot be read (Policy.Used), and a settle the store failed.
func WithErrorLog(f func(r *http.Request, err error)) Option {
	return func(m *Middleware) error { m.onError = f; return nil }
}

// WithClock sets the clock an admitted leaky-bucket request sleeps out its
// Delay on (default the system clock); tests pass one that does not sleep.
func WithClock(c sluice.Clock) Option {
	return func(m *Middleware) error { return policycore.Set("WithClock", &m.clock, c) }
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
// call Refund, RefundPolicy, Charge or ChargePolicy (they return
// ErrNoDecision) or DecisionFrom (false), and its ClientAddr reads the peer
// address without the trusted proxies; a policy's Used still reads the
// response. The deny handler, the missing-key handler, WithErrorLog's
// function, the skip predicate and the policies' key and cost functions
// still get the request with its decision.
func WithoutDecisionContext() Option {
	return func(m *Middleware) error { m.bare = true; return nil }
}

// WithKeyPrefix sets the prefix of the store keys (default "httplimit:"): a
// policy's keys are prefix + name + ":" + key.
func WithKeyPrefix(prefix string) Option {
	return func(m *Middleware) error { m.prefix = prefix; return nil }
}
