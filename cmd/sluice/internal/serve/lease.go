package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
)

// LeaseRequest is the body of POST /v1/acquire, /v1/release and
// /v1/extend, in one of two forms.
//
// By key, a concurrency limit of the caller's, as /v1/take's key form
// names a budget: Key; Limit, the units held at once; Lifetime (a Go
// duration, "30s"; default sluice.DefaultLifetime), how long a lease lives
// unless released or extended; and Lease, the lease a release or an
// extension is about, as an acquire answered it.
//
// By descriptors, a configured concurrency limit (the rules' concurrency:):
// an acquire gives Domain and Descriptors, as /v1/take does, and the
// service finds the limit; a release or an extension gives Lease alone,
// the token the acquire answered.
//
// Units is what an acquire holds (default 1; 0 looks), in both forms.
type LeaseRequest struct {
	Key         string        `json:"key,omitempty"`
	Limit       int64         `json:"limit,omitempty"`
	Lifetime    string        `json:"lifetime,omitempty"`
	Domain      string        `json:"domain,omitempty"`
	Descriptors [][]TakeEntry `json:"descriptors,omitempty"`
	Units       *int64        `json:"units,omitempty"`
	Lease       string        `json:"lease,omitempty"`
}

// byRules reports whether t is in the descriptor form.
func (t *LeaseRequest) byRules() bool {
	return t.Domain != "" || t.Descriptors != nil || strings.HasPrefix(t.Lease, tokenPrefix)
}

// LeaseResponse is the answer of the lease calls: Allowed (an acquire's
// lease is held; a release's or extension's lease was still held), Lease
// and ExpiryUS (µs since the epoch by the store's clock) of a lease held,
// and the figures of sluice.Lease's Result. In the descriptor form, Rule
// names the concurrency limit (its name, else its descriptor path); an
// acquire whose descriptors have none is allowed with nothing held: no
// Lease, Remaining -1.
type LeaseResponse struct {
	Allowed      bool   `json:"allowed"`
	Rule         string `json:"rule,omitempty"`
	Lease        string `json:"lease,omitempty"`
	ExpiryUS     int64  `json:"expiry_us,omitempty"`
	Remaining    int64  `json:"remaining"`
	RetryAfterUS int64  `json:"retry_after_us"`
	ResetAfterUS int64  `json:"reset_after_us"`
	Degraded     bool   `json:"degraded"`
	// key and limit name, for the console's slots table, what a lease of
	// the descriptor form holds: its store key and its limit's units.
	key   string
	limit int64
}

// localLease begins the name of a lease the store's failure policy held
// in this process (FailLocal): its release must come back to it.
const localLease = "local-"

// decodeLeaseRequest decodes and checks a lease call's body; needLease:
// the call names a lease (release, extend). In the key form it returns the
// caller's limit; in the descriptor form (t.byRules()) the zero
// Concurrency, and the service checks the descriptors' bounds.
func decodeLeaseRequest(b []byte, needLease bool) (*LeaseRequest, sluice.Concurrency, error) {
	var t LeaseRequest
	if err := decodeJSON(b, &t); err != nil {
		return nil, sluice.Concurrency{}, err
	}
	if t.Units != nil && *t.Units < 0 {
		return nil, sluice.Concurrency{}, fmt.Errorf(`"units" %d is negative`, *t.Units)
	}
	if t.byRules() {
		return &t, sluice.Concurrency{}, checkRulesForm(&t, needLease)
	}
	c := sluice.MaxConcurrent(t.Limit)
	if t.Lifetime != "" {
		d, err := time.ParseDuration(t.Lifetime)
		if err != nil {
			return nil, c, fmt.Errorf(`"lifetime": %w`, err)
		}
		c.Lifetime = d
	}
	switch {
	case t.Key == "":
		return nil, c, errors.New(`"key" is required`)
	case needLease && t.Lease == "":
		return nil, c, errors.New(`"lease" is required`)
	case !needLease && t.Lease != "":
		return nil, c, errors.New(`"lease" names the lease of a release or an extension`)
	}
	if err := c.Validate(); err != nil {
		return nil, c, err
	}
	return &t, c, nil
}

// checkRulesForm checks a lease call in the descriptor form.
func checkRulesForm(t *LeaseRequest, needLease bool) error {
	switch {
	case t.Key != "" || t.Limit != 0 || t.Lifetime != "":
		return errors.New(`give either "domain" and "descriptors" (or a lease they answered), or "key" and "limit", not both`)
	case needLease && (t.Lease == "" || t.Domain != "" || t.Descriptors != nil || t.Units != nil):
		return errors.New(`a release or an extension of a configured limit gives "lease" alone, as the acquire answered it`)
	case !needLease && t.Lease != "":
		return errors.New(`"lease" names the lease of a release or an extension`)
	case !needLease && (t.Domain == "" || len(t.Descriptors) == 0):
		return errors.New(`"domain" and at least one descriptor are required`)
	}
	return nil
}

// serveLease answers one lease call (op "acquire", "release", "extend").
func (s *service) serveLease(op string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, done, ok := s.readCall(w, r, op)
		defer done()
		if !ok {
			return
		}
		t, c, err := decodeLeaseRequest(b, op != "acquire")
		if err == nil && !t.byRules() {
			if !s.opts.KeyForm {
				s.count(op, "invalid")
				http.Error(w, errNoKeyForm.Error(), http.StatusForbidden)
				return
			}
			err = s.checkKeyForm(t.Key, c.Limit, limits.Lifetime, `"lifetime"`, c.Lifetime)
		}
		if err != nil {
			s.count(op, "invalid")
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		called := time.Now()
		var out *LeaseResponse
		if t.byRules() {
			out, err = s.leaseByRules(r.Context(), op, t)
		} else {
			out, err = s.lease(r.Context(), op, t, c)
		}
		s.recordLease(op, t, out, err, time.Since(called))
		if err != nil {
			s.count(op, codeLabel(grpcError(err)))
			httpError(w, err)
			return
		}
		if out.Degraded {
			s.metrics.degraded.Inc()
		}
		w.Header().Set("Content-Type", "application/json")
		switch {
		case out.Allowed:
			s.count(op, "ok")
		case op == "acquire":
			s.count(op, "over_limit")
			setRetryAfter(w.Header(), time.Duration(out.RetryAfterUS)*time.Microsecond)
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			s.count(op, "not_held") // come back by itself, or released already
		}
		json.NewEncoder(w).Encode(out)
	}
}

// lease runs one lease call on the service's limiter.
func (s *service) lease(ctx context.Context, op string, t *LeaseRequest, c sluice.Concurrency) (*LeaseResponse, error) {
	lim := s.lim
	key := takeKeyPrefix + t.Key
	var ls sluice.Lease
	var err error
	if op == "acquire" {
		units := int64(1)
		if t.Units != nil {
			units = *t.Units
		}
		ls, err = lim.Acquire(ctx, key, c, units)
	} else {
		held := sluice.Lease{Key: key, Limit: c, Units: 1}
		id := t.Lease
		if rest, ok := strings.CutPrefix(id, localLease); ok {
			id, held.Degraded = rest, true
		}
		if held.ID, err = strconv.ParseInt(id, 10, 64); err != nil || held.ID <= 0 {
			return nil, badRequest("lease %q: not a lease an acquire answered", t.Lease)
		}
		if op == "release" {
			ls.Result, err = lim.Release(ctx, held)
			ls.ID = 0
		} else {
			ls, err = lim.Extend(ctx, held, 0)
		}
	}
	if err != nil {
		return nil, leaseError(err)
	}
	out := &LeaseResponse{
		Allowed: ls.Allowed, Remaining: ls.Remaining, Degraded: ls.Degraded,
		RetryAfterUS: ls.RetryAfter.Microseconds(), ResetAfterUS: ls.ResetAfter.Microseconds(),
	}
	if ls.ID != 0 {
		out.Lease, out.ExpiryUS = strconv.FormatInt(ls.ID, 10), ls.Expiry
		if ls.Degraded {
			out.Lease = localLease + out.Lease
		}
	}
	return out, nil
}

// leaseError is a lease operation's error as the service answers it: the
// store's failure or the caller's end as they are, anything else (a unit
// count over the limit, keys in two cluster slots) the request's.
func leaseError(err error) error {
	var re *requestError
	if errors.As(err, &re) || errors.Is(err, sluice.ErrStoreUnavailable) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return badRequest("%v", err)
}
