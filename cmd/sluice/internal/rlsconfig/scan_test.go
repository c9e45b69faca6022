package rlsconfig

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
)

// readOnly loads files as Parse does without scanYAML's pass: what the
// reader alone accepts.
func readOnly(caps *limits.Table, files map[string][]byte) error {
	var names []string
	for name := range files {
		names = append(names, name)
	}
	b := Options{}.builder(caps, names)
	for _, name := range names {
		f, err := readYAML(caps, &b.read, name, files[name])
		if err == nil {
			err = b.file(name, f)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// scanCases are files in forms the pass must read right: their rules and
// nesting are the reader's.
var scanCases = []struct {
	yaml         string
	rules, flows int
}{
	{"domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n", 1, 0},
	{"domain: d\ndescriptors:\n  - rate_limit:\n    key: k\n", 0, 0}, // null: no rule
	{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: ~\n  - key: l\n    rate_limit: null # none\n", 0, 0},
	{"{domain: d, descriptors: [{key: a, rate_limit: {unit: day}}, {\"key\": b, \"rate_limit\":{}}, {key: c, rate_limit: }]}", 2, 4},
	{"domain: d\ndescriptors:\n  - key: 'rate_limit: [[[['\n    value: \"a\\\" [[{{ rate_limit: x\"\n    rate_limit: {unit: day} # rate_limit: [[[[\n", 1, 1},
	{"domain: d\ndescriptors:\n  - key: k\n    value: a[b{c, rate_limit x\n    metadata:\n      doc: |\n        [[[[ rate_limit: {unit: day}\n         {{{{\n\n      more: >-\n        ]]]] [[[[\n    rate_limit: {unit: day}\n", 1, 1},
	{"%YAML 1.1\n---\ndomain: d\ndescriptors: [\n  {key: k,\n   rate_limit: {unit: day}},\n  {key: \"j\n   [[\", rate_limit: {unit: day}}]\n...\n", 2, 3},
	{"domain: d\ndescriptors:\n  - &a {key: k, rate_limit: {unit: day}}\n  - key: j\n    descriptors: [*a]\n", 1, 2}, // the alias's rule: the reader's
}

// The pass reads the forms of scanCases as the reader does.
func TestScanYAML(t *testing.T) {
	caps := limits.Defaults()
	for _, tc := range scanCases {
		s := scanner{data: []byte(tc.yaml), line: 1, maxFlow: 1 << 20, maxRules: 1 << 20}
		if end := s.run(); end != scanned {
			t.Errorf("%q: ended %v", tc.yaml, end)
		}
		flows := 0
		for probe := 0; probe <= 8; probe++ {
			s := scanner{data: []byte(tc.yaml), line: 1, maxFlow: probe, maxRules: 1 << 20}
			if s.run() == scanned {
				flows = probe
				break
			}
		}
		if s.rules != tc.rules || flows != tc.flows {
			t.Errorf("%q: %d rules nested %d deep, want %d and %d", tc.yaml, s.rules, flows, tc.rules, tc.flows)
		}
		if err := readOnly(&caps, map[string][]byte{"f.yaml": []byte(tc.yaml)}); err != nil && !strings.Contains(err.Error(), "unit") {
			t.Errorf("%q does not load: %v", tc.yaml, err)
		}
	}
}

// FuzzScanYAML: scanYAML never refuses what the reader accepts, at low
// caps where both are reached.
func FuzzScanYAML(f *testing.F) {
	paths, _ := filepath.Glob("testdata/*.yaml")
	more, _ := filepath.Glob("testdata/dir/*.y*ml")
	for _, p := range append(paths, more...) {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, tc := range scanCases {
		f.Add([]byte(tc.yaml))
	}
	f.Add(deepFlowYAML(5))
	f.Add(wideYAML(5))
	f.Fuzz(func(t *testing.T, data []byte) {
		caps := limits.Defaults()
		caps.Rules, caps.Depth = 3, 2
		files := map[string][]byte{"f.yaml": data}
		if readOnly(&caps, files) != nil {
			return
		}
		rules := 0
		if err := scanYAML(&caps, "f.yaml", data, &rules); err != nil {
			var e *limits.Exceeded
			if !errors.As(err, &e) {
				t.Fatalf("not an *Exceeded: %v", err)
			}
			t.Fatalf("the reader accepts what the pass refuses: %v", err)
		}
	})
}
