// Package browsertest starts a headless Chromium for the tests that drive a
// page in a real browser (through github.com/chromedp/chromedp), and keeps
// their screenshots.
//
// Without a Chromium on PATH the tests skip with a loud message; set
// SLUICE_REQUIRE_BROWSER=1 (as .ci/run does) to make that a failure.
// Screenshots go to the directory SLUICE_ARTIFACTS names, else to the
// test's temporary directory.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// RequireEnv is the environment variable that turns a missing Chromium from
// a skip into a test failure when set to "1".
const RequireEnv = "SLUICE_REQUIRE_BROWSER"

// ArtifactsEnv is the environment variable that names the directory the
// screenshots are written to.
const ArtifactsEnv = "SLUICE_ARTIFACTS"

// binaries are the names Chromium goes by, Debian's first.
var binaries = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// Require returns the path of a Chromium binary. Without one it skips the
// test, loudly, or fails it when RequireEnv is "1".
func Require(t testing.TB) string {
	t.Helper()
	for _, b := range binaries {
		if p, err := exec.LookPath(b); err == nil {
			return p
		}
	}
	if os.Getenv(RequireEnv) == "1" {
		t.Fatal("chromium not found on PATH and " + RequireEnv + "=1: FAILING browser tests; " +
			"install it (Debian: apt-get install chromium)")
	}
	t.Skip("chromium not found: SKIPPING browser tests; install it (Debian: apt-get install chromium) " +
		"or set " + RequireEnv + "=1 to make this a failure")
	return ""
}

// New starts a headless Chromium with a fresh profile and returns the
// context of a tab in it, valid for timeout; the browser is closed when
// the test ends. extra are options of the test's own (a flag:
// host-resolver-rules, to send a name to a local listener).
func New(t testing.TB, timeout time.Duration, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	path := Require(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	opts = append(opts, extra...)
	ctx, cancelTimeout := context.WithTimeout(context.Background(), timeout)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
		cancelTimeout()
	})
	if err := chromedp.Do(bctx); err != nil { // start the browser now, to fail here
		t.Fatalf("starting %s: %v", path, err)
	}
	return bctx
}

// Artifacts returns the directory screenshots go to: SLUICE_ARTIFACTS
// (created if need be), else a temporary directory of the test.
func Artifacts(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(ArtifactsEnv)
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("%s=%s: %v", ArtifactsEnv, dir, err)
	}
	return dir
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// Screenshot saves a PNG of the whole page as name.png (prefixed by the
// test's name) in Artifacts, and returns its path.
func Screenshot(t testing.TB, ctx context.Context, name string) string {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(Artifacts(t), unsafeName.ReplaceAllString(t.Name()+"-"+name, "_")+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	return path
}

// CheckFits fails the test when the page, or a box on it (a .scroll or
// .figure box, a pre, a .stepper, a form, a table), scrolls sideways; view
// names what the page shows, for the message.
func CheckFits(t testing.TB, ctx context.Context, view string) {
	t.Helper()
	type fit struct {
		Scroll, Inner int
		Wide          []string
	}
	f, err := chromedp.Run(ctx, chromedp.Evaluate[fit](`(() => ({
		scroll: document.documentElement.scrollWidth, inner: window.innerWidth,
		wide: Array.from(document.querySelectorAll(".scroll, .figure, pre, .stepper, form, table"))
			.filter(e => e.getClientRects().length > 0 && e.scrollWidth > e.clientWidth + 1)
			.map(e => (e.id || e.className || e.tagName) + " " + e.scrollWidth + ">" + e.clientWidth)}))()`))
	if err != nil {
		t.Fatalf("%s: measuring the page: %v", view, err)
	}
	if f.Scroll > f.Inner {
		t.Errorf("%s: the page scrolls sideways: scrollWidth %d > innerWidth %d", view, f.Scroll, f.Inner)
	}
	if len(f.Wide) > 0 {
		t.Errorf("%s: boxes scroll sideways: %v", view, f.Wide)
	}
}
