package httplimit

import (
	"fmt"
	"net/http"
	"net/netip"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policycore"
	"github.com/sluice-go/sluice/observe"
)

// serve is the Middleware's path for one request: its parts, then the
// common case (one enforced policy admits it at once) here, anything else
// in decide.
func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	// st stays nil with WithoutDecisionContext and no user's function, until
	// a path other than the common one needs it: the common one needs none.
	var st *state
	in := r // the request as it came, for the next handler without the context
	if !m.bare || m.userFuncs || m.settles {
		// The copy of the request is made here when a user's function
		// may read its context, else once the request is admitted.
		var sr *stateReq
		if m.settles {
			s := &settleReq{}
			sr, s.uw = &s.stateReq, &s.w
		} else {
			sr = &stateReq{}
		}
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
	var partBuf [2]policycore.Part
	enforced, ok := m.parts(partBuf[:0], w, r, st, m.enforced)
	if !ok {
		return
	}
	// The shadows' parts go after the enforced ones while they fit.
	var spare []policycore.Part
	if len(enforced) <= len(partBuf) {
		spare = partBuf[len(enforced):len(enforced)]
	}
	shadows, ok := m.parts(spare, w, r, st, m.shadows)
	if !ok {
		return
	}
	if len(enforced) == 1 && len(shadows) == 0 {
		res, lat, err := policycore.Take(r.Context(), m.lim, enforced, nil, m.obs != nil)
		if err == nil && res.Allowed && !res.Degraded && res.Delay == 0 {
			m.passOne(w, r, in, st, enforced, res, lat, next)
			return
		}
		m.decide(w, r, in, st, enforced, nil, &decided{res, lat, err}, next)
		return
	}
	m.decide(w, r, in, st, enforced, shadows, nil, next)
}

// passOne is the common case: one enforced part (one) admitted at once,
// with res, in lat. Its Decision is made only if asked for, its headers
// are written from the one result.
func (m *Middleware) passOne(w http.ResponseWriter, r, in *http.Request, st *state, one []policycore.Part, res sluice.Result, lat time.Duration, next http.Handler) {
	policycore.Record(m.obs, ObserveSource, one, observe.Allowed, lat, 0)
	var vals *[2]string // the header values' backing
	if st != nil {
		st.one = one[0]
		st.remaining, st.resetAfter, st.window = res.Remaining, int64(res.ResetAfter), res.Window
		vals = &st.headerVals
	}
	if len(m.headers) > 0 {
		if vals == nil {
			vals = new([2]string)
		}
		figs := [1]PolicyResult{result(&one[0], res.Remaining, int64(res.ResetAfter))}
		m.writeHeaders(w.Header(), figs[:], vals)
	}
	m.serveNext(w, m.nextRequest(st, in, r), st, next) // in when st is nil (bare)
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
	m.serveNext(w, m.nextRequest(st, in, r), st, next)
}

// nextRequest is the request the next handler gets: the one that came (in)
// with WithoutDecisionContext, else r carrying st.
func (m *Middleware) nextRequest(st *state, in, r *http.Request) *http.Request {
	if m.bare {
		return in
	}
	return st.request(r)
}

// parts appends each policy's store key and cost to out; false when the
// request was answered (a missing key, a bad cost). st is nil when serve
// has made none yet (WithoutDecisionContext, no user's function): an
// answer makes one.
func (m *Middleware) parts(out []policycore.Part, w http.ResponseWriter, r *http.Request, st *state, pols []*policy) ([]policycore.Part, bool) {
	for _, p := range pols {
		skey, ok := m.storeKey(r, p)
		if !ok {
			if p.MissingKey() {
				continue
			}
			m.answerMissing(w, r, st, p)
			return nil, false
		}
		cost := p.Cost
		if p.CostFunc != nil {
			c, err := policycore.CheckCost(p.CostFunc(r))
			if err != nil {
				m.badCost(w, r, st, p, err)
				if p.Shadow { // a shadow policy never answers
					continue
				}
				return nil, false
			}
			cost = c
		}
		out = append(out, policycore.Part{Rule: &p.Rule, Key: skey, Cost: cost, Headroom: p.headroomFor(r)})
	}
	return out, true
}

// storeKey is p's store key for r: its KeyPrefix and r's key.
func (m *Middleware) storeKey(r *http.Request, p *policy) (string, bool) {
	if !p.clientIP {
		key, ok := p.Key(r)
		if !ok || key == "" {
			return "", false
		}
		return p.KeyPrefix + key, true
	}
	// ClientIP(), with the address written after the prefix in a stack
	// buffer: the store key is the one allocation.
	var buf [128]byte
	b, ok := append(buf[:0], p.KeyPrefix...), false
	if !m.ip.TrustsProxies() {
		// The peer's IPv4 address as RemoteAddr writes it, when that is
		// its canonical form.
		b, ok = appendIPv4Host(b, r.RemoteAddr)
	}
	if !ok {
		var a netip.Addr
		if a, ok = m.ip.Resolve(peerAddr(r), r.Header.Values); !ok {
			return "", false
		}
		b = m.ip.AppendKey(b[:len(p.KeyPrefix)], a)
	}
	return string(b), true
}

// answerMissing answers a request that carries no key for p.
func (m *Middleware) answerMissing(w http.ResponseWriter, r *http.Request, st *state, p *policy) {
	if st == nil {
		st = &state{in: r, m: m} // r is the request as it came
	}
	st.decision().Missing = p.Name
	if m.missing != nil {
		m.missing.ServeHTTP(w, st.request(r))
		return
	}
	writeProblem(w, http.StatusBadRequest, "about:blank", "Bad Request",
		fmt.Sprintf("the request carries no key for rate-limit policy %q", p.Name), nil)
}

// badCost counts and logs a cost p's CostFunc could not read, and answers
// it unless p is a shadow policy.
func (m *Middleware) badCost(w http.ResponseWriter, r *http.Request, st *state, p *policy, err error) {
	p.Count(observe.Error)
	if m.obs != nil { // the store was not called
		m.obs.Observe(observe.Event{Source: ObserveSource, Policy: p.Name, Outcome: observe.Error})
	}
	m.logError(st, r, fmt.Errorf("httplimit: policy %q: cost: %w", p.Name, err))
	if !p.Shadow {
		writeProblem(w, http.StatusBadRequest, "about:blank", "Bad Request",
			fmt.Sprintf("the request's cost under rate-limit policy %q cannot be read", p.Name), nil)
	}
}
