package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/internal/policycore"
)

// checkTrailer checks Used.Trailer and returns it in lower case, as gRPC
// sends metadata keys ("" when it names none).
func checkTrailer(name string) (string, error) {
	if name == "" {
		return "", nil
	}
	k := strings.ToLower(name)
	for i := 0; i < len(k); i++ {
		if c := k[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return "", fmt.Errorf("Used: Trailer %q: not a metadata key", name)
		}
	}
	if strings.HasSuffix(k, "-bin") || strings.HasPrefix(k, "grpc-") {
		return "", fmt.Errorf("Used: Trailer %q: a binary or gRPC-reserved key", name)
	}
	return k, nil
}

// Charge adds units to what the call used under every policy with a Used,
// for a handler that counts as it goes (the tokens of each message it
// streams): once the handler returns, the policy is settled to what the
// handler charged and what its trailer says, added. A stream the client
// left mid-way is settled when the handler returns, to what it charged
// until then. ctx is the handler's context (a stream's Context()). It
// returns ErrNoDecision for a context that did not pass through a Server
// or has no policy with a Used; a Charge after the handler returned
// changes nothing, and says so.
func Charge(ctx context.Context, units int64) error {
	return charge(ctx, "", units)
}

// ChargePolicy is Charge for the one policy named name, which must have
// a Used.
func ChargePolicy(ctx context.Context, name string, units int64) error {
	if name == "" {
		return errors.New("grpclimit: ChargePolicy: empty policy name")
	}
	return charge(ctx, name, units)
}

func charge(ctx context.Context, name string, units int64) error {
	cl := callOf(ctx)
	if cl == nil {
		return ErrNoDecision
	}
	cl.mu.Lock()
	err := policycore.Charge(cl.spent, cl.settled, name, units)
	cl.mu.Unlock()
	if errors.Is(err, policycore.ErrNoCharge) {
		return fmt.Errorf("%w: %w", ErrNoDecision, err)
	}
	if err != nil {
		return fmt.Errorf("grpclimit: %w", err)
	}
	return nil
}

// trailers is a call's grpc.ServerTransportStream, which keeps the
// trailer the handler sets (grpc.SetTrailer) for the policies' Used.
type trailers struct {
	grpc.ServerTransportStream
	mu sync.Mutex
	md metadata.MD
}

// SetTrailer keeps md, and sets it.
func (t *trailers) SetTrailer(md metadata.MD) error {
	t.keep(md)
	if t.ServerTransportStream == nil {
		return nil
	}
	return t.ServerTransportStream.SetTrailer(md)
}

func (t *trailers) keep(md metadata.MD) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.md = metadata.Join(t.md, md)
}

// watch makes cl's context carry a trailers over the call's transport
// stream in ctx, when its policies settle or count, and returns it.
func (s *Server) watch(ctx context.Context, cl *call) *trailers {
	if !s.settles {
		return nil
	}
	tr := &trailers{ServerTransportStream: grpc.ServerTransportStreamFromContext(ctx)}
	if tr.ServerTransportStream != nil {
		cl.Context = grpc.NewContextWithServerTransportStream(ctx, tr)
	}
	return tr
}

// settle settles what the call spent once its handler returned err: a
// failure goes to WithErrorLog's function.
func (s *Server) settle(cl *call, method string, tr *trailers, err error) {
	code := status.Code(err)
	if code == codes.Unknown {
		code = status.FromContextError(err).Code() // a handler's ctx.Err()
	}
	o := &outcome{s: s, cl: cl, method: method, code: code}
	if tr != nil {
		tr.mu.Lock()
		o.md = tr.md
		tr.mu.Unlock()
	}
	// Once settled, the Spends change only by their own atomics (a late
	// Refund): Settle reads them unlocked, so that the Count and the error
	// log it calls may call Charge.
	cl.mu.Lock()
	cl.settled = true
	spent := cl.spent
	cl.mu.Unlock()
	if len(spent) == 0 {
		return
	}
	// The client may have gone: the store is still told.
	if err := policycore.Settle(context.WithoutCancel(cl.Context), s.lim, spent, o); err != nil {
		cl.logError(method, fmt.Errorf("grpclimit: settling what the call used: %w", err))
	}
}

// outcome is what a call's end says, for policycore.Settle.
type outcome struct {
	s      *Server
	cl     *call
	method string
	code   codes.Code
	md     metadata.MD
}

// Counts is Policy.Count of the call's code.
func (o *outcome) Counts(r *policycore.Rule) bool {
	p := o.s.policyOf(r)
	return p.counts == nil || p.counts(o.code)
}

// Used is what the call's trailer says under r's Used; a trailer that
// cannot be read goes to WithErrorLog's function and says nothing.
func (o *outcome) Used(r *policycore.Rule) (int64, bool) {
	p := o.s.policyOf(r)
	if p.trailer == "" {
		return 0, false
	}
	vs := o.md.Get(p.trailer)
	var err error
	switch len(vs) {
	case 0:
		return 0, false
	case 1:
		var n int64
		if n, err = policycore.ParseUnits(vs[0]); err == nil {
			return n, true
		}
	default:
		err = fmt.Errorf("set %d times", len(vs))
	}
	o.cl.logError(o.method, fmt.Errorf("grpclimit: policy %q: what the call used: trailer %s: %w", p.Name, p.trailer, err))
	return 0, false
}

// policyOf is the policy whose rule r is.
func (s *Server) policyOf(r *policycore.Rule) *policy {
	for _, ps := range [][]*policy{s.enforced, s.shadows} {
		for _, p := range ps {
			if &p.Rule == r {
				return p
			}
		}
	}
	panic("grpclimit: a rule of no policy") // Settle is given this Server's Spends only
}
