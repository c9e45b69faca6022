package console

import (
	"fmt"
	"net/http/httptest"
	"sync/atomic"
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

// TestBrowserRLQSLive: the RLQS section follows the service without a
// reload: the script asks /console/api/rlqs again every two seconds and
// redraws the budgets and their shares as the server draws them.
func TestBrowserRLQSLive(t *testing.T) {
	ctx := browsertest.New(t, browserTimeout)
	var calls atomic.Int64
	o := fakeRLQS(3, 4)
	inner := o.RLQS
	o.RLQS = func(n int) *RLQS {
		v := inner(n)
		if calls.Add(1) > 1 { // after the page's own: one budget, its clients gone
			v.Budgets, v.Clients, v.Bound = 1, 7, ""
			v.Top = v.Top[:1]
			v.Top[0].Granted = 123
			v.Top[0].Shares[1].State = "gone"
		}
		return v
	}
	c, _ := newTestConsole(t, o)
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/#rlqs"), chromedp.WaitVisible(chromedp.CSS("#rlqs"))); err != nil {
		t.Fatal(err)
	}
	// a budget's elements and attributes, in order, without their text
	const shape = `Array.from(document.querySelector("#rlqs .rlqs-budget").querySelectorAll("*")).map((e) => e.tagName + "[" + Array.from(e.attributes).map((a) => a.name + "=" + a.value).sort().join(",") + "]").join(" ")`
	server := eval[string](t, ctx, shape)
	waitFor(t, ctx, `Number(document.body.dataset.rlqsPolls || 0) >= 1`)
	if got := eval[int](t, ctx, `document.querySelectorAll("#rlqs .rlqs-budget").length`); got != 1 {
		t.Errorf("%d budgets after a refresh, want 1", got)
	}
	for js, want := range map[string]string{
		`document.querySelector("#rlqs-summary [data-k=clients]").textContent`:                 "7",
		`String(document.querySelector("#rlqs-summary [data-k=bound]"))`:                       "null",
		`document.querySelector("#rlqs .rlqs-budget dd[data-k=granted]").textContent`:          "123",
		`document.querySelectorAll("#rlqs .rlqs-shares td[data-k=state]")[1].textContent`:      "gone",
		`document.querySelectorAll("#rlqs .rlqs-shares td[data-k=demand]")[0].textContent`:     "—",
		`document.querySelectorAll("#rlqs .rlqs-shares td[data-k=lease_ends]")[0].textContent`: "6.5s",
	} {
		if got := eval[string](t, ctx, js); got != want {
			t.Errorf("%s = %q, want %q", js, got, want)
		}
	}
	// The script draws a budget with the template's elements.
	if script := eval[string](t, ctx, shape); script != server {
		t.Errorf("the script draws a budget as\n%s\nthe server as\n%s", script, server)
	}
}
