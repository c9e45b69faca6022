package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policycore"
)

// ConcurrencyPolicy limits the requests of a key in flight at once (at most
// 2 exports of an account running): each request holds a lease of Units
// for its handler's whole run, a streamed response's included, and gives
// it back however the handler ends (it returns, panics, or the client goes
// away). A lease whose handler outlives Limit's lifetime comes back by
// itself then (see sluice.Concurrency): set the lifetime above the longest
// run.
type ConcurrencyPolicy struct {
	// Name names the policy in its store keys, the refusal's body and the
	// observed Events (CheckName's rules, as a Policy's).
	Name string
	// Limit is the concurrency limit, its leases' lifetime, and the units
	// it keeps for critical requests (Limit.Headroom, headroom): a
	// request Critical does not pick holds a slot only while the headroom
	// stays free after it.
	Limit sluice.Concurrency
	// Key returns the key a request holds its slot under; nil is
	// ClientIP() (under a Middleware's Handler, with its proxies). A
	// request with no key is answered 400.
	Key KeyFunc
	// Units is what each request holds; 0 means 1.
	Units int64
	// Critical picks the requests that may use Limit.Headroom too (a health
	// check, a paying customer's checkout); nil picks none.
	Critical func(r *http.Request) bool
}

// Concurrent is the middleware of one ConcurrencyPolicy. It is safe for
// concurrent use.
type Concurrent struct {
	hold        policycore.Hold
	key         KeyFunc
	critical    func(*http.Request) bool
	unavailable time.Duration
	onError     func(*http.Request, error)
}

// NewConcurrent returns the middleware of p on lim. Of the Options,
// WithObserver (Events of Source "http": Allowed when a slot is held,
// Denied, Error, Degraded, and observe.Expired when a handler ends after
// its lease had come back), WithKeyPrefix, WithErrorLog and
// WithUnavailableRetryAfter apply; the others are about rate policies.
func NewConcurrent(lim *sluice.Limiter, p ConcurrencyPolicy, opts ...Option) (*Concurrent, error) {
	if lim == nil {
		return nil, errors.New("httplimit: NewConcurrent: nil Limiter")
	}
	m := &Middleware{unavailable: time.Second, prefix: "httplimit:"}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(m); err != nil {
			return nil, fmt.Errorf("httplimit: %w", err)
		}
	}
	c := &Concurrent{
		hold:        policycore.Hold{Name: p.Name, Limit: p.Limit, Units: p.Units, Lim: lim, Obs: m.obs, Source: ObserveSource},
		key:         p.Key,
		critical:    p.Critical,
		unavailable: m.unavailable,
		onError:     m.onError,
	}
	if err := c.hold.Check(m.prefix); err != nil {
		return nil, fmt.Errorf("httplimit: %w", err)
	}
	if c.key == nil {
		c.key = ClientIP()
	}
	return c, nil
}

// Handler returns next holding a slot for each request while it runs.
// Refused, a request is answered 429 with a Retry-After of the wait until
// enough held leases reach the end of their lifetime (an upper bound while
// none is extended: a slot is usually free much sooner); a store that
// cannot decide is 503.
func (c *Concurrent) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := c.key(r)
		if !ok {
			http.Error(w, "no key for concurrency policy "+strconv.Quote(c.hold.Name), http.StatusBadRequest)
			return
		}
		critical := c.critical != nil && c.critical(r)
		refused, err := c.hold.Run(r.Context(), policycore.Bound(key), critical, func() { next.ServeHTTP(w, r) })
		switch {
		case err != nil:
			if c.onError != nil {
				c.onError(r, err)
			}
			w.Header().Set("Retry-After", strconv.FormatInt(policycore.Seconds(c.unavailable), 10))
			http.Error(w, "the rate limiter is unavailable", http.StatusServiceUnavailable)
		case refused != nil:
			w.Header().Set("Retry-After", strconv.FormatInt(policycore.RetryAfter(refused), 10))
			http.Error(w, "too many requests in flight for concurrency policy "+strconv.Quote(c.hold.Name), http.StatusTooManyRequests)
		}
	})
}
