package console

import (
	"strconv"
	"sync"
	"unicode/utf8"
)

// The live report is written by hand rather than by encoding/json: it is
// polled by every open page, and reflection was most of its cost. The
// output is the same JSON encoding/json writes for Live (handlers_test.go
// checks it).

// bufPool holds the buffers the live report is written into.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// appendLive appends l as JSON.
func appendLive(b []byte, l *Live) []byte {
	b = append(b, `{"now":`...)
	b = strconv.AppendInt(b, l.Now, 10)
	b = append(b, `,"since":`...)
	b = strconv.AppendInt(b, l.Since, 10)
	b = append(b, `,"window_s":`...)
	b = strconv.AppendInt(b, l.WindowS, 10)
	b = append(b, `,"step_s":`...)
	b = strconv.AppendInt(b, l.StepS, 10)
	b = append(b, `,"rules":`...)
	if l.Rules == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range l.Rules {
			if i > 0 {
				b = append(b, ',')
			}
			r := &l.Rules[i]
			b = append(b, `{"rule":`...)
			b = appendString(b, r.Rule)
			b = append(b, `,"points":[`...)
			for j := range r.Points {
				if j > 0 {
					b = append(b, ',')
				}
				b = appendPoint(b, &r.Points[j])
			}
			b = append(b, `],"totals":`...)
			b = appendPoint(b, &r.Totals)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"top":`...)
	if l.Top == nil {
		b = append(b, "null"...)
		return append(appendHolding(b, &l.holding), '}')
	}
	b = append(b, '[')
	for i := range l.Top {
		if i > 0 {
			b = append(b, ',')
		}
		t := &l.Top[i]
		b = append(b, `{"rule":`...)
		b = appendString(b, t.Rule)
		b = append(b, `,"key":`...)
		b = appendString(b, t.Key)
		b = append(b, `,"count":`...)
		b = strconv.AppendInt(b, t.Count, 10)
		b = append(b, `,"overcount":`...)
		b = strconv.AppendInt(b, t.Overcount, 10)
		b = append(b, '}')
	}
	b = append(b, ']')
	return append(appendHolding(b, &l.holding), '}')
}

func appendPoint(b []byte, p *Point) []byte {
	b = append(b, `{"t":`...)
	b = strconv.AppendInt(b, p.T, 10)
	b = append(b, `,"allowed":`...)
	b = strconv.AppendInt(b, p.Allowed, 10)
	b = append(b, `,"denied":`...)
	b = strconv.AppendInt(b, p.Denied, 10)
	b = append(b, `,"shadow_denied":`...)
	b = strconv.AppendInt(b, p.ShadowDenied, 10)
	b = append(b, `,"error":`...)
	b = strconv.AppendInt(b, p.Error, 10)
	b = append(b, `,"degraded":`...)
	b = strconv.AppendInt(b, p.Degraded, 10)
	b = append(b, `,"latency_avg_us":`...)
	b = strconv.AppendInt(b, p.LatencyAvgUS, 10)
	b = append(b, `,"latency_max_us":`...)
	b = strconv.AppendInt(b, p.LatencyMaxUS, 10)
	b = append(b, `,"latency_n":`...)
	b = strconv.AppendInt(b, p.LatencyN, 10)
	b = append(b, `,"charged":`...)
	b = strconv.AppendInt(b, p.Charged, 10)
	return append(b, '}')
}

const hex = "0123456789abcdef"

// appendString appends s as a JSON string, escaped as encoding/json
// escapes it: quotes, backslashes, control characters, <, > and &, U+2028
// and U+2029, and invalid UTF-8 as U+FFFD.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
