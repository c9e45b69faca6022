package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policycore"
)

// ConcurrencyPolicy limits the calls of a key in flight at once: each
// unary call holds a lease of Units while its handler runs, and each
// stream for its whole life (from its handler's start to its end, however
// long it stays open); the lease is given back however the handler ends
// (it returns, panics, or the call is cancelled). A stream that stays open
// past Limit's lifetime loses its slot then (see sluice.Concurrency): set
// the lifetime above the longest stream.
type ConcurrencyPolicy struct {
	// Name names the policy in its store keys, the refusal's status and
	// the observed Events (CheckName's rules, as a Policy's).
	Name string
	// Limit is the concurrency limit, its leases' lifetime, and what it
	// keeps for critical calls: with Limit.Headroom, a call Critical does
	// not pick holds a slot only while the reserve stays free after it.
	Limit sluice.Concurrency
	// Key returns the key a call holds its slot under; nil is PeerIP(). A
	// call with no key is refused with InvalidArgument.
	Key KeyFunc
	// Units is what each call holds; 0 means 1.
	Units int64
	// Critical picks the calls that may use Limit.Headroom too; nil picks
	// none.
	Critical func(ctx context.Context, method string) bool
}

// Concurrent holds the interceptors of one ConcurrencyPolicy. It is safe
// for concurrent use.
type Concurrent struct {
	hold     policycore.Hold
	key      KeyFunc
	critical func(ctx context.Context, method string) bool
	cfg      config
}

// NewConcurrent returns the interceptors of p on lim. Of the Options,
// WithObserver (Events of Source "grpc": Allowed when a slot is held,
// Denied, Error, Degraded, and observe.Expired when a call ends after its
// lease had come back), WithKeyPrefix, WithErrorLog, WithSkip and
// WithUnavailableRetryAfter apply.
func NewConcurrent(lim *sluice.Limiter, p ConcurrencyPolicy, opts ...Option) (*Concurrent, error) {
	if lim == nil {
		return nil, errors.New("grpclimit: NewConcurrent: nil Limiter")
	}
	cfg, err := newConfig("grpclimit:", opts)
	if err != nil {
		return nil, err
	}
	c := &Concurrent{
		hold:     policycore.Hold{Name: p.Name, Limit: p.Limit, Units: p.Units, Lim: lim, Obs: cfg.observer, Source: sourceServer},
		key:      p.Key,
		critical: p.Critical,
		cfg:      cfg,
	}
	if err := c.hold.Check(cfg.prefix); err != nil {
		return nil, fmt.Errorf("grpclimit: %w", err)
	}
	if c.key == nil {
		c.key = PeerIP()
	}
	return c, nil
}

// UnaryServerInterceptor holds a slot while each unary call's handler runs.
func (c *Concurrent) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		var herr error // the handler's, which run's nil must not overwrite
		if err := c.run(ctx, info.FullMethod, func() { resp, herr = handler(ctx, req) }); err != nil {
			return nil, err
		}
		return resp, herr
	}
}

// StreamServerInterceptor holds a slot for each stream's whole life.
func (c *Concurrent) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		var herr error
		if err := c.run(ss.Context(), info.FullMethod, func() { herr = handler(srv, ss) }); err != nil {
			return err
		}
		return herr
	}
}

// run runs work holding a slot of the call's key, or returns the status
// of its refusal: ResourceExhausted with RetryInfo, the wait until enough
// held leases reach the end of their lifetime (an upper bound while none
// is extended).
func (c *Concurrent) run(ctx context.Context, method string, work func()) error {
	if c.cfg.skip != nil && c.cfg.skip(ctx, method) {
		work()
		return nil
	}
	key, ok := c.key(ctx, method)
	if !ok {
		return status.Error(codes.InvalidArgument, "no key for concurrency policy "+strconv.Quote(c.hold.Name))
	}
	critical := c.critical != nil && c.critical(ctx, method)
	refused, err := c.hold.Run(ctx, policycore.Bound(key), critical, work)
	switch {
	case err != nil:
		if c.cfg.onError != nil {
			c.cfg.onError(ctx, method, err)
		}
		return storeError(ctx, err, c.cfg.unavailable)
	case refused != nil:
		retry := time.Duration(policycore.RetryAfter(refused)) * time.Second
		st := status.New(codes.ResourceExhausted, fmt.Sprintf("too many calls in flight for concurrency policy %q; retry within %v", c.hold.Name, retry))
		if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)}); err == nil {
			st = d
		}
		return st.Err()
	}
	return nil
}
