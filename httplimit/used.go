package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/sluice-go/sluice/internal/policycore"
)

// Used says where a policy reads what a request actually used, once its
// response is known (Policy.Used): at most one of Header, JSON and Func,
// and what the handler charges (Charge, ChargePolicy), added. The zero
// Used reads only the handler's charges. When nothing says (no handler
// charge, the header absent, a body without the field), the request's
// estimate stands; what cannot be read (a header that is not a number,
// bad JSON) is given to WithErrorLog's function and says nothing.
type Used struct {
	// Header names a response header field whose value is the units used
	// (a decimal integer ≥ 0): X-Tokens-Used. A trailer of that name says
	// too (the Middleware: a trailer the handler declared, or set with
	// the http.TrailerPrefix; a Transport: the upstream's, once its body
	// was read to its end).
	Header string
	// JSON is the path of an integer in a JSON response body:
	// {"usage", "total_tokens"} reads {"usage":{"total_tokens":1234}},
	// as OpenAI's API reports it. A text/event-stream body is read event
	// by event, each event's data a JSON document of its own, and the
	// last event that has the field says (a stream reports its usage in
	// its last event). The body is read as it goes by, never kept.
	JSON []string
	// MaxBytes is how much of the body JSON reads (default 16 MiB): past
	// it, the usage read so far says (a stream's), else nothing.
	MaxBytes int64
	// Func reads the units from the response; ok false says nothing.
	Func func(r *http.Request, resp *Response) (units int64, ok bool)
}

// Response is what Used.Func reads of a response.
type Response struct {
	// StatusCode is the response's status: what the handler wrote (200
	// when it wrote none), or the upstream's.
	StatusCode int
	// Header is the response's header: the handler's, as it left it when
	// it returned (its trailers included, as net/http keeps them), or the
	// upstream's.
	Header http.Header
	// Trailer is the upstream's trailer, once its body was read to its
	// end (a Transport); nil in the Middleware.
	Trailer http.Header
	// Bytes is how many bytes of the body the handler wrote, or were
	// read from the upstream.
	Bytes int64
}

// checkUsed checks u, a policy's Used, and returns its header's
// canonical name ("" when it reads none).
func checkUsed(u *Used) (string, error) {
	set := 0
	for _, b := range []bool{u.Header != "", u.JSON != nil, u.Func != nil} {
		if b {
			set++
		}
	}
	if set > 1 {
		return "", errors.New("Used: set one of Header, JSON and Func, not several")
	}
	if u.MaxBytes < 0 || u.MaxBytes > 0 && u.JSON == nil {
		return "", fmt.Errorf("Used: MaxBytes %d: a positive bound of what JSON reads", u.MaxBytes)
	}
	if u.JSON != nil && len(u.JSON) == 0 {
		return "", errors.New("Used: JSON: an empty path")
	}
	for _, k := range u.JSON {
		for _, c := range k {
			// A key read with a \u escape of half a surrogate pair, or
			// invalid UTF-8, is not matched: no path may name one.
			if c == utf8.RuneError || c > 0xFFFF {
				return "", fmt.Errorf("Used: JSON: key %q: only characters of the Basic Multilingual Plane, and no U+FFFD", k)
			}
		}
	}
	if u.Header == "" {
		return "", nil
	}
	name := strings.TrimSpace(u.Header)
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return "", fmt.Errorf("Used: Header %q: not a field name", u.Header)
		}
	}
	if name == "" {
		return "", fmt.Errorf("Used: Header %q: not a field name", u.Header)
	}
	return http.CanonicalHeaderKey(name), nil
}

// headerUnits reads the units the field name (canonical) says in h, or
// in the trailer: t, or h's keys that carry http.TrailerPrefix.
func headerUnits(h, t http.Header, name string) (int64, bool, error) {
	vs, ok := h[name]
	if !ok {
		vs, ok = t[name]
	}
	if !ok && t == nil {
		for k, v := range h {
			if len(k) > len(http.TrailerPrefix) && strings.HasPrefix(k, http.TrailerPrefix) && strings.EqualFold(k[len(http.TrailerPrefix):], name) {
				vs, ok = v, true
				break
			}
		}
	}
	switch {
	case !ok || len(vs) == 0:
		return 0, false, nil
	case len(vs) > 1:
		return 0, false, fmt.Errorf("%s sent %d times", name, len(vs))
	}
	n, err := policycore.ParseUnits(vs[0])
	if err != nil {
		return 0, false, fmt.Errorf("%s: %w", name, err)
	}
	return n, true, nil
}

// Charge adds units to what the request used under every policy with a
// Used, for a handler that counts as it goes (the tokens of each event
// it streams): once the handler returns, the policy is settled to what
// the handler charged and what the response says, added. A stream the
// client left mid-way is settled when the handler returns, to what it
// charged until then. It returns ErrNoDecision for a context that did
// not pass through a Middleware or has no policy with a Used; a Charge
// after the handler returned changes nothing, and says so.
func Charge(ctx context.Context, units int64) error {
	return charge(ctx, "", units)
}

// ChargePolicy is Charge for the one policy named name, which must have
// a Used.
func ChargePolicy(ctx context.Context, name string, units int64) error {
	if name == "" {
		return errors.New("httplimit: ChargePolicy: empty policy name")
	}
	return charge(ctx, name, units)
}

func charge(ctx context.Context, name string, units int64) error {
	st := stateOf(ctx)
	if st == nil {
		return ErrNoDecision
	}
	err := policycore.Charge(st.decision().spent, st.settled.Load(), name, units)
	if errors.Is(err, policycore.ErrNoCharge) {
		return fmt.Errorf("%w: %w", ErrNoDecision, err)
	}
	if err != nil {
		return fmt.Errorf("httplimit: %w", err)
	}
	return nil
}

// usedWriter is the ResponseWriter of a request under policies that
// settle or count: it keeps what Settle asks of the response (the
// policycore.Outcome), and passes everything on.
//
// Its fields are few on purpose: with the request and its state it makes
// settleReq, which stays within 512 bytes, the largest allocation the
// runtime makes without a header.
type usedWriter struct {
	http.ResponseWriter
	st     *state        // its Middleware is st.m
	r      *http.Request // the handler's
	status int
	bytes  int64
	scans  *[]*usage // each Used.JSON's (policy.scan), made at the first write
}

// WriteHeader keeps the response's status: the first that is not 1xx.
func (uw *usedWriter) WriteHeader(code int) {
	if uw.status == 0 && code >= 200 {
		uw.status = code
	}
	uw.ResponseWriter.WriteHeader(code)
}

// Write counts the body's bytes and reads them for JSON usages.
func (uw *usedWriter) Write(b []byte) (int, error) {
	if uw.status == 0 {
		uw.status = http.StatusOK
	}
	n, err := uw.ResponseWriter.Write(b)
	uw.bytes += int64(n)
	if uw.st.m.scans > 0 {
		if uw.scans == nil {
			uw.startScans()
		}
		for _, s := range *uw.scans {
			s.write(b[:n])
		}
	}
	return n, err
}

// startScans makes a usage for each Used.JSON, for the body's type.
func (uw *usedWriter) startScans() {
	m := uw.st.m
	scans := make([]*usage, m.scans)
	uw.scans = &scans
	ct := uw.Header().Get("Content-Type")
	for _, ps := range [][]*policy{m.enforced, m.shadows} {
		for _, p := range ps {
			if p.scan >= 0 {
				scans[p.scan] = newUsage(p.used.JSON, p.maxBytes(), ct)
			}
		}
	}
}

// Flush sends what was written (a stream's events).
func (uw *usedWriter) Flush() {
	if f, ok := uw.ResponseWriter.(http.Flusher); ok {
		f.Flush()
		return
	}
	_ = http.NewResponseController(uw.ResponseWriter).Flush()
}

// Unwrap gives http.ResponseController the writer underneath.
func (uw *usedWriter) Unwrap() http.ResponseWriter { return uw.ResponseWriter }

// Counts is Policy.Count of the response's status.
func (uw *usedWriter) Counts(r *policycore.Rule) bool {
	return uw.st.m.policyOf(r).count(uw.status)
}

// Used is what the response says the request used under r's Used; what
// cannot be read goes to WithErrorLog's function and says nothing.
func (uw *usedWriter) Used(r *policycore.Rule) (int64, bool) {
	p := uw.st.m.policyOf(r)
	n, ok, err := p.readUsed(uw.r, Response{StatusCode: uw.status, Header: uw.Header(), Bytes: uw.bytes}, uw.scanOf(p))
	if err != nil {
		uw.st.m.logError(uw.st, uw.r, err)
	}
	return n, ok
}

// scanOf is p's usage of the body, nil when p reads none or nothing was
// written.
func (uw *usedWriter) scanOf(p *policy) *usage {
	if p.scan < 0 || uw.scans == nil || uw.bytes == 0 { // no body says nothing
		return nil
	}
	return (*uw.scans)[p.scan]
}

// readUsed is what resp (and, for Used.JSON, its body's usage s) says r
// used under p's Used. resp.Header's trailer is resp.Trailer, or, with
// none, its keys with http.TrailerPrefix.
func (p *policy) readUsed(r *http.Request, resp Response, s *usage) (int64, bool, error) {
	u := p.used
	var n int64
	var ok bool
	var err error
	switch {
	case p.usedHeader != "":
		n, ok, err = headerUnits(resp.Header, resp.Trailer, p.usedHeader)
	case u.JSON != nil && s != nil:
		n, ok, err = s.result()
	case u.Func != nil:
		f := resp // to the heap only here
		if n, ok = u.Func(r, &f); ok && n < 0 {
			ok, err = false, fmt.Errorf("Used.Func said %d units", n)
		}
	}
	if err != nil {
		return 0, false, fmt.Errorf("httplimit: policy %q: what the response used: %w", p.Name, err)
	}
	return n, ok, nil
}

// maxBytes is how much of a body p's Used.JSON reads.
func (p *policy) maxBytes() int64 {
	if p.used.MaxBytes > 0 {
		return p.used.MaxBytes
	}
	return defaultMaxUsageBytes
}

// count is Policy.Count of a status; every status counts without one.
func (p *policy) count(status int) bool { return p.counts == nil || p.counts(status) }

// policyOf is the policy whose rule r is.
func (m *Middleware) policyOf(r *policycore.Rule) *policy {
	for _, ps := range [][]*policy{m.enforced, m.shadows} {
		for _, p := range ps {
			if &p.Rule == r {
				return p
			}
		}
	}
	panic("httplimit: a rule of no policy") // Settle is given this Middleware's Spends only
}

// serveNext hands an admitted request to next: under policies that
// settle or count, through a writer that watches the response, settled
// once next returns (or panics).
func (m *Middleware) serveNext(w http.ResponseWriter, req *http.Request, st *state, next http.Handler) {
	if st == nil || st.uw == nil {
		next.ServeHTTP(w, req)
		return
	}
	uw := st.uw
	uw.ResponseWriter, uw.st, uw.r = w, st, req
	defer m.settle(uw)
	next.ServeHTTP(uw, req)
}

// settle settles what the request spent once its handler returned: a
// failure goes to WithErrorLog's function, and the response stands.
func (m *Middleware) settle(uw *usedWriter) {
	st := uw.st
	st.settled.Store(true)
	if uw.status == 0 {
		uw.status = http.StatusOK
	}
	var one [1]policycore.Spend
	var ss []policycore.Spend
	if d := st.dec.Load(); d != nil {
		ss = d.spent
	} else if st.one.Rule != nil { // the common case: no Decision was asked for
		ss = policycore.AppendSpend(one[:0], &st.one, st.window)
	}
	if len(ss) == 0 {
		return
	}
	// The client may have gone (a stream it left): its context is done,
	// and the store is still told.
	if err := policycore.Settle((*detached)(st), m.lim, ss, uw); err != nil {
		m.logError(st, uw.r, fmt.Errorf("httplimit: settling what the request used: %w", err))
	}
}
