package trace

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/algo"
)

func TestReader(t *testing.T) {
	r := NewReader(strings.NewReader("\n{\"t_us\": 10, \"key\": \"a\"}\n  \n{\"t_us\": 11, \"key\": \"b\", \"cost\": 0}\n"))
	a, err := r.Read()
	if err != nil || a.Line != 2 || a.T != 10 || a.Key != "a" || a.Cost != 1 {
		t.Fatalf("%+v %v", a, err)
	}
	b, err := r.Read()
	if err != nil || b.Line != 4 || b.Cost != 0 {
		t.Fatalf("%+v %v", b, err)
	}
	if _, err := r.Read(); err != io.EOF {
		t.Fatalf("want EOF, got %v", err)
	}
}

func TestAppend(t *testing.T) {
	req, err := Parse([]byte(`{ "t_us": 10, "key": "a" }`))
	if err != nil {
		t.Fatal(err)
	}
	got := string(AppendDecision(nil, req, algo.Decision{Allowed: true, Remaining: 2, ResetAfter: 7, Delay: 3}))
	want := `{ "t_us": 10, "key": "a","allowed":true,"remaining":2,"retry_after_us":0,"reset_after_us":7,"delay_us":3}` + "\n"
	if got != want {
		t.Fatalf("got %s want %s", got, want)
	}
}

// FuzzParse: no input panics; what parses round-trips into valid JSON with
// the decision appended, and its fields are in range.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"t_us": 1764000000000000, "key": "user:1", "cost": 1}`,
		`{"t_us": 1, "key": "k"}`,
		`{"t_us": 1, "key": "k", "x": {"y": [1,2]}}`,
		`{}`, `{"t_us": 1e3, "key": "k"}`, `{"t_us": 1, "key": "k", "cost": 99999999999999999999}`,
		`{"t_us": 1, "key": "k"}}`, `{"key": "\u00e9", "t_us": 0}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		b = bytes.TrimSpace(b)
		req, err := Parse(b)
		if err != nil {
			return
		}
		if req.Key == "" || req.Cost < 0 || algo.CheckTime(req.T) != nil {
			t.Fatalf("Parse(%q) accepted %+v", b, req)
		}
		out := AppendDecision(nil, req, algo.Decision{Allowed: true, Remaining: 1})
		var v map[string]any
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("output for %q is not JSON: %v\n%s", b, err, out)
		}
		if v["allowed"] != true {
			t.Fatalf("output for %q lost allowed: %s", b, out)
		}
	})
}
