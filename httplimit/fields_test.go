package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/httplimit"
)

// TestHeaderCannotReachAnotherPolicysKey: a policy's keys are prefix +
// name + ":" + key, so a name with ':' let a client's header under policy
// "tenant" name policy "tenant:all"'s key: X-Tenant "all:global" spent its
// Static("global") budget (and, in one Middleware, made the composite name
// a key twice: a 503). Names with ':' are refused, wherever a policy is
// made, and the header's ':' stays in the tenant's own key.
func TestHeaderCannotReachAnotherPolicysKey(t *testing.T) {
	tenant := httplimit.Policy{Name: "tenant", Limit: sluice.PerMinute(100), Key: httplimit.Header("X-Tenant")}
	global := httplimit.Policy{Name: "tenant:all", Limit: sluice.PerMinute(1), Key: httplimit.Static("global")}
	lim := frozenLimiter(newClock())
	for what, err := range map[string]error{
		"New with both":   second(httplimit.New(lim, []httplimit.Policy{tenant, global})),
		"New with one":    second(httplimit.New(lim, []httplimit.Policy{global})),
		"NewTransport":    second(httplimit.NewTransport(lim, []httplimit.Policy{global})),
		"NewTransport, 2": second(httplimit.NewTransport(lim, []httplimit.Policy{tenant, global})),
	} {
		if err == nil || !strings.Contains(err.Error(), "':'") {
			t.Errorf("%s accepted the name %q, or did not say ':' is refused: %v", what, global.Name, err)
		}
	}
	w, r := httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Tenant", "all:global")
	mustNew(t, lim, []httplimit.Policy{tenant}).Handler(echo).ServeHTTP(w, r)
	if look, err := lim.Take(context.Background(), "httplimit:tenant:all:global", tenant.Limit, 0); w.Code != http.StatusOK || err != nil || look.Remaining != 99 {
		t.Errorf("X-Tenant all:global: %d, and its key under tenant has %d left (%v), want 200 and 99", w.Code, look.Remaining, err)
	}
}

// second is the error of a constructor's answer.
func second[T any](_ T, err error) error { return err }

// TestFieldsParseAsRFC9651 reads every field the middleware sends with an
// independent parser (httpsfv, in parseSFList): names with '%' and
// spaces, a figure beyond an Integer, several policies, shadow headers,
// and a refusal.
func TestFieldsParseAsRFC9651(t *testing.T) {
	lim := frozenLimiter(newClock())
	huge := sluice.Per(1<<50, time.Second).WithAlgorithm(sluice.FixedWindow) // 16 digits
	ps := []httplimit.Policy{
		{Name: "50% off", Limit: sluice.PerMinute(2).WithBurst(3)},
		{Name: "huge", Limit: huge, Key: httplimit.Static("all")},
		{Name: "shadow ~!#$&'()*+,-./;<=>?@[]^_`{|}", Limit: sluice.PerMinute(1), Key: httplimit.Static("all"), Shadow: true},
	}
	m := mustNew(t, lim, ps, httplimit.WithShadowHeaders(), httplimit.WithHeaders(httplimit.HeadersDraft11, httplimit.HeadersXRateLimit))
	h := m.Handler(echo)
	wantQ := []int64{3, 999_999_999_999_999, 1}
	for i := range 5 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		where := fmt.Sprintf("request %d (%d)", i, w.Code)
		pol, err := parseSFList(w.Header().Get("RateLimit-Policy"))
		if err != nil || len(pol) != len(ps) {
			t.Fatalf("%s: RateLimit-Policy %q: %v", where, w.Header().Get("RateLimit-Policy"), err)
		}
		cur, err := parseSFList(w.Header().Get("RateLimit"))
		if err != nil || len(cur) != len(ps) {
			t.Fatalf("%s: RateLimit %q: %v", where, w.Header().Get("RateLimit"), err)
		}
		for j, p := range ps {
			if pol[j].Value != p.Name || cur[j].Value != p.Name {
				t.Errorf("%s: item %d names %q and %q, want %q", where, j, pol[j].Value, cur[j].Value, p.Name)
			}
			q, r := pol[j].Params["q"], cur[j].Params["r"]
			if q != wantQ[j] || r.(int64) > q.(int64) {
				t.Errorf("%s: %q has q=%v r=%v, want q=%d and r no more", where, p.Name, q, r, wantQ[j])
			}
		}
	}
}
