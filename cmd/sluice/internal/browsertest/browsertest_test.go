package browsertest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestRequire runs TestRequireHelper in a child with no Chromium on PATH:
// it skips loudly, or fails when RequireEnv is 1.
func TestRequire(t *testing.T) {
	for _, tc := range []struct {
		require string
		want    string
		fails   bool
	}{{"", "SKIPPING browser tests", false}, {"1", "FAILING browser tests", true}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRequireHelper$", "-test.v")
		cmd.Env = append(os.Environ(), "PATH="+t.TempDir(), RequireEnv+"="+tc.require, "SLUICE_BROWSERTEST_HELPER=1")
		out, err := cmd.CombinedOutput()
		if (err != nil) != tc.fails || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s=%q: err %v, output:\n%s", RequireEnv, tc.require, err, out)
		}
	}
}

func TestRequireHelper(t *testing.T) {
	if os.Getenv("SLUICE_BROWSERTEST_HELPER") != "1" {
		t.Skip("helper for TestRequire")
	}
	Require(t)
	t.Error("Require returned without a browser")
}

func TestArtifacts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	t.Setenv(ArtifactsEnv, dir)
	if got := Artifacts(t); got != dir {
		t.Errorf("Artifacts %q, want %q", got, dir)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Errorf("%s not made: %v", dir, err)
	}
	t.Setenv(ArtifactsEnv, "")
	if got := Artifacts(t); got == "" || got == dir {
		t.Errorf("Artifacts without %s: %q", ArtifactsEnv, got)
	}
}

func TestMain(m *testing.M) { Main(m) }

// Under Run the tests share one browser, and each tab is a profile of its
// own: a cookie one test sets, the next does not see.
func TestSharedBrowserIsolatesTabs(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/set" {
			http.SetCookie(w, &http.Cookie{Name: "seen", Value: "yes", Path: "/"})
		}
		c, err := r.Cookie("seen")
		fmt.Fprintf(w, "<p id=c>%v</p>", err == nil && c.Value == "yes")
	}))
	defer srv.Close()
	var browsers []*chromedp.Browser
	for i, path := range []string{"/set", "/"} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			ctx := New(t, 30*time.Second)
			browsers = append(browsers, chromedp.FromContext(ctx).Browser)
			if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+path), chromedp.Navigate(srv.URL+"/")); err != nil {
				t.Fatal(err)
			}
			got, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#c")))
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprint(i == 0); got != want {
				t.Errorf("tab %d sees the cookie: %s, want %s", i, got, want)
			}
		})
	}
	if len(browsers) == 2 && browsers[0] != browsers[1] {
		t.Error("two browsers: the tests do not share one under Run")
	}
}
