package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluice-go/sluice/cmd/sluice/internal/browsertest"
	"github.com/sluice-go/sluice/cmd/sluice/internal/serve"
)

// TestBrowserRebinding: Chromium, told that evil.example is 127.0.0.1 (the
// end of a DNS rebinding: the attacker's name now points at the loopback
// listener), opens the console at evil.example:PORT and, from that origin,
// posts an acquire and reads the live view as its own same-origin
// requests: the service answers 421 to each and holds nothing. At
// 127.0.0.1:PORT the console opens.
func TestBrowserRebinding(t *testing.T) {
	ctx := browsertest.New(t, 60*time.Second, chromedp.Flag("host-resolver-rules", "MAP evil.example 127.0.0.1"))
	base := serveWithConsole(t, serve.Options{KeyForm: true})
	port := base[strings.LastIndexByte(base, ':'):]
	evil := "http://evil.example" + port
	if err := chromedp.Do(ctx, chromedp.Navigate(evil+"/")); err != nil {
		t.Fatal(err)
	}
	if text := evalJS[string](t, ctx, `document.body.innerText`); !strings.Contains(text, "--allowed-hosts evil.example") {
		t.Errorf("the console at %s: %q", evil, text)
	}
	status := func(js string) int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](js, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return n
	}
	const acquire = `fetch("/v1/acquire", {method: "POST", headers: {"Content-Type": "application/json"}, body: '{"key": "victim", "limit": 1, "lifetime": "1h"}'}).then(r => r.status)`
	for _, js := range []string{acquire, `fetch("/console/api/live").then(r => r.status)`} {
		if n := status(js); n != 421 {
			t.Errorf("%s from %s: %d, want 421", js, evil, n)
		}
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, `document.getElementById("slots") !== null || document.getElementById("live") !== null`)
	if n := status(acquire); n != 200 {
		t.Errorf("the acquire from the console's own origin: %d, want 200 (the refused one held nothing)", n)
	}
}
