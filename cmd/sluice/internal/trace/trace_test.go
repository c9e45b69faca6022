package trace

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/store"
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

// A charge line gives "charge" in place of "cost": its units, charged.
func TestChargeLine(t *testing.T) {
	r := NewReader(strings.NewReader(`{"t_us": 10, "key": "a", "charge": 4000}` + "\n" + `{"t_us": 11, "key": "a", "charge": 0}` + "\n" + `{"t_us": 12, "key": "a"}`))
	for _, want := range []Request{{Line: 1, T: 10, Key: "a", Cost: 4000, Charge: true}, {Line: 2, T: 11, Key: "a", Cost: 0, Charge: true}, {Line: 3, T: 12, Key: "a", Cost: 1}} {
		got, err := r.Read()
		got.Raw = nil
		if err != nil || got.Line != want.Line || got.T != want.T || got.Key != want.Key || got.Cost != want.Cost || got.Charge != want.Charge || got.Parts != nil {
			t.Errorf("read %+v, %v; want %+v", got, err, want)
		}
	}
}

func TestAppend(t *testing.T) {
	req, err := Parse([]byte(`{ "t_us": 10, "key": "a" }`))
	if err != nil {
		t.Fatal(err)
	}
	got := string(AppendDecision(nil, req, store.Decision{Allowed: true, Remaining: 2, ResetAfter: 7, Delay: 3}))
	want := `{ "t_us": 10, "key": "a","allowed":true,"remaining":2,"retry_after_us":0,"reset_after_us":7,"delay_us":3}` + "\n"
	if got != want {
		t.Fatalf("got %s want %s", got, want)
	}
}

// Lines of any length are read: a 3 MiB key is no "token too long".
func TestLongLine(t *testing.T) {
	key := strings.Repeat("k", 3<<20)
	in := `{"t_us": 10, "key": "` + key + `"}` + "\n" + `{"t_us": 11, "key": "b"}`
	r := NewReader(strings.NewReader(in))
	a, err := r.Read()
	if err != nil || a.Key != key || a.Line != 1 {
		t.Fatalf("long line: key of %d bytes, line %d, %v", len(a.Key), a.Line, err)
	}
	b, err := r.Read()
	if err != nil || b.Key != "b" || b.Line != 2 {
		t.Fatalf("after the long line: %+v, %v", b, err)
	}
	if _, err := r.Read(); err != io.EOF {
		t.Fatalf("want EOF, got %v", err)
	}
}

// A UTF-8 byte order mark before the first line is skipped.
func TestBOM(t *testing.T) {
	r := NewReader(strings.NewReader("\xef\xbb\xbf{\"t_us\": 10, \"key\": \"a\"}\r\n"))
	a, err := r.Read()
	if err != nil || a.Key != "a" || string(a.Raw) != `{"t_us": 10, "key": "a"}` {
		t.Fatalf("%+v, %v", a, err)
	}
}

// Bad lines get errors in the user's terms: the field, what it is, what was
// expected; never Go's type names.
func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"t_us": "123", "key": "k"}`, `"t_us" is the string "123", want a JSON integer (µs since the epoch) without quotes`},
		{`{"t_us": true, "key": "k"}`, `"t_us" is true or false, want a JSON integer`},
		{`{"t_us": null, "key": "k"}`, `"t_us" is null, want a JSON integer`},
		{`{"t_us": 1.5, "key": "k"}`, `"t_us" 1.5 is not a whole number`},
		{`{"t_us": 1e3, "key": "k"}`, `"t_us" 1e3 is not a whole number`},
		{`{"t_us": 99999999999999999999, "key": "k"}`, `"t_us" 99999999999999999999 is out of range`},
		{`{"t_us": -1, "key": "k"}`, `"t_us" -1 is out of range: want 0 to 2^52`},
		{`{"key": "k"}`, `missing "t_us"`},
		{`{"t_us": 1}`, `missing "key"`},
		{`{"t_us": 1, "key": 7}`, `"key" is a number, want a non-empty string`},
		{`{"t_us": 1, "key": {"a": 1}}`, `"key" is an object, want a non-empty string`},
		{`{"t_us": 1, "key": ""}`, `"key" is empty`},
		{`{"t_us": 1, "key": "k", "cost": "2"}`, `"cost" is the string "2", want a JSON integer`},
		{`{"t_us": 1, "key": "k", "cost": -2}`, `"cost" -2 is negative`},
		{`{"t_us": 1, "key": "k", "t_us": 2}`, `"t_us" appears twice`},
		{`{"t_us": 1, "key": "k", "charge": -2}`, `"charge" -2 is negative`},
		{`{"t_us": 1, "key": "k", "charge": 1.5}`, `"charge" 1.5 is not a whole number`},
		{`{"t_us": 1, "key": "k", "charge": 2, "cost": 1}`, `"cost" and "charge" on one line`},
		{`{"t_us": 1, "key": "k", "charge": 2, "charge": 1}`, `"charge" appears twice`},
		{`{"t_us": 1, "charge": 2, "parts": [{"key": "a"}]}`, `"parts" and "key", "cost" or "charge" on one line`},
		{`{"t_us": 1, "key": "k"`, `not a JSON object: unexpected end of JSON input`},
		{`{"t_us": 1, "key": x}`, `not a JSON object: invalid character 'x' looking for beginning of value (at column 20)`},
		{`{"t_us": 1, "key": "k"} {}`, `text after the JSON object (at column 25)`},
		{`[1]`, `not a JSON object: the line is an array`},
		{`{"t_us": "` + strings.Repeat("9", 100) + `", "key": "k"}`, `"t_us" is the string "999999999999999999999999999999999999999…, want`},
		{`"x"`, `not a JSON object: the line is a string`},
	} {
		_, err := Parse([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%s) = %v, want %q", c.in, err, c.want)
			continue
		}
		for _, internal := range []string{"wire", "Go struct", "json.", "json:", "Number"} {
			if strings.Contains(err.Error(), internal) {
				t.Errorf("Parse(%s) = %q: names %q", c.in, err, internal)
			}
		}
	}
}

// A line that already holds the fields a decision writes (an earlier
// replay's output, replayed) has them replaced, never repeated; the other
// fields are kept as they were, in order.
func TestOutputsReplaced(t *testing.T) {
	d := store.Decision{Allowed: true, Remaining: 2, ResetAfter: 7, Delay: 3}
	for _, c := range []struct{ in, want string }{
		{`{"t_us":10,"key":"a","allowed":false,"remaining":0,"retry_after_us":5,"reset_after_us":1,"delay_us":0}`,
			`{"t_us":10,"key":"a","allowed":true,"remaining":2,"retry_after_us":0,"reset_after_us":7,"delay_us":3}`},
		{`{"allowed":false, "t_us": 10, "error": "x", "key": "a", "note": 1, "delay_us": 9 }`,
			`{"t_us": 10, "key": "a", "note": 1,"allowed":true,"remaining":2,"retry_after_us":0,"reset_after_us":7,"delay_us":3}`},
		{`{"\u0061llowed": false, "t_us": 10, "key": "a"}`,
			`{"t_us": 10, "key": "a","allowed":true,"remaining":2,"retry_after_us":0,"reset_after_us":7,"delay_us":3}`},
	} {
		req, err := Parse([]byte(c.in))
		if err != nil {
			t.Fatalf("Parse(%s): %v", c.in, err)
		}
		if got := string(AppendDecision(nil, req, d)); got != c.want+"\n" {
			t.Errorf("Parse(%s), AppendDecision:\n got %s\nwant %s", c.in, got, c.want)
		}
	}
	req, err := Parse([]byte(`{"t_us": 10, "key": "a", "error": "old", "allowed": true}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(AppendError(nil, req, errors.New("new"))), `{"t_us": 10, "key": "a","error":"new"}`+"\n"; got != want {
		t.Errorf("AppendError:\n got %s\nwant %s", got, want)
	}
}

// FuzzParse: no input panics; what parses round-trips into valid JSON with
// the decision appended, each top-level field once, and parses again to the
// same request; its fields are in range.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"t_us": 1764000000000000, "key": "user:1", "cost": 1}`,
		`{"t_us": 1, "key": "k"}`,
		`{"t_us": 1, "key": "k", "x": {"y": [1,2]}}`,
		`{}`, `{"t_us": 1e3, "key": "k"}`, `{"t_us": 1, "key": "k", "cost": 99999999999999999999}`,
		`{"t_us": 1, "key": "k"}}`, `{"key": "\u00e9", "t_us": 0}`,
		`{"t_us": "1", "key": "k"}`,
		`{"allowed": 1, "t_us": 1, "key": "k", "remaining": 2, "error": "e"}`,
		`{"t_us": 1, "\u0065rror": 1, "key": "k", "delay_us": 0}`,
		`{"t_us": 1764000000000000, "key": "user:1", "charge": 4000}`,
		`{"t_us": 1, "key": "k", "charge": 0, "cost": 1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		b = bytes.TrimSpace(b)
		if json.Valid(b) && b[0] == '{' {
			// The hand-written scan agrees with encoding/json's tokens
			// (a member's span may start with the white space before its
			// comma, which the decoder's offsets leave out).
			got, err := scanObject(b)
			if err != nil {
				t.Fatalf("scanObject(%q): %v", b, err)
			}
			want := refMembers(t, b)
			if len(got) != len(want) {
				t.Fatalf("scanObject(%q): %d members, want %d", b, len(got), len(want))
			}
			for i := range got {
				if got[i].name != want[i].name || !bytes.Equal(got[i].value, want[i].value) || skipSpace(b, got[i].from) != skipSpace(b, want[i].from) || got[i].to != want[i].to {
					t.Fatalf("scanObject(%q) member %d: %q=%s [%d,%d), want %q=%s [%d,%d)", b, i,
						got[i].name, got[i].value, got[i].from, got[i].to, want[i].name, want[i].value, want[i].from, want[i].to)
				}
			}
		}
		req, err := Parse(b)
		if err != nil {
			return
		}
		if req.Key == "" || req.Cost < 0 || algo.CheckTime(req.T) != nil {
			t.Fatalf("Parse(%q) accepted %+v", b, req)
		}
		for _, out := range [][]byte{
			AppendDecision(nil, req, store.Decision{Allowed: true, Remaining: 1}),
			AppendError(nil, req, errors.New("e")),
		} {
			var v map[string]any
			if err := json.Unmarshal(out, &v); err != nil {
				t.Fatalf("output for %q is not JSON: %v\n%s", b, err, out)
			}
			seen := map[string]bool{}
			for _, m := range refMembers(t, bytes.TrimSpace(out)) {
				if seen[m.name] && isOutput(m.name) {
					t.Fatalf("output for %q holds %q twice: %s", b, m.name, out)
				}
				seen[m.name] = true
			}
			again, err := Parse(bytes.TrimSpace(out))
			if err != nil || again.T != req.T || again.Key != req.Key || again.Cost != req.Cost || again.Charge != req.Charge {
				t.Fatalf("output for %q parses to %+v, %v; want %+v", b, again, err, req)
			}
		}
	})
}

// refMembers is scanObject done with encoding/json's tokens: the reference
// the fuzz target holds it to.
func refMembers(t *testing.T, b []byte) []member {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	if _, err := d.Token(); err != nil {
		t.Fatalf("%q: %v", b, err)
	}
	var ms []member
	for d.More() {
		from := int(d.InputOffset())
		tok, err := d.Token()
		if err != nil {
			t.Fatalf("%q: %v", b, err)
		}
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			t.Fatalf("%q: %v", b, err)
		}
		ms = append(ms, member{name: tok.(string), value: v, from: from, to: int(d.InputOffset())})
	}
	return ms
}
