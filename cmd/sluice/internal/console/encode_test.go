package console

import (
	"encoding/json"
	"testing"
)

// TestAppendLive: the hand-written report is what encoding/json writes.
func TestAppendLive(t *testing.T) {
	for _, l := range []Live{
		{},
		{Now: 1764000000, Since: 1763999701, WindowS: 300, Rules: []RuleLive{
			{Rule: "a", Points: []Point{}, Totals: Point{T: 1763999701}},
			{Rule: "b<&>\"\\\n\t\x00\x7f é \u2028\u2029 \xff", Points: []Point{{T: 1, Allowed: 2, Denied: 3, ShadowDenied: 4, Error: 5, Degraded: 6, LatencyAvgUS: 7, LatencyMaxUS: -8}}},
		}, Top: []Refusal{{Rule: "a", Key: "user:\x01", Count: 9, Overcount: 1}, {Rule: "b", Key: ""}}},
		{Top: []Refusal{}, holding: holding{SlicesOn: true, Slices: []StoreSlices{{Store: "main", Held: 3, Top: []SliceKey{{Key: "k<&>", Held: 3}}}},
			Slots: &Slots{Keys: 1, Top: []HeldKey{{Key: "j\u2028", Limit: 2, Partial: true}, {Key: "k", HeldAll: new(int64)}}}}},
	} {
		want, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendLive(nil, &l); string(got) != string(want) {
			t.Errorf("appendLive\n got %s\nwant %s", got, want)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "\"\\/", "<script>&", "\x00\x1f\x7f", "é\u2028\u2029", "\xff\xfe", "\xe2\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendString(nil, s); string(got) != string(want) {
			t.Errorf("appendString(%q) = %s, want %s", s, got, want)
		}
	})
}
