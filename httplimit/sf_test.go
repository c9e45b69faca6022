package httplimit_test

import (
	"fmt"
	"net/url"
	"testing"

	"github.com/dunglas/httpsfv"
)

// sfItem is one member of an RFC 9651 List, as an independent parser
// (httpsfv) reads it: a String's value percent-decoded (the way names are
// written, internal/policycore.AppendName), and the parameters.
type sfItem struct {
	Value  any // the decoded name for a String, else httpsfv's value
	Params map[string]any
	Order  []string
}

// parseSFList parses a draft-11 field with httpsfv: an RFC 9651 List of
// Items whose Strings percent-decode.
func parseSFList(s string) ([]sfItem, error) {
	l, err := httpsfv.UnmarshalList([]string{s})
	if err != nil {
		return nil, err
	}
	out := make([]sfItem, 0, len(l))
	for _, m := range l {
		it, ok := m.(httpsfv.Item)
		if !ok {
			return nil, fmt.Errorf("member %v is not an Item", m)
		}
		v := it.Value
		if s, ok := v.(string); ok {
			if v, err = url.PathUnescape(s); err != nil {
				return nil, fmt.Errorf("name %q does not percent-decode: %w", s, err)
			}
		}
		p := sfItem{Value: v, Params: map[string]any{}, Order: it.Params.Names()}
		for _, k := range p.Order {
			p.Params[k], _ = it.Params.Get(k)
		}
		out = append(out, p)
	}
	return out, nil
}

func TestSFParser(t *testing.T) {
	items, err := parseSFList(`"burst";q=100;w=60, "caf%c3%a9";q=1000;w=86400, tok;a;b=?0;c="x\"y"`)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 3 || items[0].Value != "burst" || items[0].Params["q"] != int64(100) || items[1].Value != "café" || items[1].Params["w"] != int64(86400) {
		t.Fatalf("parsed %+v", items)
	}
	if items[2].Value != httpsfv.Token("tok") || items[2].Params["a"] != true || items[2].Params["b"] != false || items[2].Params["c"] != `x"y` {
		t.Fatalf("parsed %+v", items[2])
	}
	for _, bad := range []string{`"a";q=1,`, `"a";Q=1`, `"a`, `"a";q=`, `"a" "b"`, `"50%"`, `"a";q=1234567890123456`, "\"caf\xc3\xa9\""} {
		if _, err := parseSFList(bad); err == nil {
			t.Errorf("parseSFList(%q): no error", bad)
		}
	}
}
