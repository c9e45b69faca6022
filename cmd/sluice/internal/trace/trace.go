// Package trace reads and writes the JSON-lines traces of `sluice replay`: one
// request a line in, one decision a line out.
//
// A request line is a JSON object with t_us (a JSON integer: µs since the
// epoch), key (a non-empty string) and optionally cost (a JSON integer ≥ 0,
// default 1), or charge in place of cost (a JSON integer ≥ 0: units charged
// whatever the key has, never refused, as sluice.Limiter.Charge charges
// them); or, for a composite request, t_us and parts in place of key and
// cost: a non-empty array of objects, each with key, limit (RATE/PERIOD),
// and optionally algorithm, burst and cost (default 1). Other fields are
// carried through. A decision line is the
// request's object with allowed, remaining, retry_after_us, reset_after_us and
// delay_us appended, or error for a request that could never pass. A request
// line that already holds any of those six fields (an earlier replay's output
// replayed) has them replaced, never repeated.
//
// Lines may be of any length; a UTF-8 byte order mark before the first line
// is skipped, and so are blank lines.
package trace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/store"
)

// Request is one line of a trace.
type Request struct {
	Line int // 1-based line number
	// Raw is the line's JSON object, trimmed, without the fields a decision
	// line writes (Outputs); valid until the next Read.
	Raw  []byte
	T    int64 // µs since the epoch
	Key  string
	Cost int64
	// Charge: the line is a charge (its "charge"), of Cost units.
	Charge bool
	// Parts, when set, make the line a composite request; Key, Cost and
	// Charge are then unused.
	Parts []Part
}

// Part is one limit of a composite request line. Limit and Algorithm are the
// text the line gave ("" when it gave none); Burst is -1 when it gave none.
type Part struct {
	Key       string
	Limit     string
	Algorithm string
	Burst     int64
	Cost      int64
}

// Outputs are the fields a decision line writes. A request line's own
// fields of these names are dropped from Request.Raw.
var Outputs = []string{"allowed", "remaining", "retry_after_us", "reset_after_us", "delay_us", "error"}

// Reader reads requests from a trace.
type Reader struct {
	r    *bufio.Reader
	line int
	long []byte // a line longer than r's buffer, gathered
}

// NewReader returns a Reader over r. Lines may be of any length.
func NewReader(r io.Reader) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 64*1024)}
}

// bom is the UTF-8 byte order mark some editors put at a file's start.
var bom = []byte("\xef\xbb\xbf")

// Read returns the next request, io.EOF at the end, or an error naming the
// malformed line. Blank lines are skipped.
func (r *Reader) Read() (Request, error) {
	for {
		b, err := r.readLine()
		if err != nil && err != io.EOF {
			return Request{}, fmt.Errorf("line %d: %w", r.line+1, err)
		}
		if len(b) == 0 && err == io.EOF {
			return Request{}, io.EOF
		}
		r.line++
		if r.line == 1 {
			b = bytes.TrimPrefix(b, bom)
		}
		b = bytes.TrimSpace(b)
		if len(b) == 0 {
			continue
		}
		req, err := Parse(b)
		if err != nil {
			return Request{}, fmt.Errorf("line %d: %w", r.line, err)
		}
		req.Line = r.line
		return req, nil
	}
}

// readLine returns the next line, with its newline, however long; a last
// line without one comes with io.EOF.
func (r *Reader) readLine() ([]byte, error) {
	r.long = r.long[:0]
	for {
		chunk, err := r.r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			r.long = append(r.long, chunk...)
			continue
		}
		if len(r.long) > 0 {
			r.long = append(r.long, chunk...)
			return r.long, err
		}
		return chunk, err
	}
}

// Parse reads one request line (a JSON object, already trimmed).
func Parse(b []byte) (Request, error) {
	req := Request{Raw: b, Cost: 1}
	if !json.Valid(b) {
		var v json.RawMessage
		d := json.NewDecoder(bytes.NewReader(b))
		if err := d.Decode(&v); err == nil {
			rest := bytes.TrimLeft(b[d.InputOffset():], " \t\r\n")
			return req, fmt.Errorf("text after the JSON object (at column %d)", len(b)-len(rest)+1)
		}
		return req, fmt.Errorf("not a JSON object: %v", syntaxError(json.Unmarshal(b, &v)))
	}
	if b[0] != '{' {
		return req, fmt.Errorf("not a JSON object: the line is %s", kind(b))
	}
	members, err := scanObject(b)
	if err != nil {
		return req, err
	}
	var t, key, cost, charge, parts []byte
	var drop []member
	for _, m := range members {
		var dst *[]byte
		switch m.name {
		case "t_us":
			dst = &t
		case "key":
			dst = &key
		case "cost":
			dst = &cost
		case "charge":
			dst = &charge
		case "parts":
			dst = &parts
		default:
			if isOutput(m.name) {
				drop = append(drop, m)
			}
			continue
		}
		if *dst != nil {
			return req, fmt.Errorf("%q appears twice", m.name)
		}
		*dst = m.value
	}
	if t == nil {
		return req, errors.New(`missing "t_us" (µs since the epoch, a JSON integer)`)
	}
	n, err := integer("t_us", t, "µs since the epoch")
	if err != nil {
		return req, err
	}
	if err := algo.CheckTime(n); err != nil {
		return req, fmt.Errorf(`"t_us" %d is out of range: want 0 to 2^52 µs since the epoch (the year 2112)`, n)
	}
	req.T = n
	if parts != nil {
		if key != nil || cost != nil || charge != nil {
			return req, errors.New(`"parts" and "key", "cost" or "charge" on one line: a composite's keys and costs are its parts'`)
		}
		if req.Parts, err = parseParts(parts); err != nil {
			return req, err
		}
		if len(drop) > 0 {
			req.Raw = without(b, members, drop)
		}
		return req, nil
	}
	if key == nil {
		return req, errors.New(`missing "key" (a non-empty string)`)
	}
	if key[0] != '"' {
		return req, fmt.Errorf(`"key" is %s, want a non-empty string`, kind(key))
	}
	if err := json.Unmarshal(key, &req.Key); err != nil {
		return req, fmt.Errorf(`"key" is not a valid JSON string: %v`, err)
	}
	if req.Key == "" {
		return req, errors.New(`"key" is empty, want a non-empty string`)
	}
	if cost != nil && charge != nil {
		return req, errors.New(`"cost" and "charge" on one line: a line takes its cost or charges its units, not both`)
	}
	if charge != nil {
		cost, req.Charge = charge, true
	}
	if cost != nil {
		name := "cost"
		if req.Charge {
			name = "charge"
		}
		c, err := integer(name, cost, "units")
		if err != nil {
			return req, err
		}
		if c < 0 {
			return req, fmt.Errorf(`%q %d is negative, want a whole number ≥ 0`, name, c)
		}
		req.Cost = c
	}
	if len(drop) > 0 {
		req.Raw = without(b, members, drop)
	}
	return req, nil
}

// parseParts reads a composite line's "parts": a non-empty array of objects.
func parseParts(v []byte) ([]Part, error) {
	if v[0] != '[' {
		return nil, fmt.Errorf(`"parts" is %s, want an array of objects like {"key": "global", "limit": "30/1s", "cost": 1}`, kind(v))
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(v, &raws); err != nil {
		return nil, fmt.Errorf(`"parts": %v`, err)
	}
	if len(raws) == 0 {
		return nil, errors.New(`"parts" is empty, want at least one part`)
	}
	parts := make([]Part, len(raws))
	for i, raw := range raws {
		pt, err := parsePart(raw)
		if err != nil {
			return nil, fmt.Errorf(`"parts"[%d]: %w`, i, err)
		}
		parts[i] = pt
	}
	return parts, nil
}

func parsePart(v []byte) (Part, error) {
	pt := Part{Burst: -1, Cost: 1}
	if v[0] != '{' {
		return pt, fmt.Errorf(`is %s, want an object like {"key": "global", "limit": "30/1s"}`, kind(v))
	}
	members, err := scanObject(v)
	if err != nil {
		return pt, err
	}
	seen := map[string]bool{}
	for _, m := range members {
		if seen[m.name] {
			return pt, fmt.Errorf("%q appears twice", m.name)
		}
		seen[m.name] = true
		switch m.name {
		case "key", "limit", "algorithm":
			if m.value[0] != '"' {
				return pt, fmt.Errorf("%q is %s, want a string", m.name, kind(m.value))
			}
			var str string
			if err := json.Unmarshal(m.value, &str); err != nil {
				return pt, fmt.Errorf("%q is not a valid JSON string: %v", m.name, err)
			}
			switch m.name {
			case "key":
				pt.Key = str
			case "limit":
				pt.Limit = str
			default:
				pt.Algorithm = str
			}
		case "burst", "cost":
			n, err := integer(m.name, m.value, "units")
			if err != nil {
				return pt, err
			}
			if n < 0 {
				return pt, fmt.Errorf("%q %d is negative, want a whole number ≥ 0", m.name, n)
			}
			if m.name == "burst" {
				pt.Burst = n
			} else {
				pt.Cost = n
			}
		default:
			return pt, fmt.Errorf("unknown field %q (a part has key, limit, algorithm, burst and cost)", m.name)
		}
	}
	if pt.Key == "" {
		return pt, errors.New(`missing or empty "key", want a non-empty string`)
	}
	return pt, nil
}

// integer reads a field's raw value as a JSON integer that fits an int64.
func integer(field string, v []byte, unit string) (int64, error) {
	if v[0] != '-' && (v[0] < '0' || v[0] > '9') {
		if v[0] == '"' {
			return 0, fmt.Errorf(`%q is the string %s, want a JSON integer (%s) without quotes`, field, short(v), unit)
		}
		return 0, fmt.Errorf(`%q is %s, want a JSON integer (%s)`, field, kind(v), unit)
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		if bytes.ContainsAny(v, ".eE") {
			return 0, fmt.Errorf(`%q %s is not a whole number, want a JSON integer (%s)`, field, short(v), unit)
		}
		return 0, fmt.Errorf(`%q %s is out of range for a whole number of %s`, field, short(v), unit)
	}
	return n, nil
}

// short returns a raw value for an error message, cut to 40 bytes.
func short(v []byte) string {
	if len(v) <= 40 {
		return string(v)
	}
	return string(bytes.ToValidUTF8(v[:40], nil)) + "…"
}

// kind names the JSON type of a valid raw value, for error messages.
func kind(v []byte) string {
	switch v[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "true or false"
	case 'n':
		return "null"
	}
	return "a number"
}

// syntaxError words a JSON syntax error with the column (1-based byte)
// where it was found.
func syntaxError(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s (at column %d)", se.Error(), se.Offset)
	}
	return err.Error()
}

func isOutput(name string) bool {
	for _, o := range Outputs {
		if name == o {
			return true
		}
	}
	return false
}

// member is one top-level field of a request line: its decoded name, its
// raw value, and the bytes [from, to) it spans in the line (with the comma
// before it, if any, and the white space around).
type member struct {
	name     string
	value    []byte
	from, to int
}

// scanObject splits a JSON object, which json.Valid has accepted, into its
// top-level members. Validity makes the scan simple: a string ends at the
// first unescaped quote, a number or literal at a comma, brace or space, an
// object or array at its matching bracket.
func scanObject(b []byte) ([]member, error) {
	ms := make([]member, 0, 8)
	i := skipSpace(b, 1) // after {
	if b[i] == '}' {
		return ms, nil
	}
	from := 1
	for {
		i = skipSpace(b, i)
		end := skipString(b, i)
		name := b[i+1 : end-1]
		var m member
		if bytes.IndexByte(name, '\\') >= 0 || !utf8.Valid(name) { // as encoding/json reads it
			if err := json.Unmarshal(b[i:end], &m.name); err != nil {
				return nil, fmt.Errorf("not a JSON object: %v", err)
			}
		} else {
			m.name = string(name)
		}
		i = skipSpace(b, skipSpace(b, end)+1) // after :
		vend := skipValue(b, i)
		m.value, m.from, m.to = b[i:vend], from, vend
		ms = append(ms, m)
		i = skipSpace(b, vend)
		if b[i] == '}' {
			if skipSpace(b, i+1) != len(b) {
				return nil, errors.New("text after the JSON object")
			}
			return ms, nil
		}
		from = vend
		i++ // the comma
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// skipString returns the index after the string that starts at b[i].
func skipString(b []byte, i int) int {
	for i++; b[i] != '"'; i++ {
		if b[i] == '\\' {
			i++
		}
	}
	return i + 1
}

// skipValue returns the index after the value that starts at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
	}
	for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\r' && b[i] != '\n' {
		i++
	}
	return i
}

// without returns a copy of the object b without the members in drop (a
// subset of members, in order), the others' bytes as they were.
func without(b []byte, members, drop []member) []byte {
	out := make([]byte, 0, len(b))
	start := 1 // after {
	if len(members) > 0 {
		start = members[0].from
	}
	out = append(out, b[:start]...)
	first := true
	for _, m := range members {
		if len(drop) > 0 && drop[0].from == m.from {
			drop = drop[1:]
			continue
		}
		span := b[m.from:m.to]
		if first && m.from != members[0].from {
			// The first kept member, after dropped ones, loses its comma.
			span = bytes.TrimLeft(span, " \t\r\n")
			span = bytes.TrimLeft(bytes.TrimPrefix(span, []byte(",")), " \t\r\n")
		}
		first = false
		out = append(out, span...)
	}
	last := 1
	if len(members) > 0 {
		last = members[len(members)-1].to
	}
	return append(out, b[last:]...)
}

// AppendDecision appends the request's object with the decision's fields to
// dst, and a newline.
func AppendDecision(dst []byte, req Request, d store.Decision) []byte {
	dst = openObject(dst, req.Raw)
	dst = append(dst, `"allowed":`...)
	dst = strconv.AppendBool(dst, d.Allowed)
	dst = append(dst, `,"remaining":`...)
	dst = strconv.AppendInt(dst, d.Remaining, 10)
	dst = append(dst, `,"retry_after_us":`...)
	dst = strconv.AppendInt(dst, d.RetryAfter, 10)
	dst = append(dst, `,"reset_after_us":`...)
	dst = strconv.AppendInt(dst, d.ResetAfter, 10)
	dst = append(dst, `,"delay_us":`...)
	dst = strconv.AppendInt(dst, d.Delay, 10)
	return append(dst, "}\n"...)
}

// AppendError appends the request's object with an error field to dst, and a
// newline.
func AppendError(dst []byte, req Request, err error) []byte {
	dst = openObject(dst, req.Raw)
	msg, _ := json.Marshal(err.Error())
	dst = append(dst, `"error":`...)
	dst = append(dst, msg...)
	return append(dst, "}\n"...)
}

// openObject appends raw without its closing brace, and a comma if it had
// fields.
func openObject(dst, raw []byte) []byte {
	body := bytes.TrimSpace(raw[:len(raw)-1])
	dst = append(dst, body...)
	if len(bytes.TrimSpace(body[1:])) > 0 {
		dst = append(dst, ',')
	}
	return dst
}
