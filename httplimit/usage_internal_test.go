package httplimit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

var usagePath = []string{"usage", "total_tokens"}

// scanJSON reads doc through a usage of path, in chunks of n bytes.
func scanJSON(path []string, doc []byte, n int, contentType string) (int64, bool, error) {
	u := newUsage(path, defaultMaxUsageBytes, contentType)
	for len(doc) > 0 {
		k := min(n, len(doc))
		u.write(doc[:k])
		doc = doc[k:]
	}
	return u.result()
}

// oracle is what encoding/json finds in a valid doc: the first value at
// path in the document's order, read as a count, or an error.
func oracle(doc []byte, path []string) (units int64, found bool, err error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var walk func(depth int, onPath bool) error
	walk = func(depth int, onPath bool) error {
		tok, terr := dec.Token()
		if terr != nil {
			return terr
		}
		target := onPath && depth == len(path) && !found
		switch v := tok.(type) {
		case json.Delim:
			if target {
				found, err = true, errors.New("not a number")
			}
			for dec.More() {
				child := false
				if v == '{' {
					k, kerr := dec.Token()
					if kerr != nil {
						return kerr
					}
					child = onPath && depth < len(path) && k.(string) == path[depth]
				}
				if werr := walk(depth+1, child); werr != nil {
					return werr
				}
			}
			_, derr := dec.Token()
			return derr
		case json.Number:
			if target {
				found = true
				s := v.String()
				n, perr := strconv.ParseInt(s, 10, 64)
				switch {
				case perr == nil && n >= 0:
					units = n
				case s == "-0":
				default:
					err = errors.New("not a count")
				}
			}
		default:
			if target {
				found, err = true, errors.New("not a number")
			}
		}
		return nil
	}
	if werr := walk(0, true); werr != nil {
		panic(werr) // doc is valid
	}
	return units, found, err
}

func TestUsageJSON(t *testing.T) {
	for _, tc := range []struct {
		doc   string
		units int64
		found bool
		err   string
	}{
		{`{"id":"x","usage":{"prompt_tokens":10,"total_tokens":4000}}`, 4000, true, ""},
		{` {"usage" : { "total_tokens" : 0 } } `, 0, true, ""},
		{`{"choices":[{"usage":{"total_tokens":7}}],"usage":{"total_tokens":8}}`, 8, true, ""},
		{`{"usage":{"a":[1,{"total_tokens":3}],"total_tokens":9}}`, 9, true, ""},
		{`{"u\u0073age":{"total_tokens":12}}`, 12, true, ""},
		{`{"usage":{"total_tokens":-0}}`, 0, true, ""},
		{`{"usage":{"total_tokens":9223372036854775807}}`, 1<<63 - 1, true, ""},
		{`{"usage":{"total_tokens":9223372036854775808}}`, 0, false, "more units than an int64"},
		{`{"usage":{"total_tokens":-3}}`, 0, false, "negative"},
		{`{"usage":{"total_tokens":1.5}}`, 0, false, "not a whole number"},
		{`{"usage":{"total_tokens":1e3}}`, 0, false, "not a whole number"},
		{`{"usage":{"total_tokens":"12"}}`, 0, false, "a string"},
		{`{"usage":{"total_tokens":null}}`, 0, false, "not a number"},
		{`{"usage":{"total_tokens":{}}}`, 0, false, "not a number"},
		{`{"usage":{}}`, 0, false, "no "},
		{`{"usage":{"total_tokens":12`, 12, true, ""}, // read before the body broke
		{`{"usage":{"total_tokens":`, 0, false, "ends early"},
		{`<html>oops</html>`, 0, false, "not JSON"},
		{``, 0, false, "ends early"},
		{`{"usage":{"total_tokens":01}}`, 0, false, "not JSON"},
		{strings.Repeat("[", 200) + strings.Repeat("]", 200), 0, false, "too deep"},
	} {
		for _, n := range []int{1, 3, 1 << 20} {
			units, found, err := scanJSON(usagePath, []byte(tc.doc), n, "application/json")
			if units != tc.units && found || found != tc.found || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%.60s in chunks of %d: %d, %v, %v; want %d, %v, %q", tc.doc, n, units, found, err, tc.units, tc.found, tc.err)
			}
		}
	}
}

const sseBody = "event: x\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\r\n\r\n" +
	": a comment\n" +
	"data: {\"choices\":[],\n" +
	"data:\"usage\":{\"total_tokens\":41}}\n\n" +
	"data: {\"choices\":[{\"delta\":{}}]}\n\n" +
	"data: [DONE]\n\n"

func TestUsageSSE(t *testing.T) {
	for _, tc := range []struct {
		body  string
		units int64
		found bool
		err   string
	}{
		{sseBody, 41, true, ""},
		{strings.ReplaceAll(sseBody, "\n", "\r"), 41, true, ""},
		{"data: {\"usage\":{\"total_tokens\":5}}\n\ndata: {\"usage\":{\"total_tokens\":9}}", 9, true, ""}, // a last event without its blank line
		{"data: {\"usage\":{\"total_tokens\":5}}\n\ndata: {\"usage\":{\"total_tokens\":\"x\"}}\n\n", 0, false, "a string"},
		{"data: {\"usage\":{\"total_tokens\":\"x\"}}\n\ndata: {\"usage\":{\"total_tokens\":5}}\n\n", 5, true, ""},
		{"data: [DONE]\n\n", 0, false, "no event"},
		{"data\ndata: {\"usage\":{\"total_tokens\":6}}\n\n", 6, true, ""},
		{"data:{\"usage\":{\"total_tokens\":7}}\n\n", 7, true, ""},
		{"dat: {\"usage\":{\"total_tokens\":7}}\n\ndatas: {\"usage\":{\"total_tokens\":8}}\n\n", 0, false, "no event"},
		{"", 0, false, "no event"},
	} {
		for _, n := range []int{1, 2, 7, 1 << 20} {
			units, found, err := scanJSON(usagePath, []byte(tc.body), n, "text/event-stream; charset=utf-8")
			if units != tc.units && found || found != tc.found || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q in chunks of %d: %d, %v, %v; want %d, %v, %q", tc.body, n, units, found, err, tc.units, tc.found, tc.err)
			}
		}
	}
}

// TestUsageBounded: past its bytes, a usage reads no more; a stream's
// usage found before counts.
func TestUsageBounded(t *testing.T) {
	doc := `{"pad":"` + strings.Repeat("x", 100) + `","usage":{"total_tokens":3}}`
	u := newUsage(usagePath, 50, "application/json")
	u.write([]byte(doc))
	if _, found, err := u.result(); found || err == nil || !strings.Contains(err.Error(), "first 50 bytes") {
		t.Errorf("past the bound: %v, %v", found, err)
	}
	s := newUsage(usagePath, 60, "text/event-stream")
	s.write([]byte("data: {\"usage\":{\"total_tokens\":3}}\n\n" + strings.Repeat("data: {}\n\n", 100) + "data: {\"usage\":{\"total_tokens\":9}}\n\n"))
	if units, found, err := s.result(); !found || units != 3 || err != nil {
		t.Errorf("a stream past the bound: %d, %v, %v; want 3 read before it", units, found, err)
	}
}

// FuzzUsageJSON reads documents as encoding/json does: in any chunks,
// the first value at the path of a valid document, or that it is not a
// count, or none; and never panics on any bytes.
func FuzzUsageJSON(f *testing.F) {
	for _, s := range []string{
		`{"usage":{"total_tokens":4000}}`, `{"usage":{"total_tokens":1.5e3}}`, `{"a":[{"usage":1}],"usage":{"total_tokens":"7"}}`,
		`{"usage":{"total_tokens":12},"usage":{"total_tokens":13}}`, `{"us\u0061ge":{"total_tokens":2}}`, `[1,2,{"usage":3}]`,
		`{"usage":{"total_tokens":-0.0}}`, `{"\ud83d\ude00":1,"usage":{"total_tokens":5}}`, `{"usage":{"total_tokens":true}}`, `"\u00e9"`,
		`{"usage":{"total_tokens":99999999999999999999}}`, `{"usage":{"total_tokens":00}}`, `{"usage" {}}`, `{"a":"\x01"}`,
	} {
		f.Add([]byte(s), uint8(3), false)
	}
	f.Fuzz(func(t *testing.T, doc []byte, chunk uint8, short bool) {
		path := usagePath
		if short {
			path = path[:1]
		}
		units, found, err := scanJSON(path, doc, int(chunk)+1, "application/json")
		whole, wfound, werr := scanJSON(path, doc, len(doc)+1, "application/json")
		if units != whole || found != wfound || (err == nil) != (werr == nil) {
			t.Fatalf("%q: in chunks of %d %d, %v, %v; at once %d, %v, %v", doc, int(chunk)+1, units, found, err, whole, wfound, werr)
		}
		if !json.Valid(doc) {
			return
		}
		ou, ofound, oerr := oracle(doc, path)
		if ofound && oerr == nil {
			if !found || units != ou || err != nil {
				t.Fatalf("%q: %d, %v, %v; encoding/json reads %d", doc, units, found, err, ou)
			}
			return
		}
		if found || err == nil || errors.Is(err, errNotJSON) {
			t.Fatalf("%q: %d, %v, %v; encoding/json: found %v, %v", doc, units, found, err, ofound, oerr)
		}
	})
}

// FuzzUsageSSE: an event stream reads the same in any chunks, and never
// panics.
func FuzzUsageSSE(f *testing.F) {
	f.Add([]byte(sseBody), uint8(1))
	f.Add([]byte("data: {\"usage\":{\"total_tokens\":5}}\r\n\r\ndata: [DONE]\r\n\r\n"), uint8(4))
	f.Add([]byte("data\rdata:\r\n{\"usage\":{\"total_tokens\":5}}\n\n"), uint8(0))
	f.Fuzz(func(t *testing.T, body []byte, chunk uint8) {
		units, found, err := scanJSON(usagePath, body, int(chunk)+1, "text/event-stream")
		whole, wfound, werr := scanJSON(usagePath, body, len(body)+1, "text/event-stream")
		if units != whole || found != wfound || fmt.Sprint(err) != fmt.Sprint(werr) {
			t.Fatalf("%q: in chunks of %d %d, %v, %v; at once %d, %v, %v", body, int(chunk)+1, units, found, err, whole, wfound, werr)
		}
	})
}
