package rlsconfig

import (
	"bytes"
	"fmt"

	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
)

// The YAML library builds a file's whole node tree before it can be read,
// some 200 bytes a node: "[[[[…" or "[1,1,1,…" is a node every byte or
// two. scanYAML reads the text first, as a lexer does, and refuses what
// is over a cap before the tree is built: flow collections ([…], {…})
// nested deeper than the deepest descriptors and metadata the depth cap
// allows, and more rate_limit keys than the rules cap. Block nesting costs
// its indentation in bytes, so config-bytes bounds it; what aliases add
// is counted as the tree is read (reader). It also counts the nodes the
// text holds, scalars and flow collections, against the reader's budget
// (maxNodes), so that a file over it is refused before its tree is built.
//
// The pass knows quoted scalars, plain scalars, comments and block
// scalars, not all of YAML: where it misreads a file it counts too few,
// and the tree is then built and read as before. It counts more than the
// reader only where the reader skips what the text holds: a rate_limit
// key in metadata, or one a map's own key overrides in a merge (<<), and
// each line of a plain scalar written over several as a node.
// FuzzScanYAML checks that it refuses nothing the reader accepts.

// flowRoom is how deep flow collections may nest in a file whose
// descriptors and metadata nest at most depth: the file's map, a list and
// a map each level of descriptors, then a metadata map and its depth.
func flowRoom(depth int64) int {
	return int(min(depth, 1<<20))*3 + 8
}

// scanYAML checks file's text against caps' depth and rules, counting its
// rate_limits into rules (the configuration's so far).
func scanYAML(caps *limits.Table, file string, data []byte, rules *int) error {
	s := scanner{data: data, line: 1, maxFlow: flowRoom(caps.Depth), maxRules: int(min(caps.Rules, 1<<40)), rules: *rules}
	switch s.run() {
	case tooDeep:
		e := caps.Over(limits.Depth, fmt.Sprintf("maps and lists nested more than %d deep, more than descriptors and metadata nested %d deep take", s.maxFlow, caps.Depth))
		return &Error{File: file, Line: s.line, Msg: e.Error(), Err: e}
	case tooManyRules:
		return overRules(caps, file, s.line, "", false)
	case tooManyNodes:
		return tooManyNodesError(file, s.line)
	}
	*rules = s.rules
	return nil
}

type scanEnd int

const (
	scanned scanEnd = iota
	tooDeep
	tooManyRules
	tooManyNodes
)

// scanner is scanYAML's pass over one file.
type scanner struct {
	data      []byte
	i         int
	line      int
	lineStart int // data's index where the line starts
	indent    int // the line's indentation
	flow      int // flow collections open
	maxFlow   int
	rules     int
	maxRules  int
	nodes     int // scalars and flow collections: at most the tree's nodes
	// node: the next token starts a node (at a line's start, after an
	// indicator). The last token was a scalar (scalar), at column
	// scalarCol, quoted, the text "rate_limit" (key). keyColOnLine is the
	// column of the line's last key, -1 when none.
	node, scalar, quoted, key bool
	scalarCol, keyColOnLine   int
}

func (s *scanner) run() scanEnd {
	s.startLine(0)
	for s.i < len(s.data) {
		c := s.data[s.i]
		switch {
		case c == '\n':
			s.i++
			s.line++
			s.startLine(s.i)
		case c == ' ' || c == '\t' || c == '\r':
			s.i++
		case c == '#':
			s.toEOL()
		case c == '[' || c == '{':
			s.i++
			s.flow++
			s.nodes++
			s.token(true)
			if s.flow > s.maxFlow {
				return tooDeep
			}
		case c == ']' || c == '}':
			s.i++
			s.flow = max(s.flow-1, 0)
			s.token(false)
		case c == ',' && s.flow > 0:
			s.i++
			s.token(true)
		case c == ':' && (s.quoted || s.indicator(s.i+1)):
			s.i++
			if s.scalar {
				s.keyColOnLine = s.scalarCol
			}
			if s.key && s.valued() {
				if s.rules++; s.rules > s.maxRules {
					return tooManyRules
				}
			}
			s.token(true)
		case (c == '-' || c == '?') && s.indicator(s.i+1):
			s.i++
			s.token(true)
		case c == '\'' || c == '"':
			s.quotedScalar(c)
		case (c == '|' || c == '>') && s.flow == 0 && s.node:
			s.blockScalar()
		case c == '&' || c == '!':
			s.word() // an anchor or a tag: the node follows
		case c == '*':
			s.word()
			s.nodes++
			s.token(false)
		default:
			s.plainScalar()
		}
		if s.nodes > maxNodes {
			return tooManyNodes
		}
	}
	return scanned
}

// startLine starts the line at i: its indentation is skipped, a
// directive's line or a document marker too.
func (s *scanner) startLine(i int) {
	s.lineStart = i
	for i < len(s.data) && s.data[i] == ' ' {
		i++
	}
	s.i, s.indent = i, i-s.lineStart
	s.token(true)
	s.keyColOnLine = -1
	if s.indent == 0 && s.flow == 0 {
		rest := s.data[i:]
		if bytes.HasPrefix(rest, []byte("%")) {
			s.toEOL()
		} else if (bytes.HasPrefix(rest, []byte("---")) || bytes.HasPrefix(rest, []byte("..."))) && s.indicator(i+3) {
			s.i += 3
		}
	}
}

func (s *scanner) col(i int) int { return i - s.lineStart }

// token notes a token that is not a scalar; node: a node may follow.
func (s *scanner) token(node bool) {
	s.node, s.scalar, s.quoted, s.key = node, false, false, false
}

// indicator reports whether a ':', '-' or '?' before i stands alone: a
// space, the line's end or, in a flow collection, one of its indicators
// follows.
func (s *scanner) indicator(i int) bool {
	if i >= len(s.data) {
		return true
	}
	switch s.data[i] {
	case ' ', '\t', '\r', '\n':
		return true
	case ',', '[', ']', '{', '}':
		return s.flow > 0
	}
	return false
}

func (s *scanner) toEOL() {
	if j := bytes.IndexByte(s.data[s.i:], '\n'); j >= 0 {
		s.i += j
	} else {
		s.i = len(s.data)
	}
}

// word skips an anchor, a tag or an alias.
func (s *scanner) word() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\r', '\n':
			return
		case ',', '[', ']', '{', '}':
			if s.flow > 0 {
				return
			}
		}
		s.i++
	}
}

// quotedScalar skips a quoted scalar, lines and all.
func (s *scanner) quotedScalar(q byte) {
	start := s.i + 1
	i := start
	for i < len(s.data) {
		c := s.data[i]
		switch {
		case c == '\n':
			s.line++
		case c == '\\' && q == '"':
			if i+1 < len(s.data) && s.data[i+1] == '\n' {
				s.line++
			}
			i++
		case c == q && q == '\'' && i+1 < len(s.data) && s.data[i+1] == '\'':
			i++
		case c == q:
			s.scalarAt(start, i, true)
			s.i = i + 1
			return
		}
		i++
	}
	s.i = len(s.data) // unterminated: the parser says so
}

// plainScalar skips a plain scalar, up to the end of its line (its next
// lines, if any, are read as lines of their own).
func (s *scanner) plainScalar() {
	start := s.i
	i := start
	for i < len(s.data) {
		c := s.data[i]
		if c == '\n' || (c == ':' && s.indicator(i+1)) || (c == '#' && i > start && (s.data[i-1] == ' ' || s.data[i-1] == '\t')) {
			break
		}
		if s.flow > 0 && (c == ',' || c == '[' || c == ']' || c == '{' || c == '}') {
			break
		}
		i++
	}
	end := i
	for end > start && (s.data[end-1] == ' ' || s.data[end-1] == '\t' || s.data[end-1] == '\r') {
		end--
	}
	s.scalarAt(start, end, false)
	s.i = i
}

// scalarAt notes a scalar, data[start:end] (quoted: within its quotes).
func (s *scanner) scalarAt(start, end int, quoted bool) {
	s.node, s.scalar, s.quoted = false, true, quoted
	s.nodes++
	s.key = string(s.data[start:end]) == "rate_limit"
	s.scalarCol = s.col(start)
	if quoted {
		s.scalarCol--
	}
}

// valued reports whether the key rate_limit whose ':' was just read has a
// value that is not null: a rate_limit, as the reader counts one.
func (s *scanner) valued() bool {
	i := s.i
	for i < len(s.data) && (s.data[i] == ' ' || s.data[i] == '\t' || s.data[i] == '\r') {
		i++
	}
	if i < len(s.data) && s.data[i] != '\n' && s.data[i] != '#' {
		rest := s.data[i:]
		if s.flow > 0 && (rest[0] == ',' || rest[0] == '}' || rest[0] == ']') {
			return false
		}
		for _, null := range []string{"~", "null", "Null", "NULL"} {
			if bytes.HasPrefix(rest, []byte(null)) && s.endsScalar(i+len(null)) {
				return false
			}
		}
		return true
	}
	if s.flow > 0 {
		return true // a value on a later line: counted, as few are
	}
	// The value is on the lines below: a block more indented than the key,
	// or a list as indented; none is null.
	for j := i; j < len(s.data); {
		if s.data[j] != '\n' {
			j++
			continue
		}
		j++
		k := j
		for k < len(s.data) && s.data[k] == ' ' {
			k++
		}
		if k == len(s.data) {
			return false
		}
		switch s.data[k] {
		case '\n', '\r', '#':
			j = k
			continue
		}
		return k-j > s.scalarCol || (k-j == s.scalarCol && s.data[k] == '-' && s.indicator(k+1))
	}
	return false
}

// endsScalar reports whether a plain scalar ends before i.
func (s *scanner) endsScalar(i int) bool {
	if i >= len(s.data) {
		return true
	}
	switch s.data[i] {
	case ' ', '\t', '\r', '\n', '#':
		return true
	case ',', ']', '}':
		return s.flow > 0
	}
	return false
}

// blockScalar skips a literal or folded scalar: its header, then the
// lines more indented than the key (or the line) it is the value of, and
// blank lines.
func (s *scanner) blockScalar() {
	parent := s.indent
	if s.keyColOnLine >= 0 {
		parent = s.keyColOnLine
	}
	s.toEOL()
	for s.i < len(s.data) {
		j := s.i + 1 // after the '\n'
		k := j
		for k < len(s.data) && s.data[k] == ' ' {
			k++
		}
		blank := k == len(s.data) || s.data[k] == '\n' || s.data[k] == '\r'
		if !blank && k-j <= parent {
			return // the '\n' ends the scalar's last line
		}
		s.line++
		s.i = j
		s.toEOL()
	}
}
