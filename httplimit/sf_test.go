package httplimit_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// sfItem is one member of an RFC 9651 List: a bare item and its parameters.
type sfItem struct {
	Value  any // string (sf-string), sfToken, int64, bool
	Params map[string]any
	Order  []string
}

type sfToken string

// parseSFList parses an RFC 9651 List of Items (no Inner Lists, Decimals,
// Byte Sequences, Dates or Display Strings: the rate-limit fields use none).
func parseSFList(s string) ([]sfItem, error) {
	p := &sfParser{s: strings.TrimLeft(s, " ")}
	var out []sfItem
	if p.s == "" {
		return nil, nil
	}
	for {
		it, err := p.item()
		if err != nil {
			return nil, err
		}
		out = append(out, it)
		p.ows()
		if p.eof() {
			return out, nil
		}
		if p.s[0] != ',' {
			return nil, fmt.Errorf("want ',' at %q", p.s)
		}
		p.s = p.s[1:]
		p.ows()
		if p.eof() {
			return nil, fmt.Errorf("trailing comma")
		}
	}
}

type sfParser struct{ s string }

func (p *sfParser) eof() bool { return p.s == "" }

func (p *sfParser) ows() { p.s = strings.TrimLeft(p.s, " \t") }

func (p *sfParser) item() (sfItem, error) {
	v, err := p.bare()
	if err != nil {
		return sfItem{}, err
	}
	it := sfItem{Value: v, Params: map[string]any{}}
	for !p.eof() && p.s[0] == ';' {
		p.s = strings.TrimLeft(p.s[1:], " ")
		k, err := p.key()
		if err != nil {
			return sfItem{}, err
		}
		var pv any = true
		if !p.eof() && p.s[0] == '=' {
			p.s = p.s[1:]
			if pv, err = p.bare(); err != nil {
				return sfItem{}, err
			}
		}
		if _, dup := it.Params[k]; !dup {
			it.Order = append(it.Order, k)
		}
		it.Params[k] = pv
	}
	return it, nil
}

func (p *sfParser) key() (string, error) {
	if p.eof() || !(p.s[0] == '*' || (p.s[0] >= 'a' && p.s[0] <= 'z')) {
		return "", fmt.Errorf("bad key at %q", p.s)
	}
	i := 1
	for i < len(p.s) && (p.s[i] >= 'a' && p.s[i] <= 'z' || p.s[i] >= '0' && p.s[i] <= '9' || strings.IndexByte("_-.*", p.s[i]) >= 0) {
		i++
	}
	k := p.s[:i]
	p.s = p.s[i:]
	return k, nil
}

func (p *sfParser) bare() (any, error) {
	if p.eof() {
		return nil, fmt.Errorf("want a bare item, got the end")
	}
	c := p.s[0]
	switch {
	case c == '"':
		var b strings.Builder
		for i := 1; i < len(p.s); i++ {
			switch ch := p.s[i]; {
			case ch == '\\':
				if i+1 >= len(p.s) || (p.s[i+1] != '"' && p.s[i+1] != '\\') {
					return nil, fmt.Errorf("bad escape in string")
				}
				i++
				b.WriteByte(p.s[i])
			case ch == '"':
				p.s = p.s[i+1:]
				return b.String(), nil
			case ch < 0x20 || ch > 0x7e:
				return nil, fmt.Errorf("bad character %q in string", ch)
			default:
				b.WriteByte(ch)
			}
		}
		return nil, fmt.Errorf("unterminated string")
	case c == '-' || c >= '0' && c <= '9':
		i := 0
		if c == '-' {
			i++
		}
		j := i
		for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
			j++
		}
		if j == i || j-i > 15 {
			return nil, fmt.Errorf("bad integer at %q", p.s)
		}
		if j < len(p.s) && p.s[j] == '.' {
			return nil, fmt.Errorf("decimals not expected at %q", p.s)
		}
		n, err := strconv.ParseInt(p.s[:j], 10, 64)
		if err != nil {
			return nil, err
		}
		p.s = p.s[j:]
		return n, nil
	case c == '?':
		if len(p.s) < 2 || (p.s[1] != '0' && p.s[1] != '1') {
			return nil, fmt.Errorf("bad boolean")
		}
		v := p.s[1] == '1'
		p.s = p.s[2:]
		return v, nil
	case c == '*' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		i := 1
		for i < len(p.s) && p.s[i] > 0x20 && p.s[i] < 0x7f && strings.IndexByte(`"(),;<=>?@[\]{}`, p.s[i]) < 0 || i < len(p.s) && (p.s[i] == ':' || p.s[i] == '/') {
			i++
		}
		t := p.s[:i]
		p.s = p.s[i:]
		return sfToken(t), nil
	}
	return nil, fmt.Errorf("bad bare item at %q", p.s)
}

func TestSFParser(t *testing.T) {
	items, err := parseSFList(`"burst";q=100;w=60, "daily";q=1000;w=86400, tok;a;b=?0;c="x\"y"`)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 3 || items[0].Value != "burst" || items[0].Params["q"] != int64(100) || items[1].Params["w"] != int64(86400) {
		t.Fatalf("parsed %+v", items)
	}
	if items[2].Value != sfToken("tok") || items[2].Params["a"] != true || items[2].Params["b"] != false || items[2].Params["c"] != `x"y` {
		t.Fatalf("parsed %+v", items[2])
	}
	for _, bad := range []string{`"a";q=1,`, `"a";Q=1`, `"a`, `"a";q=1.5`, `"a" "b"`, `"a";q=`} {
		if _, err := parseSFList(bad); err == nil {
			t.Errorf("parseSFList(%q): no error", bad)
		}
	}
}
