package cli

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/sluice-go/sluice/cmd/sluice/internal/browsertest"
	"github.com/sluice-go/sluice/cmd/sluice/internal/serve"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/redisstore"
)

func evalJS[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return v
}

func waitJS(t *testing.T, ctx context.Context, js string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](js, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("waiting for %s: %v", js, err)
	}
}

// TestBrowserServeHolding: in Chromium, the console of `sluice serve` on a
// real Redis with slices shows the slices of a hot key's budget and the
// concurrency slots /v1/acquire holds, with a chart of the decisions made
// from slices; an acquire made while the page is
// open shows in the slots table at the next poll (held here, and by all
// instances within a second more); the page fits at 1400 px
// and at a 390 px phone, in light and dark.
func TestBrowserServeHolding(t *testing.T) {
	ctx := browsertest.New(t, 90*time.Second)
	srv := redistest.Standalone(t)
	sliced, err := redisstore.New(srv.Client(), redisstore.WithSlices(time.Minute), redisstore.WithPrefix(fmt.Sprintf("console-browser:%d:", time.Now().UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	defer sliced.Close()
	base := serveWithConsole(t, serve.Options{Store: sliced, KeyForm: true})
	const hotTake = `{"key": "tenant:4f1c2a9e-0b7d-4c55-9a1e-7d2f3b9c8e61/global-api-budget", "limit": "100000/1h"}`
	post := func(path, body string) {
		t.Helper()
		if resp, out := testenv.Do(t, nil, "POST", base+path, body); resp.StatusCode >= 500 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, out)
		}
	}
	for i := 0; i < 20_000 && (sliced.SliceStats().Local == 0 || len(sliced.Slices(1)) == 0); i++ {
		post("/v1/take", hotTake)
	}
	const acq = `{"key": "exports:customer-account-4f1c2a9e-0b7d-4c55-9a1e-7d2f3b9c8e61", "limit": 3, "lifetime": "5m"}`
	post("/v1/acquire", acq)

	held := `(e => e ? e.textContent : "none")(document.querySelector('#slots-table tr[data-key^="exports:"] td[data-k=held]'))`
	for _, width := range []int64{1400, 390} {
		for range 20 { // the key stays hot: its slices are given back when its demand stops
			post("/v1/take", hotTake)
		}
		vp := chromedp.EmulateViewport(width, 900)
		if width < 800 {
			vp = chromedp.EmulateViewport(width, 844, chromedp.EmulateMobile)
		}
		if err := chromedp.Do(ctx, vp, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#slots-table"))); err != nil {
			t.Fatal(err)
		}
		waitJS(t, ctx, `Number(document.body.dataset.livePolls || 0) >= 1`)
		if got := evalJS[int](t, ctx, `Number(document.querySelector('#slice-stats-main dd[data-k=local]').textContent)`); got <= 0 {
			t.Errorf("%d px: decisions from slices %d, want some", width, got)
		}
		if got := evalJS[int](t, ctx, `document.querySelectorAll('#slice-keys-main tbody tr[data-key]').length`); got != 1 {
			t.Errorf("%d px: %d keys with slices, want 1", width, got)
		}
		// The chart of the store's decisions from slices, sampled once a
		// second: decisions made while the page is open show in it.
		charted := `(p => p && Number(p.dataset.total) > 0)(document.querySelector('#slice-chart-main polyline[data-outcome=local]'))`
		for deadline := time.Now().Add(20 * time.Second); !evalJS[bool](t, ctx, charted); {
			if time.Now().After(deadline) {
				t.Fatalf("%d px: no decision from slices charted in 20 s", width)
			}
			for range 20 {
				post("/v1/take", hotTake)
			}
			time.Sleep(100 * time.Millisecond)
		}
		browsertest.CheckFits(t, ctx, fmt.Sprintf("%d px", width))
		browsertest.Screenshot(t, ctx, fmt.Sprint(width))
	}
	if got := evalJS[string](t, ctx, held); got != "1" {
		t.Fatalf("in flight before the acquire: %s, want 1", got)
	}
	post("/v1/acquire", acq)
	waitJS(t, ctx, held+` === "2"`)
	// All instances: the store's figure, looked at once a second.
	waitJS(t, ctx, `document.querySelector('#slots-table tr[data-key^="exports:"] td[data-k=held_all]').textContent === "2"`)
	if got := evalJS[string](t, ctx, `document.querySelector('#live-table tr[data-rule="(acquire)"] td[data-k=allowed]').textContent`); got != "2" {
		t.Errorf("the live table counts %s acquires, want 2", got)
	}

	bg := map[string]string{}
	for _, scheme := range []string{"light", "dark"} {
		err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}},
			})
			return err
		}))
		if err != nil {
			t.Fatal(err)
		}
		bg[scheme] = evalJS[string](t, ctx, `getComputedStyle(document.querySelector('#slice-stats-main > div')).backgroundColor`)
		browsertest.CheckFits(t, ctx, scheme)
		browsertest.Screenshot(t, ctx, scheme)
	}
	if bg["light"] == bg["dark"] {
		t.Errorf("the slice figures' background is %s in light and dark", bg["light"])
	}
}
