package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policycore"
	"github.com/sluice-go/sluice/observe"
)

// Client holds the policies of outgoing calls and makes the client
// interceptors that pace them. It is safe for concurrent use.
type Client struct {
	cfg                config
	lim                *sluice.Limiter
	policies           []*policy
	startPols, msgPols []*policy
}

// NewClient returns a Client that paces calls by policies on lim. A
// policy's nil Key is Target(); shadow policies, Used and Count are not
// supported on the client side.
func NewClient(lim *sluice.Limiter, policies []Policy, opts ...Option) (*Client, error) {
	if lim == nil {
		return nil, errors.New("grpclimit: NewClient: nil Limiter")
	}
	if len(policies) == 0 {
		return nil, errors.New("grpclimit: NewClient: no policy")
	}
	for _, p := range policies {
		switch {
		case p.Shadow:
			return nil, fmt.Errorf("grpclimit: policy %q: shadow policies are not supported on a Client", p.Name)
		case p.Used != nil || p.Count != nil:
			return nil, fmt.Errorf("grpclimit: policy %q: Used and Count are not supported on a Client", p.Name)
		}
	}
	cfg, err := newConfig("grpclimit-out:", opts)
	if err != nil {
		return nil, err
	}
	if cfg.clock == nil {
		cfg.clock = lim.Clock()
	}
	c := &Client{cfg: cfg, lim: lim}
	if c.policies, err = checkPolicies(policies, &c.cfg, Target()); err != nil {
		return nil, err
	}
	for _, p := range c.policies {
		if p.perMsg {
			c.msgPols = append(c.msgPols, p)
		} else {
			c.startPols = append(c.startPols, p)
		}
	}
	return c, nil
}

// Stats returns each policy's counts.
func (c *Client) Stats() []Stats { return statsOf(c.policies) }

func (c *Client) newCall(ctx context.Context, cc *grpc.ClientConn) *call {
	cl := &call{Context: ctx, cfg: &c.cfg, lim: c.lim, client: true}
	if cc != nil {
		cl.target = cc.Target()
	}
	return cl
}

// UnaryClientInterceptor paces unary calls: before each call it waits
// (sluice.Limiter.WaitAll) until every policy admits it, bounded by the
// call's context. A call that cannot be admitted before its deadline fails
// at once with ResourceExhausted, carrying RetryInfo and QuotaFailure as a
// Server's refusal does, without being sent and spending nothing. A store
// that fails closed fails the call with Unavailable, unsent; one that fails
// open lets it go.
func (c *Client) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if c.cfg.skip != nil && c.cfg.skip(ctx, method) {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		if err := c.pace(c.newCall(ctx, cc), method, c.policies, req); err != nil {
			return err
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// StreamClientInterceptor paces streams: PerCall policies before the stream
// is opened, PerMessage policies before each message is sent (SendMsg then
// returns the refusal's status without sending; the stream stays open).
func (c *Client) StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if c.cfg.skip != nil && c.cfg.skip(ctx, method) {
			return streamer(ctx, desc, cc, method, opts...)
		}
		cl := c.newCall(ctx, cc)
		if err := c.pace(cl, method, c.startPols, nil); err != nil {
			return nil, err
		}
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || len(c.msgPols) == 0 {
			return cs, err
		}
		return &clientStream{ClientStream: cs, c: c, cl: cl, method: method}, nil
	}
}

type clientStream struct {
	grpc.ClientStream
	c      *Client
	cl     *call
	method string
}

// SendMsg waits for the PerMessage policies, then sends m.
func (w *clientStream) SendMsg(m any) error {
	if err := w.c.pace(w.cl, w.method, w.c.msgPols, m); err != nil {
		return err
	}
	return w.ClientStream.SendMsg(m)
}

// pace waits until pols admit the call, or returns the status it fails
// with.
func (c *Client) pace(cl *call, method string, pols []*policy, msg any) error {
	if len(pols) == 0 {
		return nil
	}
	ps, err := gather(cl, method, pols, msg, make([]policycore.Part, 0, len(pols)))
	if err != nil || len(ps) == 0 {
		return err
	}
	o := c.cfg.observer
	start := time.Now()
	var buf [4]sluice.Result
	var each []sluice.Result
	if len(ps) <= len(buf) {
		each = buf[:len(ps)]
	} else {
		each = make([]sluice.Result, len(ps))
	}
	parts := make([]sluice.Part, len(ps))
	for i := range ps {
		parts[i] = ps[i].Sluice()
	}
	res, err := c.lim.WaitAll(cl, parts, each)
	lat := time.Since(start)
	switch {
	case err == nil && res.Degraded:
		policycore.Record(o, sourceClient, ps, observe.Degraded, lat, 0)
	case err == nil:
		policycore.Record(o, sourceClient, ps, observe.Allowed, lat, 0)
	case errors.Is(err, sluice.ErrDeadline) && cl.Err() == nil:
		// It could not be admitted before the deadline: refuse it here,
		// naming the policies that refused the last decision (all of them
		// when none was made).
		policycore.RecordRefused(o, sourceClient, ps, each, observe.Denied, lat)
		retry := res.RetryAfter
		if retry <= 0 || retry == time.Duration(math.MaxInt64) { // a leaky bucket's turn: when it comes
			retry = res.ResetAfter
		}
		return refusal(policycore.Refused(ps, each), retry, "outgoing call")
	default:
		policycore.Record(o, sourceClient, ps, observe.Error, lat, 0)
		cl.logError(method, err)
		return storeError(cl, err, c.cfg.unavailable)
	}
	return nil
}
