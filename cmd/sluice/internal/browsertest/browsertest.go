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
	"sync"
	"sync/atomic"
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

// New returns the context of a tab in a headless Chromium with a fresh
// profile, valid for timeout and closed when the test ends. extra are
// options of the test's own (a flag: host-resolver-rules, to send a name
// to a local listener). In a package whose TestMain runs its tests through
// Run (or Main), the tests that give no extra share one browser, started
// by the first New, and each tab has a browser context of its own
// (cookies, storage and cache of its own, as a fresh profile would): a
// second or two of start-up a test, which every browser test once paid.
// Otherwise the test starts a browser of its own and closes it when it
// ends.
func New(t testing.TB, timeout time.Duration, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	path := Require(t)
	if sharing.Load() && len(extra) == 0 {
		return newTab(t, path, timeout)
	}
	ctx, cancelTimeout := context.WithTimeout(context.Background(), timeout)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, append(allocatorOptions(path, t.TempDir()), extra...)...)
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

// allocatorOptions are the browser's flags, its profile in dir.
func allocatorOptions(path, dir string) []chromedp.ExecAllocatorOption {
	return []chromedp.ExecAllocatorOption{
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
		chromedp.UserDataDir(dir),
		chromedp.WindowSize(1280, 900),
	}
}

// The browser the tests of a package share, between Run's start and end.
var (
	sharing atomic.Bool
	shared  struct {
		sync.Mutex
		ctx   context.Context // the browser's; nil until the first New
		close func()
		dir   string // its profile
	}
)

// Run runs m's tests with one browser for all their New calls, closes it,
// and returns m.Run's exit code, for a TestMain that has more to do:
//
//	func TestMain(m *testing.M) { os.Exit(browsertest.Run(m)) }
func Run(m *testing.M) int {
	sharing.Store(true)
	code := m.Run()
	sharing.Store(false)
	shared.Lock()
	defer shared.Unlock()
	if shared.close != nil {
		shared.close()
		// Chromium's last children may still be writing its profile.
		for range 50 {
			if os.RemoveAll(shared.dir) == nil {
				if _, err := os.Stat(shared.dir); os.IsNotExist(err) {
					break
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		shared.ctx, shared.close = nil, nil
	}
	return code
}

// Main is Run, then os.Exit with its code:
//
//	func TestMain(m *testing.M) { browsertest.Main(m) }
func Main(m *testing.M) { os.Exit(Run(m)) }

// newTab opens a tab, in a browser context of its own, in the shared
// browser, starting the browser if it is the first.
func newTab(t testing.TB, path string, timeout time.Duration) context.Context {
	t.Helper()
	shared.Lock()
	if shared.ctx == nil {
		dir, err := os.MkdirTemp("", "browsertest-")
		if err != nil {
			shared.Unlock()
			t.Fatal(err)
		}
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), allocatorOptions(path, dir)...)
		bctx, cancelBrowser := chromedp.NewContext(actx)
		if err := chromedp.Do(bctx); err != nil {
			cancelBrowser()
			cancelAlloc()
			os.RemoveAll(dir)
			shared.Unlock()
			t.Fatalf("starting %s: %v", path, err)
		}
		shared.ctx, shared.dir = bctx, dir
		shared.close = func() {
			_ = chromedp.Cancel(bctx) // closes the browser, and waits for it
			cancelBrowser()
			cancelAlloc() // waits for its processes to end
		}
	}
	bctx := shared.ctx
	shared.Unlock()
	tctx, cancelTab := chromedp.NewContext(bctx, chromedp.WithNewBrowserContext())
	ctx, cancelTimeout := context.WithTimeout(tctx, timeout)
	t.Cleanup(func() {
		cancelTimeout()
		cancelTab() // closes the tab and its browser context
	})
	if err := chromedp.Do(ctx); err != nil { // open the tab now, to fail here
		t.Fatalf("a tab in %s: %v", path, err)
	}
	return ctx
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
