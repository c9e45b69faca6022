package rlsconfig

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/testsupport/testenv"
)

// deepFlowYAML is a file of one descriptor chain n deep, in YAML's flow
// form, where nesting costs a few bytes a level.
func deepFlowYAML(n int) []byte {
	return []byte("domain: d\ndescriptors: " + strings.Repeat("[{key: k, value: v, descriptors: ", n) + "[]" + strings.Repeat("}]", n) + "\n")
}

// wideYAML is a file of n descriptors, each with its rate_limit.
func wideYAML(n int) []byte {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	for i := range n {
		fmt.Fprintf(&b, "- {key: k%d, rate_limit: {unit: day}}\n", i)
	}
	return []byte(b.String())
}

// A file over the depth or rules cap is refused while it is read, before
// its YAML tree is built: in little time, allocating at most a small
// multiple of its bytes, and holding nothing after. The figures are in
// docs/performance.md ("Refused configurations"):
// go test -run TestRefusedFileCost -v ./cmd/sluice/internal/rlsconfig/
func TestRefusedFileCost(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"a chain 4,900 deep", deepFlowYAML(4900), "deep"},
		{"100,000 descriptors", wideYAML(100_000), "rules"},
	} {
		var err error
		c := testenv.Measure(func() { _, err = Parse(map[string][]byte{"f.yaml": tc.data}) })
		t.Logf("%s, %d bytes: %v: %v", tc.name, len(tc.data), c, err)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a refusal naming %q", tc.name, err, tc.want)
		}
		if c.Alloc > 20*uint64(len(tc.data)) {
			t.Errorf("%s: %d bytes allocated to refuse %d bytes: want at most 20 times", tc.name, c.Alloc, len(tc.data))
		}
		if c.Took > time.Second {
			t.Errorf("%s: refused after %v", tc.name, c.Took)
		}
		if c.Kept > 1<<20 {
			t.Errorf("%s: the heap holds %d bytes more after the refusal", tc.name, c.Kept)
		}
	}
}

// BenchmarkRefusedFile measures what refusing a file costs: the two of
// TestRefusedFileCost, and the worst left, a file under every cap whose
// last line is wrong, after a YAML tree of a million nodes is built and
// read (docs/performance.md, "Refused configurations"):
// go test -run XXX -bench RefusedFile -benchtime 1x ./cmd/sluice/internal/rlsconfig/
func BenchmarkRefusedFile(b *testing.B) {
	for _, bc := range []struct {
		name string
		data []byte
	}{
		{"deep", deepFlowYAML(4900)},
		{"wide", wideYAML(100_000)},
		{"tree", []byte("domain: d\ndescriptors: [{key: k, metadata: {a: [" + strings.Repeat("1,", 1<<20-20) + "1]}}, {nokey: 1}]\n")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.data)))
			for b.Loop() {
				if _, err := Parse(map[string][]byte{"f.yaml": bc.data}); err == nil {
					b.Fatal("loaded")
				}
			}
		})
	}
}
