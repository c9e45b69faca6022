package console

import (
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/sluice-go/sluice/cmd/sluice/internal/browsertest"
)

// TestBrowserRLQSFits: the RLQS view renders, its budgets and shares, and
// at a 1400 px window and a 390 px phone it does not scroll sideways,
// with a long bucket key and a long bound.
func TestBrowserRLQSFits(t *testing.T) {
	for _, width := range []int64{1400, 390} {
		t.Run(fmt.Sprint(width), func(t *testing.T) {
			ctx := browsertest.New(t, browserTimeout)
			o := fakeRLQS(3, 4)
			inner := o.RLQS
			o.RLQS = func(n int) *RLQS {
				v := inner(n)
				v.Top[0].Key = "payments-gateway-production/header_match=api_version_2025_11/x_customer_account_identifier=4f1c2a9e-0b7d-4c55-9a1e-7d2f3b9c8e61"
				return v
			}
			c, _ := newTestConsole(t, o)
			srv := httptest.NewServer(c.Handler())
			t.Cleanup(srv.Close)
			if err := chromedp.Do(ctx, viewport(width), chromedp.Navigate(srv.URL+"/#rlqs"), chromedp.WaitVisible(chromedp.CSS("#rlqs"))); err != nil {
				t.Fatal(err)
			}
			budgets := eval[int](t, ctx, `document.querySelectorAll("#rlqs .rlqs-budget").length`)
			rows := eval[int](t, ctx, `document.querySelectorAll("#rlqs .rlqs-shares tbody tr[data-holder]").length`)
			if budgets != 3 || rows != 12 {
				t.Errorf("%d budgets and %d shares shown, want 3 and 12", budgets, rows)
			}
			checkFits(t, ctx, "the RLQS view")
			browsertest.Screenshot(t, ctx, "rlqs")
		})
	}
}
