package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/core"
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
// under the key prefix + "hold:" + host: held while a cost-0 look finds it
// not full (Result.ResetAfter > 0). A 429/503 tops it up so that it is full
// again when the Retry-After ends. Two answers that arrive at once may both
// top it up, so a hold can last longer than the longest Retry-After (up to
// their sum), never shorter. Retry-After is capped by WithMaxHold (default
// 1h).
type Transport struct {
	lim      *sluice.Limiter
	base     http.RoundTripper
	policies []*policy
	prefix   string
	maxHold  time.Duration
	clock    sluice.Clock
	hold     sluice.Limit
}

// TransportOption configures a Transport.
type TransportOption func(*Transport) error

// WithBase sets the RoundTripper that sends the requests (default
// http.DefaultTransport).
func WithBase(rt http.RoundTripper) TransportOption {
	return func(t *Transport) error {
		if rt == nil {
			return errors.New("WithBase(nil)")
		}
		t.base = rt
		return nil
	}
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
	return func(t *Transport) error {
		if c == nil {
			return errors.New("WithHoldClock(nil)")
		}
		t.clock = c
		return nil
	}
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
// nil Key is Host(); Shadow policies are not supported outbound. The policies
// may be none: the Transport then only honours Retry-After holds.
func NewTransport(lim *sluice.Limiter, policies []Policy, opts ...TransportOption) (*Transport, error) {
	if lim == nil {
		return nil, errors.New("httplimit: NewTransport: nil Limiter")
	}
	t := &Transport{lim: lim, base: http.DefaultTransport, prefix: "httplimit-out:", maxHold: time.Hour, clock: core.SystemClock{}}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(t); err != nil {
			return nil, fmt.Errorf("httplimit: %w", err)
		}
	}
	seen := map[string]bool{}
	for i, p := range policies {
		if p.Shadow {
			return nil, fmt.Errorf("httplimit: policy %q: shadow policies are not supported outbound", p.Name)
		}
		p, _, err := checkPolicy(i, p, seen, Host)
		if err != nil {
			return nil, err
		}
		t.policies = append(t.policies, &policy{Policy: p})
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
	if hasHost {
		if err := t.waitHold(req, host); err != nil {
			closeBody(req)
			return nil, err
		}
	}
	if len(t.policies) > 0 {
		parts := make([]sluice.Part, 0, len(t.policies))
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
				c, err := p.CostFunc(req)
				if err == nil && c < 0 {
					err = fmt.Errorf("negative cost %d", c)
				}
				if err != nil {
					closeBody(req)
					return nil, fmt.Errorf("httplimit: policy %q: cost: %w", p.Name, err)
				}
				cost = c
			}
			parts = append(parts, sluice.Part{Key: t.prefix + p.Name + ":" + key, Limit: p.Limit, Cost: cost})
		}
		if len(parts) > 0 {
			if _, err := t.lim.WaitAll(ctx, parts); err != nil {
				closeBody(req)
				return nil, fmt.Errorf("httplimit: waiting for the rate limit of %s: %w", req.URL.Redacted(), err)
			}
		}
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil || !hasHost {
		return resp, err
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), t.clock.Now()); ok {
			t.setHold(req, host, min(d, t.maxHold))
		}
	}
	return resp, nil
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// waitHold waits while host is held, bounded by the request's context.
func (t *Transport) waitHold(req *http.Request, host string) error {
	ctx := req.Context()
	key := t.prefix + "hold:" + host
	for {
		look, err := t.lim.Take(ctx, key, t.hold, 0)
		if err != nil {
			return fmt.Errorf("httplimit: reading the hold on %s: %w", host, err)
		}
		if look.Degraded || look.ResetAfter <= 0 {
			return nil
		}
		if dl, ok := ctx.Deadline(); ok && dl.Sub(t.clock.Now()) < look.ResetAfter {
			return fmt.Errorf("httplimit: %s is held for %v after its Retry-After: %w (%w)", host, look.ResetAfter, sluice.ErrDeadline, context.DeadlineExceeded)
		}
		if err := t.clock.Sleep(ctx, look.ResetAfter); err != nil {
			return err
		}
	}
}

// setHold tops host's hold up so that it ends d from now. A store error
// leaves the host unheld: the next request will learn the Retry-After again.
func (t *Transport) setHold(req *http.Request, host string, d time.Duration) {
	ctx := req.Context()
	key := t.prefix + "hold:" + host
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
