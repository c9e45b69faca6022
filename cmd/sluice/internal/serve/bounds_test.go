package serve

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
)

// anchorBomb is a configuration of domain test whose anchors, reused under
// many parents, make 61,110 rules from under 4 KB.
func anchorBomb() string {
	var b strings.Builder
	b.WriteString("domain: test\ndescriptors:\n  - key: l0\n    descriptors: &l0\n")
	for i := range 10 {
		fmt.Fprintf(&b, "      - {key: r%d, rate_limit: {unit: second, requests_per_unit: 1}}\n", i)
	}
	for l := 1; l <= 2; l++ {
		fmt.Fprintf(&b, "  - key: l%d\n    descriptors: &l%d\n", l, l)
		for i := range 10 {
			fmt.Fprintf(&b, "      - {key: n%d, descriptors: *l%d}\n", i, l-1)
		}
	}
	for i := range 60 {
		fmt.Fprintf(&b, "  - {key: top%d, descriptors: *l2}\n", i)
	}
	return b.String()
}

// A configuration of too many rules (an anchor bomb) is refused whole at
// a reload: the error names the bound, and the rules in use keep deciding.
func TestAnchorBombRefused(t *testing.T) {
	ts, _ := startTest(t, Options{NoWatch: true})
	want(t, "before", ts.call(t, "test", desc("key1=value1")).Statuses[0], ok, 2, 3, minute)
	bomb := anchorBomb()
	if err := os.WriteFile(filepath.Join(ts.opts.Config, "test.yaml"), []byte(bomb), 0o644); err != nil {
		t.Fatal(err)
	}
	err := ts.Reload()
	if err == nil || !strings.Contains(err.Error(), "more than 10000 rules") {
		t.Fatalf("reload of %d bytes of anchors: %v, want an error naming the bound of 10000 rules", len(bomb), err)
	}
	if v := ts.Config(); len(v.Rules) != 10 || v.LastError == nil {
		t.Errorf("after the refused reload: %d rules, last error %v; want the 10 in use and the error", len(v.Rules), v.LastError)
	}
	want(t, "after", ts.call(t, "test", desc("key1=value1")).Statuses[0], ok, 1, 3, minute)
}

// decisionLabels lists the rule labels of sluice_serve_rule_decisions_total
// in a /metrics page.
func decisionLabels(page string) map[string]bool {
	out := map[string]bool{}
	re := regexp.MustCompile(`^sluice_serve_rule_decisions_total\{.*rule="([^"]*)"`)
	for _, l := range strings.Split(page, "\n") {
		if m := re.FindStringSubmatch(l); m != nil {
			out[m[1]] = true
		}
	}
	return out
}

// /metrics is bounded whatever the configuration and the values sent: the
// first maxRuleSeries rules and the first maxValueSeries detailed values
// have series of their own, the others are counted under "(other)"; a
// reload drops the series of the rules it no longer has.
func TestDecisionSeriesBounded(t *testing.T) {
	maxValueSeries := int(limits.ValueSeries.Default)
	var b strings.Builder
	b.WriteString("domain: m\ndescriptors:\n  - key: detail\n    detailed_metric: true\n    rate_limit: {unit: second, requests_per_unit: 1000000}\n")
	for i := range 1500 {
		fmt.Fprintf(&b, "  - {key: k%d, rate_limit: {unit: second, requests_per_unit: 1000000}}\n", i)
	}
	dir := writeConfig(t, map[string]string{"m.yaml": b.String()})
	ts := start(t, Options{Config: dir, NoWatch: true}, &fakeClock{t: t0})
	ts.call(t, "m", desc("k999")) // last of the rules by path: beyond the first 1000
	for i := range maxValueSeries + 100 {
		ts.call(t, "m", desc(fmt.Sprintf("detail=v%d", i)))
	}
	_, page := httpGet(t, ts.base+"/metrics")
	labels := decisionLabels(page)
	if n := len(labels); n != maxRuleSeries+maxValueSeries+1 {
		t.Errorf("%d rule labels, want %d rules', %d values' and %q", n, maxRuleSeries, maxValueSeries, otherLabel)
	}
	if !labels["k0"] || labels["k999"] || !labels["m.detail_v0"] || labels[fmt.Sprintf("m.detail_v%d", maxValueSeries+50)] {
		t.Errorf("k0 %v, k999 %v, the first value %v, a value past the bound %v; want true, false, true, false", labels["k0"], labels["k999"], labels["m.detail_v0"], labels[fmt.Sprintf("m.detail_v%d", maxValueSeries+50)])
	}
	if want := `sluice_serve_rule_decisions_total{domain="(other)",outcome="allowed",rule="(other)"} 101`; !strings.Contains(page, want) {
		t.Errorf("/metrics lacks %s:\n%s", want, grep(page, "(other)"))
	}
	if len(page) > 1<<20 {
		t.Errorf("/metrics is %d bytes, want at most 1 MiB", len(page))
	}
	if err := os.WriteFile(filepath.Join(dir, "m.yaml"), []byte("domain: m\ndescriptors:\n  - {key: only, rate_limit: {unit: second, requests_per_unit: 1}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ts.Reload(); err != nil {
		t.Fatal(err)
	}
	_, page = httpGet(t, ts.base+"/metrics")
	if labels := decisionLabels(page); !labels["only"] || labels["k0"] {
		t.Errorf("after a reload to one rule: only %v, k0 %v; want the new rule's series and not the old ones'", labels["only"], labels["k0"])
	}
}

// The lease series are bounded as the rule series are: the first
// maxRuleSeries concurrency limits have their own, the others count under
// "(other)"; a reload drops the series of the limits it no longer has.
func TestConcurrencySeriesBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: m\ndescriptors:\n")
	for i := range maxRuleSeries + 200 {
		fmt.Fprintf(&b, "  - {key: k%04d, concurrency: {max: 1}}\n", i)
	}
	dir := writeConfig(t, map[string]string{"m.yaml": b.String()})
	ts := start(t, Options{Config: dir, NoWatch: true}, &fakeClock{t: t0})
	httpPost(t, ts.base+"/v1/acquire", `{"domain": "m", "descriptors": [[{"key": "k1100", "value": "a"}]]}`)
	_, page := httpGet(t, ts.base+"/metrics")
	series := regexp.MustCompile(`(?m)^sluice_serve_concurrency_leases_total\{concurrency="([^"]*)"`).FindAllStringSubmatch(page, -1)
	labels := map[string]bool{}
	for _, m := range series {
		labels[m[1]] = true
	}
	if len(labels) != maxRuleSeries+1 || !labels["k0000"] || labels["k1100"] {
		t.Errorf("%d concurrency labels (k0000 %v, k1100 %v), want %d and %q", len(labels), labels["k0000"], labels["k1100"], maxRuleSeries, otherLabel)
	}
	if want := `sluice_serve_concurrency_leases_total{concurrency="(other)",domain="(other)",outcome="held"} 1`; !strings.Contains(page, want) {
		t.Errorf("/metrics lacks %s:\n%s", want, grep(page, "(other)"))
	}
	if err := os.WriteFile(filepath.Join(dir, "m.yaml"), []byte("domain: m\ndescriptors:\n  - {key: only, concurrency: {max: 1}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ts.Reload(); err != nil {
		t.Fatal(err)
	}
	_, page = httpGet(t, ts.base+"/metrics")
	if !strings.Contains(page, `concurrency="only"`) || strings.Contains(page, `concurrency="k0000"`) || strings.Contains(page, `concurrency="(other)"`) {
		t.Errorf("after a reload to one limit:\n%s", grep(page, "sluice_serve_concurrency"))
	}
}
