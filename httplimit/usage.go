package httplimit

import (
	"errors"
	"fmt"
	"math"
	"mime"
	"unicode/utf8"
)

// usage reads the integer at a JSON path (Used.JSON) from a body as it
// goes by, keeping none of it: a JSON document, whose first value at the
// path says; or a text/event-stream, each event's data a document of its
// own, whose last event with the value says (a stream reports its usage
// in its last events). It reads at most max bytes; past them it stops, and
// what it found so far says.
type usage struct {
	max, n int64
	sse    bool
	doc    jsonScan // the document, or the current event's data
	found  bool
	units  int64
	err    error // the document's, or the last event's with the path
	// The event stream's lines (sse): the field name read so far at the
	// line's start, and what the rest of the line is.
	line     lineState
	field    [5]byte
	fieldLen int
	cr       bool // the last byte ended a line with '\r': a '\n' after it is that line's
	hasData  bool // the current event has a data line
}

type lineState uint8

const (
	lineStart lineState = iota // reading the field name
	lineSpace                  // after "data:": one space to skip
	lineData                   // in a data line's value
	lineSkip                   // in another field's line, or a comment
)

// maxJSONDepth bounds the nesting a document may have.
const maxJSONDepth = 128

// defaultMaxUsageBytes is how much of a body Used.JSON reads by default.
const defaultMaxUsageBytes = 16 << 20

// newUsage reads path from a body of content type contentType.
func newUsage(path []string, max int64, contentType string) *usage {
	u := &usage{max: max}
	if mt, _, err := mime.ParseMediaType(contentType); err == nil && mt == "text/event-stream" {
		u.sse = true
	}
	u.doc.reset(path)
	return u
}

// write reads the next bytes of the body.
func (u *usage) write(p []byte) {
	if u.n >= u.max || !u.sse && u.doc.done {
		return
	}
	if left := u.max - u.n; int64(len(p)) > left {
		p = p[:left]
	}
	u.n += int64(len(p))
	if !u.sse {
		u.doc.write(p)
		return
	}
	for len(p) > 0 {
		p = u.event(p)
	}
}

// event reads the event stream's bytes up to a line's end and returns
// the rest.
func (u *usage) event(p []byte) []byte {
	for i, b := range p {
		if b == '\n' && u.cr {
			u.cr = false
			continue
		}
		u.cr = false
		if b == '\r' || b == '\n' {
			u.cr = b == '\r'
			u.endLine()
			return p[i+1:]
		}
		switch u.line {
		case lineStart:
			if b == ':' {
				u.line = lineSkip
				if u.fieldLen == 4 && string(u.field[:4]) == "data" {
					u.startData()
					u.line = lineSpace
				}
				continue
			}
			if u.fieldLen < len(u.field) {
				u.field[u.fieldLen] = b
			}
			u.fieldLen++
		case lineSpace:
			u.line = lineData
			if b == ' ' {
				continue
			}
			u.doc.write(p[i : i+1])
		case lineData:
			// The rest of the line, at once.
			j := i
			for j < len(p) && p[j] != '\r' && p[j] != '\n' {
				j++
			}
			u.doc.write(p[i:j])
			return p[j:]
		}
	}
	return nil
}

// startData starts a data line: the event's lines are joined by '\n'.
func (u *usage) startData() {
	if u.hasData {
		u.doc.write([]byte{'\n'})
	}
	u.hasData = true
}

// endLine ends a line: an empty one ends the event.
func (u *usage) endLine() {
	switch {
	case u.line == lineStart && u.fieldLen == 0:
		u.dispatch()
	case u.line == lineStart && u.fieldLen == 4 && string(u.field[:4]) == "data":
		u.startData() // "data" alone: an empty value
	}
	u.line, u.fieldLen = lineStart, 0
}

// dispatch ends an event: its data, if it has the path, says.
func (u *usage) dispatch() {
	if !u.hasData {
		return
	}
	u.hasData = false
	units, found, err := u.doc.finish()
	switch {
	case found && err == nil:
		u.found, u.units, u.err = true, units, nil
	case found: // the last event with the path says it wrong
		u.found, u.err = false, err
	}
	u.doc.reset(u.doc.path)
}

// result is what the body said: the units, or that it said nothing
// (found false; err says why, when the body was not what was expected).
func (u *usage) result() (units int64, found bool, err error) {
	if u.sse {
		if u.line != lineStart || u.fieldLen > 0 {
			u.endLine()
		}
		u.dispatch() // a last event the body ended in
		switch {
		case u.found:
			return u.units, true, nil
		case u.err != nil:
			return 0, false, u.err
		case u.n >= u.max:
			return 0, false, fmt.Errorf("no event had %s in the first %d bytes of the stream", u.doc.pathText(), u.max)
		}
		return 0, false, fmt.Errorf("no event of the stream had %s", u.doc.pathText())
	}
	cut := !u.doc.done && u.n >= u.max
	units, found, err = u.doc.finish()
	if cut && !found {
		err = fmt.Errorf("no %s in the first %d bytes of the body", u.doc.pathText(), u.max)
	}
	return units, found && err == nil, err
}

// jsonScan reads one JSON document as it goes by, for the integer at
// path: a state machine over its bytes that keeps only the containers
// open above the byte it reads.
type jsonScan struct {
	path  []string
	stack []frame
	state scanState
	// A key being read: whether it matches the path's key at its depth
	// so far, and how much of it has matched.
	keyMatch bool
	keyPos   int
	keyHit   bool // the last key read is the path's at its depth
	// A string's escape: 0 none, 1 after '\', 2 to 5 reading \u's hex
	// digits, into hex.
	esc   uint8
	hex   rune
	inKey bool
	// A number: its state, and, at the path, its value so far.
	num      numState
	target   bool
	neg      bool
	whole    bool // no fraction, no exponent
	overflow bool
	value    int64
	lit      string
	litPos   int
	done     bool // the value at the path was read, or the document failed
	found    bool
	units    int64
	err      error
}

// frame is an open container: an object or an array, and whether its
// values may be at the path.
type frame struct{ obj, match bool }

type scanState uint8

const (
	sValue    scanState = iota // a value
	sArrFirst                  // after '[': a value or ']'
	sObjFirst                  // after '{': a key or '}'
	sKey                       // after ',' in an object: a key
	sInKey
	sColon
	sInString
	sNumber
	sLiteral
	sAfter // after a value
	sEnd   // after the document's value
)

type numState uint8

const (
	nMinus numState = iota + 1
	nZero
	nInt
	nDot
	nFrac
	nE
	nESign
	nExp
)

func (s *jsonScan) reset(path []string) {
	*s = jsonScan{path: path, stack: s.stack[:0]}
}

func (s *jsonScan) pathText() string { return fmt.Sprintf("%q", s.path) }

// fail ends the document: it is not JSON.
func (s *jsonScan) fail(err error) {
	if !s.done {
		s.done, s.err = true, err
	}
}

// notCount ends the document: its value at the path is not a count
// (what, with the path).
func (s *jsonScan) notCount(what string) {
	s.fail(fmt.Errorf("%s %s", s.pathText(), what))
	s.found = true
}

var errNotJSON = errors.New("not JSON")

// write reads the document's next bytes.
func (s *jsonScan) write(p []byte) {
	for i := 0; i < len(p) && !s.done; i++ {
		s.step(p[i])
	}
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

func (s *jsonScan) step(b byte) {
	switch s.state {
	case sValue, sArrFirst:
		switch {
		case isSpace(b):
		case b == ']' && s.state == sArrFirst:
			s.pop()
		default:
			s.startValue(b)
		}
	case sObjFirst, sKey:
		switch {
		case isSpace(b):
		case b == '}' && s.state == sObjFirst:
			s.pop()
		case b == '"':
			s.startKey()
		default:
			s.fail(errNotJSON)
		}
	case sInKey, sInString:
		s.stringByte(b)
	case sColon:
		switch {
		case isSpace(b):
		case b == ':':
			s.state = sValue
		default:
			s.fail(errNotJSON)
		}
	case sNumber:
		if !s.numByte(b) {
			s.endNumber()
			if !s.done {
				s.step(b)
			}
		}
	case sLiteral:
		if b != s.lit[s.litPos] {
			s.fail(errNotJSON)
			return
		}
		if s.litPos++; s.litPos == len(s.lit) {
			s.after()
		}
	case sAfter:
		switch {
		case isSpace(b):
		case len(s.stack) == 0:
			s.fail(errNotJSON)
		case s.stack[len(s.stack)-1].obj && b == ',':
			s.state = sKey
		case s.stack[len(s.stack)-1].obj && b == '}':
			s.pop()
		case !s.stack[len(s.stack)-1].obj && b == ',':
			s.state = sValue
		case !s.stack[len(s.stack)-1].obj && b == ']':
			s.pop()
		default:
			s.fail(errNotJSON)
		}
	case sEnd:
		if !isSpace(b) {
			s.fail(errNotJSON)
		}
	}
}

// startValue starts the value whose first byte is b: at the path when
// its container's values may be and its key is the path's.
func (s *jsonScan) startValue(b byte) {
	depth := len(s.stack)
	onPath := depth == 0 || s.stack[depth-1].match && s.keyHit
	s.target = onPath && depth == len(s.path)
	switch {
	case b == '{' || b == '[':
		if s.target {
			s.notCount("is not a number")
			return
		}
		if depth >= maxJSONDepth {
			s.fail(errors.New("JSON nested too deep"))
			return
		}
		s.stack = append(s.stack, frame{obj: b == '{', match: onPath && b == '{'})
		s.state = sObjFirst
		if b == '[' {
			s.state = sArrFirst
		}
	case b == '"':
		if s.target {
			s.notCount("is a string, not a number")
			return
		}
		s.state, s.inKey = sInString, false
	case b == '-' || b >= '0' && b <= '9':
		s.state, s.num, s.neg, s.whole, s.overflow, s.value = sNumber, 0, false, true, false, 0
		s.numByte(b)
	case b == 't' || b == 'f' || b == 'n':
		if s.target {
			s.notCount("is not a number")
			return
		}
		s.state, s.litPos = sLiteral, 1
		switch b {
		case 't':
			s.lit = "true"
		case 'f':
			s.lit = "false"
		default:
			s.lit = "null"
		}
	default:
		s.fail(errNotJSON)
	}
}

// pop closes the innermost container.
func (s *jsonScan) pop() {
	s.stack = s.stack[:len(s.stack)-1]
	s.after()
}

// after follows a value: the document ends with its outermost.
func (s *jsonScan) after() {
	s.state = sAfter
	if len(s.stack) == 0 {
		s.state = sEnd
	}
}

// startKey starts an object's key, matched against the path's key at
// its values' depth while they may be at the path.
func (s *jsonScan) startKey() {
	s.state, s.inKey = sInKey, true
	s.keyMatch = s.stack[len(s.stack)-1].match
	s.keyPos = 0
}

// keyByte matches the key's next byte.
func (s *jsonScan) keyByte(c byte) {
	if !s.keyMatch {
		return
	}
	want := s.path[len(s.stack)-1]
	if s.keyPos < len(want) && want[s.keyPos] == c {
		s.keyPos++
		return
	}
	s.keyMatch = false
}

// stringByte reads a string's next byte, a key's or a value's.
func (s *jsonScan) stringByte(b byte) {
	switch {
	case s.esc == 1:
		s.esc = 0
		var c byte
		switch b {
		case '"', '\\', '/':
			c = b
		case 'b':
			c = '\b'
		case 'f':
			c = '\f'
		case 'n':
			c = '\n'
		case 'r':
			c = '\r'
		case 't':
			c = '\t'
		case 'u':
			s.esc, s.hex = 2, 0
			return
		default:
			s.fail(errNotJSON)
			return
		}
		if s.inKey {
			s.keyByte(c)
		}
	case s.esc >= 2:
		var d rune
		switch {
		case b >= '0' && b <= '9':
			d = rune(b - '0')
		case b >= 'a' && b <= 'f':
			d = rune(b-'a') + 10
		case b >= 'A' && b <= 'F':
			d = rune(b-'A') + 10
		default:
			s.fail(errNotJSON)
			return
		}
		s.hex = s.hex<<4 | d
		if s.esc++; s.esc < 6 {
			return
		}
		s.esc = 0
		if !s.inKey {
			return
		}
		if utf8.ValidRune(s.hex) { // not half of a surrogate pair: those match no path (newUsed)
			var buf [utf8.UTFMax]byte
			for _, c := range buf[:utf8.EncodeRune(buf[:], s.hex)] {
				s.keyByte(c)
			}
		} else {
			s.keyMatch = false
		}
	case b == '\\':
		s.esc = 1
	case b == '"':
		if s.inKey {
			s.keyHit = s.keyMatch && s.keyPos == len(s.path[len(s.stack)-1])
			s.state = sColon
			return
		}
		s.after()
	case b < 0x20:
		s.fail(errNotJSON)
	case s.inKey:
		s.keyByte(b)
	}
}

// numByte reads b as the number's next byte; false when b is past its
// end (or the number is not JSON: then it failed).
func (s *jsonScan) numByte(b byte) bool {
	digit := b >= '0' && b <= '9'
	switch s.num {
	case 0:
		switch {
		case b == '-':
			s.num, s.neg = nMinus, true
		case b == '0':
			s.num = nZero
		default:
			s.num = nInt
			s.addDigit(b)
		}
		return true
	case nMinus:
		switch {
		case b == '0':
			s.num = nZero
		case digit:
			s.num = nInt
			s.addDigit(b)
		default:
			s.fail(errNotJSON)
		}
		return true
	case nInt, nZero:
		switch {
		case digit && s.num == nInt:
			s.addDigit(b)
		case digit: // a leading 0
			s.fail(errNotJSON)
		case b == '.':
			s.num, s.whole = nDot, false
		case b == 'e' || b == 'E':
			s.num, s.whole = nE, false
		default:
			return false
		}
		return true
	case nDot, nFrac:
		switch {
		case digit:
			s.num = nFrac
		case s.num == nDot:
			s.fail(errNotJSON)
		case b == 'e' || b == 'E':
			s.num = nE
		default:
			return false
		}
		return true
	case nE:
		switch {
		case b == '+' || b == '-':
			s.num = nESign
		case digit:
			s.num = nExp
		default:
			s.fail(errNotJSON)
		}
		return true
	case nESign, nExp:
		switch {
		case digit:
			s.num = nExp
		case s.num == nESign:
			s.fail(errNotJSON)
		default:
			return false
		}
		return true
	}
	return false
}

func (s *jsonScan) addDigit(b byte) {
	if !s.target {
		return
	}
	d := int64(b - '0')
	if s.value > (math.MaxInt64-d)/10 {
		s.overflow = true
		return
	}
	s.value = s.value*10 + d
}

// endNumber ends a number: at the path, the count is read.
func (s *jsonScan) endNumber() {
	if s.num == nMinus || s.num == nDot || s.num == nE || s.num == nESign {
		s.fail(errNotJSON)
		return
	}
	if s.target {
		switch {
		case !s.whole:
			s.notCount("is not a whole number")
		case s.neg && s.value != 0:
			s.notCount("is negative")
		case s.overflow:
			s.notCount("is more units than an int64 holds")
		default:
			s.done, s.found, s.units = true, true, s.value
		}
		return
	}
	s.after()
}

// finish ends the document: the units at the path (found), an error
// when the value there is not a count or the document is not JSON.
func (s *jsonScan) finish() (units int64, found bool, err error) {
	if !s.done && s.state == sNumber {
		s.endNumber()
	}
	switch {
	case s.found || s.err != nil:
		return s.units, s.found, s.err
	case s.state != sEnd:
		return 0, false, errors.New("the JSON ends early")
	}
	return 0, false, fmt.Errorf("no %s in the JSON", s.pathText())
}
