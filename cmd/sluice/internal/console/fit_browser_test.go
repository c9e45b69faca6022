package console

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/sluice-go/sluice/cmd/sluice/internal/browsertest"
	"github.com/sluice-go/sluice/observe"
)

// wideView is testView with the long names, paths and keys a real
// configuration has.
func wideView() ConfigView {
	v := testView()
	v.Rules = append(v.Rules,
		Rule{Domain: "payments-gateway-production", Path: "header_match=api_version_2025_11 > x_customer_account_identifier > generic_key=checkout", Name: "payments-gateway-production.checkout.per-customer-account", Algorithm: "sliding-window", Rate: 1200, Period: time.Hour, Burst: 1200, Unit: "hour"},
		Rule{Domain: "edge", Path: "remote_address > path", Name: "edge.remote_address.path", Algorithm: "leaky-bucket", Rate: 50, Period: time.Second, Burst: 25, Shadow: true, Unit: "second"},
	)
	return v
}

// viewport sets the page's width (a phone's below 800 px).
func viewport(width int64) chromedp.Action[chromedp.Void] {
	if width < 800 {
		return chromedp.EmulateViewport(width, 844, chromedp.EmulateMobile)
	}
	return chromedp.EmulateViewport(width, 900)
}

// colorScheme makes the page see prefers-color-scheme: scheme.
func colorScheme(scheme string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}},
		})
		return err
	})
}

// checkFits fails when the page, or a box on it, scrolls sideways.
func checkFits(t *testing.T, ctx context.Context, view string) {
	t.Helper()
	browsertest.CheckFits(t, ctx, view)
}

// TestBrowserFits: at a 1400 px window and a 390 px phone, no view of the
// console scrolls sideways: the page, after "Try", after a playground run,
// a walk and its steps, and the sign-in page.
func TestBrowserFits(t *testing.T) {
	for _, width := range []int64{1400, 390} {
		t.Run(fmt.Sprint(width), func(t *testing.T) {
			ctx := browsertest.New(t, browserTimeout)
			c, _ := newTestConsole(t, realHolding(wideView, new(atomic.Int64)))
			srv := httptest.NewServer(c.Handler())
			t.Cleanup(srv.Close)
			for range 3 {
				c.Observe(observe.Event{Policy: "payments-gateway-production.checkout.per-customer-account", Outcome: observe.Denied})
				c.Refused("payments-gateway-production.checkout.per-customer-account", "customer-account:4f1c2a9e-0b7d-4c55-9a1e-7d2f3b9c8e61/checkout-session")
			}
			if err := chromedp.Do(ctx, viewport(width), chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#rules-table"))); err != nil {
				t.Fatal(err)
			}
			waitFor(t, ctx, `Number(document.body.dataset.livePolls || 0) >= 1`)
			checkFits(t, ctx, "the page")
			browsertest.Screenshot(t, ctx, "page")

			// Pressed from the script: a click at a point could land
			// elsewhere while the live view redraws.
			press(t, ctx, `button.try[data-rule="payments-gateway-production.checkout.per-customer-account"]`)
			checkFits(t, ctx, "after Try")
			if x := eval[float64](t, ctx, `document.querySelector('#rules-table td[data-k=domain]').getBoundingClientRect().left`); x < 0 {
				t.Errorf("after Try the Domain column starts at x=%v, off the page", x)
			}
			press(t, ctx, "#sim-run")
			waitFor(t, ctx, `Number(document.body.dataset.simRuns || 0) >= 1 && document.querySelector("#sim-totals, #sim-error")`)
			checkFits(t, ctx, "after a playground run")

			press(t, ctx, "#steps-run")
			waitFor(t, ctx, `Number(document.body.dataset.stepsRuns || 0) >= 1 && document.querySelector("#step-current")`)
			for range 3 {
				press(t, ctx, "#step-forward")
			}
			press(t, ctx, `tr[data-step="2"] summary`)
			checkFits(t, ctx, "a walk, stepped")
			browsertest.Screenshot(t, ctx, "after-runs")

			// Without the script: the walk's table, a step opened.
			disable := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				_, err := cdp.Call(ctx, tg, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
				return err
			})
			err := chromedp.Do(ctx, disable, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#rules-table")),
				chromedp.Click(chromedp.CSS("#steps-run")), chromedp.WaitVisible(chromedp.CSS("#steps-table")),
				chromedp.Click(chromedp.CSS(`tr[data-step="3"] summary`)))
			if err != nil {
				t.Fatal(err)
			}
			checkFits(t, ctx, "a walk without the script, a step open")

			lsrv := loginServer(t)
			if err := chromedp.Do(ctx, chromedp.Navigate(lsrv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#token"))); err != nil {
				t.Fatal(err)
			}
			checkFits(t, ctx, "the sign-in page")
			browsertest.Screenshot(t, ctx, "sign-in")
		})
	}
}

// loginServer is a console behind a token, as serve mounts it: a browser
// without a session gets the sign-in page.
func loginServer(t *testing.T) *httptest.Server {
	t.Helper()
	c, _ := newTestConsole(t, Options{Config: testView, Token: "s3cret"})
	h := c.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer s3cret" || c.Admits(r) {
			h.ServeHTTP(w, r)
			return
		}
		if !c.Refuse(w, r) {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestBrowserColorScheme: the console and its sign-in page follow the
// browser's light or dark preference, and the sign-in page is styled (its
// inline stylesheet passes its own policy). Signing in with a wrong token
// says so; with the right one it opens the console.
func TestBrowserColorScheme(t *testing.T) {
	ctx := browsertest.New(t, browserTimeout)
	_, _, srv := newTestServer(t, testView())
	lsrv := loginServer(t)
	bg := map[string]string{}
	for _, scheme := range []string{"light", "dark"} {
		for _, page := range []struct{ name, url, ready string }{{"console", srv.URL + "/", "#rules-table"}, {"sign-in", lsrv.URL + "/", "#token"}} {
			if err := chromedp.Do(ctx, colorScheme(scheme), chromedp.Navigate(page.url), chromedp.WaitVisible(chromedp.CSS(page.ready))); err != nil {
				t.Fatal(err)
			}
			bg[page.name+" "+scheme] = eval[string](t, ctx, `getComputedStyle(document.body).backgroundColor`)
			browsertest.Screenshot(t, ctx, page.name+"-"+scheme)
		}
	}
	for _, page := range []string{"console", "sign-in"} {
		if bg[page+" light"] == bg[page+" dark"] {
			t.Errorf("%s: the background is %s in light and dark", page, bg[page+" light"])
		}
		if bg[page+" light"] != bg["console light"] || bg[page+" dark"] != bg["console dark"] {
			t.Errorf("the sign-in page's background is not the console's: %v", bg)
		}
	}
	if got := eval[string](t, ctx, `getComputedStyle(document.querySelector(".login-form")).borderTopStyle`); got != "solid" {
		t.Errorf("the sign-in form is not styled (border %q)", got)
	}
	err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#token"), "wrong"), chromedp.Submit(chromedp.CSS("#token")), chromedp.WaitVisible(chromedp.CSS("#login-error")))
	if err != nil {
		t.Fatal(err)
	}
	err = chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#token"), "s3cret"), chromedp.Submit(chromedp.CSS("#token")), chromedp.WaitVisible(chromedp.CSS("#rules-table")))
	if err != nil {
		t.Fatal(err)
	}
	if got := eval[string](t, ctx, `document.title`); !strings.Contains(got, "console") {
		t.Errorf("after signing in the page is %q", got)
	}
}

// press clicks the element sel names from the page's script.
func press(t *testing.T, ctx context.Context, sel string) {
	t.Helper()
	if !eval[bool](t, ctx, fmt.Sprintf(`(e => { if (!e) return false; e.click(); return true })(document.querySelector(%q))`, sel)) {
		t.Fatalf("no %s to press", sel)
	}
}
