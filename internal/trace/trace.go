// Package trace reads and writes the JSON-lines traces of `sluice replay`: one
// request a line in, one decision a line out.
//
// A request line is a JSON object with t_us (integer µs since the epoch), key
// (a non-empty string) and optionally cost (an integer ≥ 0, default 1); other
// fields are carried through. A decision line is the request's object with
// allowed, remaining, retry_after_us, reset_after_us and delay_us appended, or
// error for a request that could never pass.
package trace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/sluice-go/sluice/algo"
)

// Request is one line of a trace.
type Request struct {
	Line int    // 1-based line number
	Raw  []byte // the line's JSON object, trimmed; valid until the next Read
	T    int64  // µs since the epoch
	Key  string
	Cost int64
}

// Reader reads requests from a trace.
type Reader struct {
	s    *bufio.Scanner
	line int
}

// NewReader returns a Reader over r. Lines may be up to 1 MiB long.
func NewReader(r io.Reader) *Reader {
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64*1024), 1<<20)
	return &Reader{s: s}
}

// Read returns the next request, io.EOF at the end, or an error naming the
// malformed line. Blank lines are skipped.
func (r *Reader) Read() (Request, error) {
	for r.s.Scan() {
		r.line++
		b := bytes.TrimSpace(r.s.Bytes())
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
	if err := r.s.Err(); err != nil {
		return Request{}, fmt.Errorf("line %d: %w", r.line+1, err)
	}
	return Request{}, io.EOF
}

type wire struct {
	T    *json.Number `json:"t_us"`
	Key  *string      `json:"key"`
	Cost *json.Number `json:"cost"`
}

// Parse reads one request line (a JSON object, already trimmed).
func Parse(b []byte) (Request, error) {
	if len(b) == 0 || b[0] != '{' {
		return Request{}, errors.New("not a JSON object")
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var w wire
	if err := d.Decode(&w); err != nil {
		return Request{}, fmt.Errorf("not a JSON object: %v", err)
	}
	if d.More() || d.InputOffset() != int64(len(b)) {
		return Request{}, errors.New("text after the JSON object")
	}
	req := Request{Raw: b, Cost: 1}
	if w.T == nil {
		return req, errors.New(`missing "t_us"`)
	}
	t, err := strconv.ParseInt(string(*w.T), 10, 64)
	if err != nil {
		return req, fmt.Errorf(`"t_us" %s is not a whole number of microseconds`, *w.T)
	}
	if err := algo.CheckTime(t); err != nil {
		return req, fmt.Errorf(`"t_us": %v`, err)
	}
	req.T = t
	if w.Key == nil || *w.Key == "" {
		return req, errors.New(`missing or empty "key"`)
	}
	req.Key = *w.Key
	if w.Cost != nil {
		c, err := strconv.ParseInt(string(*w.Cost), 10, 64)
		if err != nil || c < 0 {
			return req, fmt.Errorf(`"cost" %s is not a whole number ≥ 0`, *w.Cost)
		}
		req.Cost = c
	}
	return req, nil
}

// AppendDecision appends the request's object with the decision's fields to
// dst, and a newline.
func AppendDecision(dst []byte, req Request, d algo.Decision) []byte {
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
