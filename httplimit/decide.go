package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policycore"
	"github.com/sluice-go/sluice/observe"
)

// decided is the enforced composite's outcome, when serve has it.
type decided struct {
	res sluice.Result
	lat time.Duration
	err error
}

// verdict is what decide has found so far.
type verdict struct {
	res     sluice.Result // the enforced composite's
	allowed bool
	// send: the headers are sent (not with numbers the store did not
	// make); results are their figures.
	send    bool
	results []PolicyResult
}

// decide is serve past the common case (a refusal, a degraded decision, a
// leaky bucket's delay, several policies or shadow policies): the enforced
// composite is decided (unless serve has: pre), then the shadows', and
// the request is answered or passed on.
func (m *Middleware) decide(w http.ResponseWriter, r, in *http.Request, st *state, enforced, shadows []policycore.Part, pre *decided, next http.Handler) {
	if st == nil {
		st = &state{in: in, m: m}
	}
	d := st.decision()
	v := verdict{allowed: true, send: len(m.headers) > 0, results: d.resultBuf[:0]}
	// each holds each part's own result at the decision, the enforced
	// parts' then the shadows'.
	var eachBuf [2]sluice.Result
	each := eachBuf[:]
	if n := len(enforced) + len(shadows); n > len(eachBuf) {
		each = make([]sluice.Result, n)
	}
	if len(enforced) > 0 && !m.decideEnforced(w, r, st, enforced, each[:len(enforced)], pre, &v) {
		return
	}
	d.Allowed = v.allowed
	if len(shadows) > 0 {
		m.decideShadows(r, st, shadows, each[len(enforced):len(enforced)+len(shadows)], &v)
	}
	if len(v.results) > 0 {
		d.Policies = v.results
	}
	if v.send {
		m.writeHeaders(w.Header(), v.results, &st.headerVals)
	}
	if !v.allowed {
		m.refuse(w, r, st, d.Refused, v.res.RetryAfter)
		return
	}
	m.pass(w, r, in, st, v.res.Delay, next)
}

// decideEnforced decides the enforced parts ps as one composite (serve's
// outcome pre, when it has it), counts and reports each part's outcome,
// records what an admitted request spent, and keeps the figures in v.
// False when the store could not decide: the request was answered.
func (m *Middleware) decideEnforced(w http.ResponseWriter, r *http.Request, st *state, ps []policycore.Part, each []sluice.Result, pre *decided, v *verdict) bool {
	var lat time.Duration
	var err error
	if pre != nil { // one enforced part
		v.res, lat, err = pre.res, pre.lat, pre.err
		each[0] = v.res
	} else {
		v.res, lat, err = policycore.Take(r.Context(), m.lim, ps, each, m.obs != nil)
	}
	if err != nil {
		policycore.Record(m.obs, ObserveSource, ps, observe.Error, lat, 0)
		m.failed(w, st.request(r), err)
		return false
	}
	d := st.decision()
	d.Result, v.allowed = v.res, v.res.Allowed
	switch {
	case v.res.Degraded && v.allowed:
		policycore.Record(m.obs, ObserveSource, ps, observe.Degraded, lat, 0)
	case v.allowed:
		policycore.Record(m.obs, ObserveSource, ps, observe.Allowed, lat, v.res.Delay)
		d.spent = policycore.AppendSpends(d.spent, ps, each)
	default: // refused by the store, or by its failure policy's local fallback
		d.Refused = policycore.RefusedNames(ps, each)
		policycore.RecordRefused(m.obs, ObserveSource, ps, each, observe.Denied, lat)
	}
	v.send = v.send && !v.res.Degraded // not numbers the store did not make
	if v.send {
		v.results = numbers(v.results, ps, each)
	}
	return true
}

// decideShadows decides the shadow parts ps as a composite of their own:
// counted and reported, never refusing. With shadow headers, their figures
// follow the enforced ones in v.
func (m *Middleware) decideShadows(r *http.Request, st *state, ps []policycore.Part, each []sluice.Result, v *verdict) {
	res, lat, err := policycore.Take(r.Context(), m.lim, ps, each, m.obs != nil)
	switch {
	case err != nil:
		policycore.Record(m.obs, ObserveSource, ps, observe.Error, lat, 0)
		m.logError(st, r, err)
		return
	case res.Degraded && res.Allowed:
		policycore.Record(m.obs, ObserveSource, ps, observe.Degraded, lat, 0)
	case res.Allowed:
		policycore.Record(m.obs, ObserveSource, ps, observe.Allowed, lat, 0)
		d := st.decision()
		d.spent = policycore.AppendSpends(d.spent, ps, each)
	default:
		st.decision().ShadowRefused = policycore.RefusedNames(ps, each)
		policycore.RecordRefused(m.obs, ObserveSource, ps, each, observe.ShadowDenied, lat)
	}
	if v.send && m.shadowHeaders && !res.Degraded {
		v.results = numbers(v.results, ps, each)
	}
}

// refuse answers a request the policies named refused refused: Retry-After
// (whole seconds, at least 1) and the deny handler, given r carrying st,
// or a problem body.
func (m *Middleware) refuse(w http.ResponseWriter, r *http.Request, st *state, refused []string, retryAfter time.Duration) {
	retry := max(policycore.Seconds(retryAfter), 1)
	w.Header().Set("Retry-After", strconv.FormatInt(retry, 10))
	if m.deny != nil {
		sw := &statusWriter{ResponseWriter: w, status: m.status}
		m.deny.ServeHTTP(sw, st.request(r))
		if !sw.wrote {
			sw.WriteHeader(m.status)
		}
		return
	}
	detail := fmt.Sprintf("refused by %s; retry in %ds", quoteList(refused), retry)
	writeProblem(w, m.status, ProblemType, "Request cannot be satisfied as assigned quota has been exceeded", detail, refused)
}

// failed answers a decision the store could not make.
func (m *Middleware) failed(w http.ResponseWriter, r *http.Request, err error) {
	if m.onError != nil {
		m.onError(r, err)
	}
	if errors.Is(err, sluice.ErrCostExceedsCapacity) {
		writeProblem(w, http.StatusRequestEntityTooLarge, "about:blank", "Content Too Large",
			"the request's cost exceeds what a rate-limit policy can ever admit", nil)
		return
	}
	w.Header().Set("Retry-After", strconv.FormatInt(max(policycore.Seconds(m.unavailable), 1), 10))
	writeProblem(w, http.StatusServiceUnavailable, "about:blank", "Service Unavailable",
		"the rate limiter is unavailable", nil)
}

// logError gives err to WithErrorLog's function with r carrying st.
func (m *Middleware) logError(st *state, r *http.Request, err error) {
	if m.onError != nil {
		m.onError(st.request(r), err)
	}
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	if len(q) == 1 {
		return "policy " + q[0]
	}
	return "policies " + strings.Join(q, ", ")
}
