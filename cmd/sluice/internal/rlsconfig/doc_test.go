package rlsconfig

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

// docText is doc.go's comment as one line of words.
func docText(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var words []string
	for _, l := range strings.Split(string(b), "\n") {
		if l, ok := strings.CutPrefix(l, "//"); ok {
			words = append(words, strings.Fields(l)...)
		}
	}
	return strings.Join(words, " ")
}

// commas writes n with thousands separators, as the doc does.
func commas(n int64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// The maxima the package doc states are the code's: envoy's windows load
// every requests_per_unit envoy reads, at every unit; the algorithms that
// scale stop where Limit.Validate does. (The doc once bounded the windows
// too, 13,030 a day, long after they no longer were.)
func TestDocMaxima(t *testing.T) {
	doc := docText(t)
	units := []string{"second", "minute", "hour", "day", "week", "month", "year"}
	for _, u := range units {
		for _, alg := range []string{"aligned-window", "fixed-window"} {
			src := fmt.Sprintf("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: %s, requests_per_unit: 4294967295, algorithm: %s}\n", u, alg)
			if _, err := Parse(map[string][]byte{"d.yaml": []byte(src)}); err != nil {
				t.Errorf("%s, 4294967295 per %s: %v", alg, u, err)
			}
		}
	}
	if !strings.Contains(doc, "(aligned-window, the default, and fixed-window) only count, and take every requests_per_unit envoy reads (up to 4,294,967,295) at every unit") {
		t.Errorf("the doc does not say that envoy's windows take every requests_per_unit:\n%s", doc)
	}
	var parts []string
	for _, u := range units {
		period := time.Duration(unitSeconds[strings.ToUpper(u)]) * time.Second
		lo, hi := int64(1), int64(1)<<32-1
		for lo < hi { // the largest rate a token bucket of burst = rate takes
			m := (lo + hi + 1) / 2
			if (sluice.Limit{Algorithm: sluice.TokenBucket, Rate: m, Period: period, Burst: m}).Validate() == nil {
				lo = m
			} else {
				hi = m - 1
			}
		}
		parts = append(parts, commas(lo)+" per "+u)
	}
	want := strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
	if !strings.Contains(doc, want) {
		t.Errorf("the doc does not state the scaling algorithms' maxima %q:\n%s", want, doc)
	}
}
