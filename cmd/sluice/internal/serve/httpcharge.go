package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
)

// serveCharge is POST /v1/charge: a TakeRequest whose units are charged
// whatever the key has (sluice.Limiter.Charge), never refused: by key, the
// cost under the caller's limit; by descriptors, the hits on every limited
// descriptor's rule, each status over the limit when its hits did not fit.
// Allowed reports whether every unit was charged (none forgiven past the
// debt allowance); Remaining is negative for a key in debt.
func (s *service) serveCharge(w http.ResponseWriter, r *http.Request) {
	s.serveAPI("charge", false, func(b []byte) (apiCall, error) {
		return s.takeCall(b, true, func(ctx context.Context, lim *sluice.Limiter, key string, l sluice.Limit, units int64) (sluice.Result, error) {
			return lim.Charge(ctx, key, l, units)
		}, func(key string, units int64, res sluice.Result, err error, latency time.Duration) {
			s.recordCharge(key, units, chargeOver(&res), res, err, latency)
		})
	})(w, r)
}

// SettleRequest is the body of POST /v1/settle: work taken by key as an
// estimate (a /v1/take of Estimate units), settled once its actual cost
// is known (sluice.Limiter.Settle). Take is /v1/take's answer to that take,
// as it came (its allowed, degraded and window_us are read): a take that
// was refused, or decided by the store's failure policy, spent nothing,
// and all of Actual is charged; else the difference is refunded to the
// take's window, or charged.
type SettleRequest struct {
	Key      string        `json:"key"`
	Limit    string        `json:"limit"`
	Estimate *int64        `json:"estimate"`
	Actual   *int64        `json:"actual"`
	Take     *TakeResponse `json:"take"`
}

// decodeSettleRequest decodes and checks /v1/settle's body.
func decodeSettleRequest(b []byte) (*SettleRequest, error) {
	var t SettleRequest
	if err := decodeJSON(b, &t); err != nil {
		return nil, err
	}
	switch {
	case t.Key == "" || t.Limit == "":
		return nil, errors.New(`"key" and "limit" are both required (a settle names a budget by key)`)
	case t.Estimate == nil || t.Actual == nil:
		return nil, errors.New(`"estimate" and "actual" are both required`)
	case *t.Estimate < 0 || *t.Actual < 0:
		return nil, fmt.Errorf(`"estimate" %d and "actual" %d must not be negative`, *t.Estimate, *t.Actual)
	case t.Take == nil:
		return nil, errors.New(`"take" is required: the answer /v1/take gave to the estimate's take`)
	}
	return &t, nil
}

// serveSettle is POST /v1/settle. Its answer is the refund's or the
// charge's decision, or with nothing to settle a look; never refused.
func (s *service) serveSettle(w http.ResponseWriter, r *http.Request) {
	s.serveAPI("settle", false, func(b []byte) (apiCall, error) {
		t, err := decodeSettleRequest(b)
		if err != nil {
			return nil, err
		}
		if !s.opts.KeyForm {
			return nil, errNoKeyForm
		}
		if err := s.checkChargeUnits(`"estimate"`, *t.Estimate); err != nil {
			return nil, err
		}
		if err := s.checkChargeUnits(`"actual"`, *t.Actual); err != nil {
			return nil, err
		}
		take := sluice.Result{Allowed: t.Take.Allowed, Degraded: t.Take.Degraded, Window: t.Take.WindowUS}
		charged := *t.Actual
		if take.Allowed && !take.Degraded {
			charged = max(*t.Actual-*t.Estimate, 0)
		}
		return func(ctx context.Context, w http.ResponseWriter) (sluice.Result, []TakeStatus, error) {
			called := time.Now()
			res, err := s.decideKey(ctx, w, t.Key, t.Limit, func(lim *sluice.Limiter, key string, l sluice.Limit) (sluice.Result, error) {
				return lim.Settle(ctx, key, l, *t.Estimate, *t.Actual, take)
			})
			s.recordCharge(t.Key, charged, charged > 0 && chargeOver(&res), res, err, time.Since(called))
			return res, nil, err
		}, nil
	})(w, r)
}

// checkChargeUnits checks a charge's or a settle's units (what, the field)
// against the units cap: a charge is never refused, so its units are not
// bounded by its limit's capacity as a take's are.
func (s *service) checkChargeUnits(what string, units int64) error {
	return capped(s.opts.Limits.Check(limits.Units, what, units))
}

// recordCharge reports a charge or a settle by key as an event of
// ChargePolicy, denied when over (the units charged did not fit:
// chargeOver), and the units charged (Options.Charged,
// sluice_serve_units_charged_total with no domain). A call refused for
// what it asks decided nothing and is not reported.
func (s *service) recordCharge(key string, units int64, over bool, res sluice.Result, err error, latency time.Duration) {
	o, decided := callOutcome(err, outcome(!over, res.Degraded))
	if !decided {
		return
	}
	s.observeCall(ChargePolicy, key, o, latency)
	if err == nil && units > 0 {
		s.metrics.unitsCharged.WithLabelValues("", ChargePolicy).Add(float64(units))
		if s.opts.Charged != nil {
			s.opts.Charged(ChargePolicy, units)
		}
	}
}
