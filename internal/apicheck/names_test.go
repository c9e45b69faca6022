package main

import (
	"bytes"
	"strings"
	"testing"
)

// Each form of apidiff's messages (its testdata) gets the name CHANGELOG.md
// is to write.
func TestChangeName(t *testing.T) {
	for _, tc := range []struct{ pkg, msg, want string }{
		{"sluice", "TakeEach: removed", "sluice.TakeEach"},
		{"sluice", "(*Limiter).Take: changed from func(int) to func(int, int)", "sluice.Limiter.Take"},
		{"sluice", "Result.Window: removed", "sluice.Result.Window"},
		{"sluice", "Limit: old is comparable, new is not", "sluice.Limit"},
		{"redisstore", "WithLeases: changed from func(time.Duration) Option to func(int) Option", "redisstore.WithLeases"},
		{"p", "GR[R].M2: changed from func[T any](R, T) to func[T any](T, R)", "p.GR.M2"},
		{"p", "(*GR[R]).M: removed", "p.GR.M"},
		{"p", "(*embedm).EP2, method set of *SM: removed", "p.SM.EP2"},
		{"p", "embedm.EV1: changed from func() to func(int)", "p.embedm.EV1"},
		{"p", "WS1: no longer implements WI1", "p.WS1"},
		{"sluice", "./store.Request.Key: removed", "store.Request.Key"},
		{"sluice", "./store.(*Batch).Add: removed", "store.Batch.Add"},
		{"sluice", "github.com/sluice-go/sluice/internal/algo.State: changed from struct{A int64} to struct{}", "algo.State"},
	} {
		if got := changeName(tc.pkg, tc.msg); got != tc.want {
			t.Errorf("changeName(%q, %q) = %q, want %q", tc.pkg, tc.msg, got, tc.want)
		}
	}
}

const changelog = "# Changelog\n\nIntro naming `sluice.Intro`.\n\n" +
	"## Unreleased\n\n" +
	"### Breaking\n" +
	"- `sluice.TakeEach` and `sluice.Limiter.Hold` are gone: use `sluice.Limiter.Take`.\n" +
	"  `redisstore.Store` (continued line)\n" +
	"- `github.com/sluice-go/sluice/algo` moved to internal/.\n\n" +
	"### Changed\n- `sluice.Changed` is named under Changed.\n\n" +
	"## v0.1.0\n\n### Breaking\n- `sluice.Old` broke in an earlier release.\n"

func TestBreakingNames(t *testing.T) {
	names, found := breakingNames(changelog)
	if !found {
		t.Fatal("the Breaking subsection was not found")
	}
	for _, n := range []string{"sluice.TakeEach", "sluice.Limiter.Hold", "sluice.Limiter.Take", "redisstore.Store", "github.com/sluice-go/sluice/algo"} {
		if !names[n] {
			t.Errorf("%s not read from Unreleased/Breaking", n)
		}
	}
	for _, n := range []string{"sluice.Intro", "sluice.Changed", "sluice.Old"} {
		if names[n] {
			t.Errorf("%s read, though it is outside Unreleased/Breaking", n)
		}
	}
	if _, found := breakingNames("# Changelog\n\n## Unreleased\n\n### Added\n- `x.Y`\n\n## v0.1.0\n\n### Breaking\n- `x.Y`\n"); found {
		t.Error("a released version's Breaking counted as Unreleased's")
	}
	if names, found := breakingNames("## [Unreleased]\n### Breaking changes\n- `x.Y`\n"); !found || !names["x.Y"] {
		t.Errorf("keep-a-changelog headings: found %v, names %v", found, names)
	}
}

// The rule: the exact name, or a name that contains it ("sluice.Limiter"
// for its methods and fields); a package's name alone names nothing, and a
// removed package only by its import path.
func TestNamed(t *testing.T) {
	names, _ := breakingNames(changelog)
	names["sluice"] = true // as if `sluice` stood alone in the subsection
	for _, tc := range []struct {
		c    change
		want bool
	}{
		{apidiffChange("github.com/sluice-go/sluice", "sluice", "TakeEach: removed"), true},
		{apidiffChange("github.com/sluice-go/sluice", "sluice", "(*Limiter).Hold: removed"), true},
		{apidiffChange("github.com/sluice-go/sluice", "sluice", "(*Limiter).Wait: removed"), false},
		{apidiffChange("github.com/sluice-go/sluice", "sluice", "Limiter: old is comparable, new is not"), false},
		{apidiffChange("github.com/sluice-go/sluice/redisstore", "redisstore", "(*Store).Close: removed"), true},
		{apidiffChange("github.com/sluice-go/sluice/redisstore", "redisstore", "WithLeases: removed"), false},
		{apidiffChange("github.com/sluice-go/sluice", "sluice", "TakeEachOther: removed"), false},
		{removal("github.com/sluice-go/sluice/algo"), true},
		{removal("github.com/sluice-go/sluice/queue"), false},
	} {
		if got := named(names, tc.c); got != tc.want {
			t.Errorf("named(%s) = %v, want %v", tc.c.name, got, tc.want)
		}
	}
}

// A failure lists each unnamed change and the line that names it; a
// change named is not listed again.
func TestReportFailure(t *testing.T) {
	changes := []change{
		apidiffChange("github.com/sluice-go/sluice", "sluice", "TakeEach: removed"),
		apidiffChange("github.com/sluice-go/sluice", "sluice", "(*Limiter).Wait: changed from func() to func(int)"),
		removal("github.com/sluice-go/sluice/queue"),
	}
	var out bytes.Buffer
	c := &checker{spec: "HEAD^", base: "0123456789abcdef", packages: 9}
	if got := report(&out, c, changes, changelog); got != 1 {
		t.Fatalf("report = %d, want 1", got)
	}
	text := out.String()
	for _, want := range []string{
		"2 incompatible changes to the library's Go API since 0123456789ab (HEAD^)",
		"  github.com/sluice-go/sluice: (*Limiter).Wait: changed from func() to func(int)\n",
		"  github.com/sluice-go/sluice/queue: package removed\n",
		"\n- `sluice.Limiter.Wait`: changed from func() to func(int).\n",
		"\n- `github.com/sluice-go/sluice/queue`: package removed.\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the report lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "TakeEach") {
		t.Errorf("the report lists a change CHANGELOG.md names:\n%s", text)
	}

	out.Reset()
	if got := report(&out, c, changes[:1], changelog); got != 0 {
		t.Errorf("report of a named change = %d, want 0:\n%s", got, out.String())
	}
	out.Reset()
	if got := report(&out, c, changes[:1], "# Changelog\n\n## Unreleased\n\n### Added\n"); got != 1 || !strings.Contains(out.String(), `a "### Breaking" subsection`) {
		t.Errorf("without a Breaking subsection: report = %d, and it should say to add one:\n%s", got, out.String())
	}
}
