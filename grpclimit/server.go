package grpclimit

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policycore"
	"github.com/sluice-go/sluice/observe"
)

// Server holds the policies of a gRPC server and makes its interceptors. It
// is safe for concurrent use.
type Server struct {
	cfg               config
	lim               *sluice.Limiter
	enforced, shadows []*policy
	// The policies decided at a stream's start and for each message it
	// receives.
	startEnf, startShadow []*policy
	msgEnf, msgShadow     []*policy
	// settles: a policy settles or counts (Used, Count), so that each
	// call's end is watched.
	settles bool
}

// New returns a Server that decides policies on lim. The error says which
// policy or option is wrong.
func New(lim *sluice.Limiter, policies []Policy, opts ...Option) (*Server, error) {
	if lim == nil {
		return nil, errors.New("grpclimit: New: nil Limiter")
	}
	if len(policies) == 0 {
		return nil, errors.New("grpclimit: New: no policy")
	}
	cfg, err := newConfig("grpclimit:", opts)
	if err != nil {
		return nil, err
	}
	if cfg.clock == nil {
		cfg.clock = lim.Clock()
	}
	s := &Server{cfg: cfg, lim: lim}
	pols, err := checkPolicies(policies, &s.cfg, PeerIP())
	if err != nil {
		return nil, err
	}
	for _, p := range pols {
		s.settles = s.settles || p.Settles || p.Counts
		switch {
		case p.Shadow && p.perMsg:
			s.shadows, s.msgShadow = append(s.shadows, p), append(s.msgShadow, p)
		case p.Shadow:
			s.shadows, s.startShadow = append(s.shadows, p), append(s.startShadow, p)
		case p.perMsg:
			s.enforced, s.msgEnf = append(s.enforced, p), append(s.msgEnf, p)
		default:
			s.enforced, s.startEnf = append(s.enforced, p), append(s.startEnf, p)
		}
	}
	return s, nil
}

// Stats returns each policy's counts, enforced policies first.
func (s *Server) Stats() []Stats { return statsOf(s.enforced, s.shadows) }

// UnaryServerInterceptor limits unary calls: every policy spends once per
// call, before the handler runs.
func (s *Server) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if s.cfg.skip != nil && s.cfg.skip(ctx, info.FullMethod) {
			return handler(ctx, req)
		}
		cl := &call{Context: ctx, cfg: &s.cfg, lim: s.lim}
		tr := s.watch(ctx, cl)
		send := func(figs []figures) { _ = grpc.SetHeader(ctx, draft11(figs)) }
		if err := s.decide(cl, info.FullMethod, s.enforced, s.shadows, req, send); err != nil {
			return nil, err
		}
		resp, err := handler(cl, req)
		if s.settles {
			s.settle(cl, info.FullMethod, tr, err)
		}
		return resp, err
	}
}

// StreamServerInterceptor limits streams: PerCall policies spend when the
// stream starts, before the handler runs; PerMessage policies spend for each
// message the handler receives, once it has arrived. A refused message is
// not handed over: RecvMsg returns the refusal's status, which the handler
// returns to end the stream with it.
func (s *Server) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if s.cfg.skip != nil && s.cfg.skip(ss.Context(), info.FullMethod) {
			return handler(srv, ss)
		}
		w := &serverStream{ServerStream: ss, s: s, method: info.FullMethod}
		w.cl = &call{Context: ss.Context(), cfg: &s.cfg, lim: s.lim}
		w.tr = s.watch(ss.Context(), w.cl)
		defer w.finish()
		if len(s.startEnf)+len(s.startShadow) > 0 {
			if err := s.decide(w.cl, info.FullMethod, s.startEnf, s.startShadow, nil, w.update); err != nil {
				return err
			}
		}
		err := handler(srv, w)
		if s.settles {
			s.settle(w.cl, info.FullMethod, w.tr, err)
		}
		return err
	}
}

// serverStream is a stream under a Server's policies. Its rate-limit
// metadata names each policy once, with its latest figures: a stream
// decides at its start and for each message, and grpc merges every
// SetHeader into the header, so the figures are kept here and set once,
// just before the header goes out (the first SendMsg or SendHeader, or the
// end of the stream). Figures decided after that go in the trailer.
type serverStream struct {
	grpc.ServerStream
	s      *Server
	cl     *call
	method string
	tr     *trailers // the trailer the handler sets, when a policy settles

	mu   sync.Mutex
	figs []figures // each policy's latest, in the order first decided
	sent bool      // the header went out, or set its figures
	late bool      // figures changed once the header could no longer carry them
}

// Context is the stream's context, through which Refund finds the call.
func (w *serverStream) Context() context.Context { return w.cl }

// update keeps figs as each policy's latest figures.
func (w *serverStream) update(figs []figures) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.late = w.late || w.sent
next:
	for _, f := range figs {
		for i := range w.figs {
			if w.figs[i].rule == f.rule {
				w.figs[i] = f
				continue next
			}
		}
		w.figs = append(w.figs, f)
	}
}

// setHeader sets the figures in the header, once, before it goes out.
func (w *serverStream) setHeader() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sent {
		return
	}
	w.sent = true
	if len(w.figs) > 0 && w.ServerStream.SetHeader(draft11(w.figs)) != nil {
		w.late = true // sent already (grpc.SendHeader on the context): the trailer carries them
	}
}

// SetTrailer sets the trailer, kept for the policies' Used.
func (w *serverStream) SetTrailer(md metadata.MD) {
	if w.tr != nil {
		w.tr.keep(md)
	}
	w.ServerStream.SetTrailer(md)
}

// SendHeader sends the header with the rate-limit metadata.
func (w *serverStream) SendHeader(md metadata.MD) error {
	w.setHeader()
	return w.ServerStream.SendHeader(md)
}

// SendMsg sends a message, after the header with the rate-limit metadata.
func (w *serverStream) SendMsg(m any) error {
	w.setHeader()
	return w.ServerStream.SendMsg(m)
}

// finish sets the figures at the stream's end: in the header if it has not
// gone out (it goes with the status), else in the trailer if they changed.
func (w *serverStream) finish() {
	w.setHeader()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.late && len(w.figs) > 0 {
		w.ServerStream.SetTrailer(draft11(w.figs))
	}
}

// RecvMsg receives a message and decides the PerMessage policies for it.
func (w *serverStream) RecvMsg(m any) error {
	if err := w.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if len(w.s.msgEnf)+len(w.s.msgShadow) == 0 {
		return nil
	}
	return w.s.decide(w.cl, w.method, w.s.msgEnf, w.s.msgShadow, m, w.update)
}

// decide decides the enforced policies enf as one composite and then the
// shadow policies sh as another, hands the figures to send for the
// rate-limit metadata, and returns the status the call fails with, or nil
// for a call that goes on (after a leaky bucket's delay).
func (s *Server) decide(cl *call, method string, enf, sh []*policy, msg any, send func([]figures)) error {
	all, err := gather(cl, method, enf, msg, make([]policycore.Part, 0, len(enf)+len(sh)))
	if err != nil {
		return err
	}
	n := len(all)
	if all, err = gather(cl, method, sh, msg, all); err != nil {
		return err // shadow policies return none; kept for safety
	}
	es, ss := all[:n], all[n:]
	v := verdict{send: s.cfg.headers}
	if len(es) > 0 {
		if err := s.enforce(cl, method, es, &v); err != nil {
			return err
		}
	}
	if len(ss) > 0 {
		v.figs = s.shadow(cl, method, ss, v.send, v.figs)
	}
	if v.send && len(v.figs) > 0 {
		send(v.figs)
	}
	switch {
	case len(es) == 0:
		return nil
	case !v.res.Allowed:
		return refusal(v.refusers, v.res.RetryAfter, "call")
	case v.res.Degraded: // the store's failure policy admitted it
		return nil
	}
	return s.admit(cl, es, v.res, v.lat)
}

// verdict is what decide has found so far.
type verdict struct {
	res      sluice.Result // the enforced composite's, in lat
	lat      time.Duration
	refusers []*policycore.Rule
	// send: the metadata is sent (not with numbers the store did not
	// make); figs are its figures.
	send bool
	figs []figures
}

// enforce decides the enforced parts es as one composite, counts and
// reports each part's outcome but an admission's (admit's), records what
// they spent, and keeps the figures in v. The error is the status of a
// decision the store could not make.
func (s *Server) enforce(cl *call, method string, es []policycore.Part, v *verdict) error {
	o := s.cfg.observer
	each := make([]sluice.Result, len(es))
	var err error
	v.res, v.lat, err = policycore.Take(cl, s.lim, es, each, o != nil)
	switch {
	case err != nil:
		policycore.Record(o, sourceServer, es, observe.Error, v.lat, 0)
		cl.logError(method, err)
		return storeError(cl, err, s.cfg.unavailable)
	case v.res.Degraded && v.res.Allowed:
		policycore.Record(o, sourceServer, es, observe.Degraded, v.lat, 0)
	case v.res.Allowed:
		cl.spend(es, each)
	default: // refused by the store, or by its failure policy's local fallback
		v.refusers = policycore.Refused(es, each)
		policycore.RecordRefused(o, sourceServer, es, each, observe.Denied, v.lat)
	}
	v.send = v.send && !v.res.Degraded // not numbers the store did not make
	if v.send {
		v.figs = figuresOf(es, each)
	}
	return nil
}

// admit lets an admitted call go on once a leaky bucket's turn has come,
// and records each part's outcome: a leaky bucket whose turn came after
// the call's deadline, or after its end, refused it.
func (s *Server) admit(cl *call, es []policycore.Part, res sluice.Result, lat time.Duration) error {
	late := false
	var err error
	if res.Delay > 0 {
		if dl, ok := cl.Deadline(); ok && dl.Sub(s.cfg.clock.Now()) < res.Delay {
			late = true
			err = status.Errorf(codes.DeadlineExceeded, "the call's turn comes in %v, after its deadline", res.Delay)
		} else if serr := s.cfg.clock.Sleep(cl, res.Delay); serr != nil {
			late = true
			err = status.FromContextError(serr).Err()
		}
	}
	for i := range es {
		oc := observe.Allowed
		if late && es[i].Rule.Limit.Algorithm == sluice.LeakyBucket {
			oc = observe.Denied
		}
		es[i].Rule.Record(s.cfg.observer, sourceServer, oc, lat, 0, i)
	}
	return err
}

// shadow decides the shadow parts ss as a composite: counted, never
// refusing. It returns figs with the shadows' figures after the enforced
// ones' when they are sent.
func (s *Server) shadow(cl *call, method string, ss []policycore.Part, send bool, figs []figures) []figures {
	o := s.cfg.observer
	each := make([]sluice.Result, len(ss))
	res, lat, err := policycore.Take(cl, s.lim, ss, each, o != nil)
	switch {
	case err != nil:
		policycore.Record(o, sourceServer, ss, observe.Error, lat, 0)
		cl.logError(method, err)
		return figs
	case res.Degraded && res.Allowed:
		policycore.Record(o, sourceServer, ss, observe.Degraded, lat, 0)
	case res.Allowed:
		cl.spend(ss, each)
		policycore.Record(o, sourceServer, ss, observe.Allowed, lat, 0)
	default:
		policycore.RecordRefused(o, sourceServer, ss, each, observe.ShadowDenied, lat)
	}
	if send && s.cfg.shadowHeaders && !res.Degraded {
		figs = append(figs, figuresOf(ss, each)...)
	}
	return figs
}
