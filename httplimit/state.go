package httplimit

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policycore"
)

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
	one                           policycore.Part
	remaining, resetAfter, window int64
	// headerVals backs RateLimit-Policy's and RateLimit's values
	// (writeHeaders).
	headerVals [2]string
	// uw watches the response when a policy settles or counts (nil when
	// none does); settled is set once the handler returned.
	uw      *usedWriter
	settled atomic.Bool
}

// decision is a Decision and what the request spent, with room for two
// policies' numbers and spends: one allocation for them all.
type decision struct {
	Decision
	spent     []policycore.Spend
	resultBuf [2]PolicyResult
	spendBuf  [2]policycore.Spend
}

// newDecision returns a decision whose slices start in its buffers.
func newDecision() *decision {
	d := new(decision)
	d.spent = d.spendBuf[:0]
	return d
}

// stateReq is a state and the request the next handler gets, which carries
// it: one allocation for both.
type stateReq struct {
	state
	r http.Request
}

// settleReq is a stateReq and the writer that watches the response, for
// a Middleware whose policies settle or count: one allocation for all.
type settleReq struct {
	stateReq
	w usedWriter
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

// detached is a state as a context that never ends: the request's
// values without its cancellation, for settling once its client may have
// gone (context.WithoutCancel, without its allocation).
type detached state

// Deadline is none.
func (*detached) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done is never closed.
func (*detached) Done() <-chan struct{} { return nil }

// Err is nil.
func (*detached) Err() error { return nil }

// Value is the state's.
func (d *detached) Value(key any) any { return (*state)(d).Value(key) }

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
	if p := &st.one; p.Rule != nil {
		d.Allowed = true
		d.Result = sluice.Result{Allowed: true, Remaining: st.remaining, ResetAfter: time.Duration(st.resetAfter), Window: st.window}
		if len(st.m.headers) > 0 {
			d.Policies = append(d.resultBuf[:0], result(p, st.remaining, st.resetAfter))
		}
		d.spent = policycore.AppendSpend(d.spent, p, st.window)
	}
	if st.dec.CompareAndSwap(nil, d) {
		return d
	}
	return st.dec.Load()
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
