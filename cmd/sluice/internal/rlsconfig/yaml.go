package rlsconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
)

// The YAML of one file, read into plain values with each field's line, before
// any of envoy's rules about domains, keys and units are applied (build.go).

type yamlFile struct {
	domain     string
	domainLine int
	line       int
	descs      []*yamlDesc
}

type yamlDesc struct {
	line           int
	key, value     string
	rateLimit      *yamlRateLimit
	descs          []*yamlDesc
	shadowMode     bool
	quotaMode      bool
	detailedMetric bool
	valueToMetric  bool
	shareThreshold bool
	metadata       map[string]any
	concurrency    *yamlConcurrency // sluice's extension
}

// yamlConcurrency is a descriptor's concurrency (sluice's extension).
type yamlConcurrency struct {
	line          int
	max, headroom int64
	hasMax        bool
	hasHeadroom   bool
	// reserveLine is the line of headroom's deprecated name, reserve (0
	// when not used).
	reserveLine  int
	lifetime     string
	lifetimeLine int
	name         string
}

type yamlRateLimit struct {
	line            int
	requestsPerUnit uint32
	unit            string
	unlimited       bool
	name            string
	replaces        []yamlReplace
	// sluice's extensions
	algorithm    string
	hasAlgorithm bool
	burst        int64
	hasBurst     bool
	period       string
	periodLine   int
	debt         int64
	hasDebt      bool
	charge       bool
	hasCharge    bool
}

type yamlReplace struct {
	line int
	name string
}

// The names envoyproxy/ratelimit knows, each valid where it belongs; envoy
// accepts any of them anywhere and ignores the misplaced ones, sluice refuses
// those.
var (
	envoyKeys = map[string]bool{
		"domain": true, "key": true, "value": true, "descriptors": true, "rate_limit": true,
		"unit": true, "requests_per_unit": true, "unlimited": true, "shadow_mode": true,
		"quota_mode": true, "name": true, "replaces": true, "detailed_metric": true,
		"value_to_metric": true, "share_threshold": true, "metadata": true,
	}
	rootKeys = map[string]bool{"domain": true, "descriptors": true}
	descKeys = map[string]bool{
		"key": true, "value": true, "rate_limit": true, "descriptors": true, "shadow_mode": true,
		"quota_mode": true, "detailed_metric": true, "value_to_metric": true,
		"share_threshold": true, "metadata": true, "concurrency": true,
	}
	concurrencyKeys = map[string]bool{"max": true, "lifetime": true, "headroom": true, "reserve": true, "name": true}
	rateLimitKeys   = map[string]bool{
		"requests_per_unit": true, "unit": true, "unlimited": true, "name": true, "replaces": true,
		"algorithm": true, "burst": true, "period": true, "debt": true, "charge": true,
	}
	replaceKeys = map[string]bool{"name": true}
)

// maxNodes bounds the YAML nodes one file may expand to, aliases counted
// at each use, so an alias bomb is an error, not an exhausted machine.
const maxNodes = 1 << 20

// tooManyNodesError is the *Error of a file of more than maxNodes nodes,
// found at line.
func tooManyNodesError(file string, line int) *Error {
	return &Error{File: file, Line: line, Msg: fmt.Sprintf("error loading config file: the file expands to more than %d YAML nodes (aliases count at each use)", maxNodes)}
}

// counts are what the readers of a configuration's files counted, all
// files together, an alias's at each use.
type counts struct {
	rules int64 // rate_limits
	concs int64 // concurrency limits
}

// overRules is the *Error of a configuration of more rules (concs: more
// concurrency limits) than caps allow, found at file:line.
func overRules(caps *limits.Table, file string, line int, path string, concs bool) *Error {
	what := fmt.Sprintf("more than %d rules (rate_limits, an alias's counted at each use)", caps.Rules)
	if concs {
		what = fmt.Sprintf("more than %d concurrency limits (an alias's counted at each use)", caps.Rules)
	}
	e := caps.Over(limits.Rules, what)
	return &Error{File: file, Line: line, Path: path, Msg: e.Error(), Err: e}
}

// overDepth is the *Error of descriptors or metadata (what) nested deeper
// than caps allow, found at file:line.
func overDepth(caps *limits.Table, file string, line int, what string) *Error {
	e := caps.Over(limits.Depth, fmt.Sprintf("%s nested more than %d deep", what, caps.Depth))
	return &Error{File: file, Line: line, Msg: e.Error(), Err: e}
}

// reader walks one file's YAML tree.
type reader struct {
	file  string
	caps  *limits.Table
	read  *counts // the configuration's, this file's added as they are read
	nodes int
}

// readYAML reads one file, adding its rules to read. A YAML syntax error,
// an unknown or misplaced key, a key that is not a string, a value of the
// wrong kind or more than caps allow is an *Error.
func readYAML(caps *limits.Table, read *counts, file string, data []byte) (out *yamlFile, err error) {
	r := &reader{file: file, caps: caps, read: read}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := safeDecode(dec, &doc); err != nil {
		if errors.Is(err, io.EOF) {
			return &yamlFile{line: 1}, nil // an empty file: no domain
		}
		return nil, r.errf(0, "error loading config file: %s", err)
	}
	var extra yaml.Node
	if err := safeDecode(dec, &extra); err == nil {
		return nil, r.errf(extra.Line, "error loading config file: more than one YAML document (envoyproxy/ratelimit would read only the first)")
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return &yamlFile{line: 1}, nil
		}
		root = root.Content[0]
	}
	return r.root(root)
}

// safeDecode turns a panic of the YAML library into an error: no input may
// crash the service.
func safeDecode(dec *yaml.Decoder, n *yaml.Node) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("yaml: %v", p)
		}
	}()
	return dec.Decode(n)
}

func (r *reader) errf(line int, format string, args ...any) *Error {
	return &Error{File: r.file, Line: line, Msg: fmt.Sprintf(format, args...)}
}

// deref follows aliases and counts the node against the file's budget.
func (r *reader) deref(n *yaml.Node) (*yaml.Node, error) {
	for i := 0; n != nil && n.Kind == yaml.AliasNode; i++ {
		if i > 100 {
			return nil, r.errf(n.Line, "error loading config file: alias chain too long")
		}
		n = n.Alias
	}
	if n == nil {
		return nil, r.errf(0, "error loading config file: alias to nothing")
	}
	r.nodes++
	if r.nodes > maxNodes {
		return nil, tooManyNodesError(r.file, n.Line)
	}
	return n, nil
}

type pair struct {
	key   string
	line  int
	value *yaml.Node
}

// fields returns a mapping's pairs, merge keys (<<) expanded, checking every
// key against allowed (the keys valid here).
func (r *reader) fields(n *yaml.Node, where string, allowed map[string]bool) ([]pair, error) {
	var out []pair
	seen := map[string]bool{}
	if err := r.collect(n, where, allowed, &out, seen, false, 0); err != nil {
		return nil, err
	}
	return out, nil
}

func (r *reader) collect(n *yaml.Node, where string, allowed map[string]bool, out *[]pair, seen map[string]bool, merged bool, depth int) error {
	if depth > 16 {
		return r.errf(n.Line, "error loading config file: merge keys nested too deep")
	}
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, err := r.deref(n.Content[i])
		if err != nil {
			return err
		}
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			merges = append(merges, n.Content[i+1])
			continue
		}
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			return r.errf(k.Line, "config error, key is not of type string: %s", describe(k))
		}
		name := k.Value
		if !allowed[name] {
			if envoyKeys[name] {
				return r.errf(k.Line, "config error, key '%s' does not belong in %s (envoyproxy/ratelimit ignores it there; sluice refuses it)", name, where)
			}
			return r.errf(k.Line, "config error, unknown key '%s'", name)
		}
		if seen[name] {
			if merged {
				continue // an explicit key wins over a merged one
			}
			return r.errf(k.Line, "error loading config file: key '%s' appears twice in %s", name, where)
		}
		seen[name] = true
		*out = append(*out, pair{key: name, line: k.Line, value: n.Content[i+1]})
	}
	for _, m := range merges {
		m, err := r.deref(m)
		if err != nil {
			return err
		}
		switch m.Kind {
		case yaml.MappingNode:
			if err := r.collect(m, where, allowed, out, seen, true, depth+1); err != nil {
				return err
			}
		case yaml.SequenceNode:
			for _, e := range m.Content {
				e, err := r.deref(e)
				if err != nil {
					return err
				}
				if e.Kind != yaml.MappingNode {
					return r.errf(e.Line, "error loading config file: a merge key (<<) takes a map or a list of maps")
				}
				if err := r.collect(e, where, allowed, out, seen, true, depth+1); err != nil {
					return err
				}
			}
		default:
			return r.errf(m.Line, "error loading config file: a merge key (<<) takes a map or a list of maps")
		}
	}
	return nil
}

// describe shows a node in an error message.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.ScalarNode:
		return n.Value
	case yaml.MappingNode:
		return "a map"
	case yaml.SequenceNode:
		return "a list"
	}
	return "an empty node"
}

func (r *reader) root(n *yaml.Node) (*yamlFile, error) {
	n, err := r.deref(n)
	if err != nil {
		return nil, err
	}
	f := &yamlFile{line: n.Line}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return f, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, r.errf(n.Line, "error loading config file: the file must be a map with domain and descriptors, not %s", kindName(n))
	}
	fs, err := r.fields(n, "the file's top level", rootKeys)
	if err != nil {
		return nil, err
	}
	for _, p := range fs {
		switch p.key {
		case "domain":
			f.domainLine = p.line
			if f.domain, err = r.str(p); err != nil {
				return nil, err
			}
		case "descriptors":
			if f.descs, err = r.descs(p, 0); err != nil {
				return nil, err
			}
		}
	}
	return f, nil
}

// list returns the maps of a list field; null is the empty list.
func (r *reader) list(p pair) ([]*yaml.Node, error) {
	n, null, err := r.value(p)
	if err != nil || null {
		return nil, err
	}
	if n.Kind != yaml.SequenceNode {
		return nil, r.errf(n.Line, "error loading config file: %s must be a list of maps, not %s", p.key, kindName(n))
	}
	out := make([]*yaml.Node, 0, len(n.Content))
	for _, e := range n.Content {
		e, err := r.deref(e)
		if err != nil {
			return nil, err
		}
		if e.Kind != yaml.MappingNode {
			return nil, r.errf(e.Line, "config error, yaml file contains list of type other than map: %s", describe(e))
		}
		out = append(out, e)
	}
	return out, nil
}

func (r *reader) descs(p pair, depth int) ([]*yamlDesc, error) {
	if int64(depth) >= r.caps.Depth {
		return nil, overDepth(r.caps, r.file, p.line, "descriptors")
	}
	ns, err := r.list(p)
	if err != nil {
		return nil, err
	}
	out := make([]*yamlDesc, 0, len(ns))
	for _, n := range ns {
		d, err := r.desc(n, depth)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

func (r *reader) desc(n *yaml.Node, depth int) (*yamlDesc, error) {
	fs, err := r.fields(n, "a descriptor", descKeys)
	if err != nil {
		return nil, err
	}
	d := &yamlDesc{line: n.Line}
	flags := map[string]*bool{
		"shadow_mode":     &d.shadowMode,
		"quota_mode":      &d.quotaMode,
		"detailed_metric": &d.detailedMetric,
		"value_to_metric": &d.valueToMetric,
		"share_threshold": &d.shareThreshold,
	}
	for _, p := range fs {
		switch p.key {
		case "key":
			d.key, err = r.str(p)
		case "value":
			d.value, err = r.str(p)
		case "rate_limit":
			if d.rateLimit, err = r.rateLimit(p); err == nil && d.rateLimit != nil {
				// Counted as read, so that a file of too many stops
				// before it is all expanded.
				if r.read.rules++; r.read.rules > r.caps.Rules {
					err = overRules(r.caps, r.file, p.line, "", false)
				}
			}
		case "concurrency":
			if d.concurrency, err = r.concurrency(p); err == nil && d.concurrency != nil {
				if r.read.concs++; r.read.concs > r.caps.Rules {
					err = overRules(r.caps, r.file, p.line, "", true)
				}
			}
		case "descriptors":
			d.descs, err = r.descs(p, depth+1)
		case "metadata":
			d.metadata, err = r.metadata(p)
		default:
			*flags[p.key], err = r.boolean(p)
		}
		if err != nil {
			return nil, err
		}
	}
	return d, nil
}

func (r *reader) rateLimit(p pair) (*yamlRateLimit, error) {
	n, null, err := r.value(p)
	if err != nil || null {
		return nil, err // "rate_limit:" alone: no limit, as envoy reads it
	}
	if n.Kind != yaml.MappingNode {
		return nil, r.errf(n.Line, "error loading config file: rate_limit must be a map, not %s", kindName(n))
	}
	fs, err := r.fields(n, "a rate_limit", rateLimitKeys)
	if err != nil {
		return nil, err
	}
	rl := &yamlRateLimit{line: n.Line}
	texts := map[string]*string{"unit": &rl.unit, "name": &rl.name, "algorithm": &rl.algorithm, "period": &rl.period}
	for _, p := range fs {
		switch p.key {
		case "requests_per_unit":
			var v int64
			v, err = r.integer(p, 0, 1<<32-1)
			rl.requestsPerUnit = uint32(v)
		case "unlimited":
			rl.unlimited, err = r.boolean(p)
		case "replaces":
			rl.replaces, err = r.replaces(p)
		case "burst":
			rl.hasBurst = true
			rl.burst, err = r.integer(p, 0, 1<<62)
		case "debt":
			rl.hasDebt = true
			rl.debt, err = r.integer(p, 0, 1<<62)
		case "charge":
			rl.hasCharge = true
			rl.charge, err = r.boolean(p)
		default:
			rl.hasAlgorithm = rl.hasAlgorithm || p.key == "algorithm"
			if p.key == "period" {
				rl.periodLine = p.line
			}
			*texts[p.key], err = r.str(p)
		}
		if err != nil {
			return nil, err
		}
	}
	return rl, nil
}

// concurrency reads a descriptor's concurrency; null is none, as a null
// rate_limit is.
func (r *reader) concurrency(p pair) (*yamlConcurrency, error) {
	n, null, err := r.value(p)
	if err != nil || null {
		return nil, err
	}
	if n.Kind != yaml.MappingNode {
		return nil, r.errf(n.Line, "error loading config file: concurrency must be a map, not %s", kindName(n))
	}
	fs, err := r.fields(n, "a concurrency", concurrencyKeys)
	if err != nil {
		return nil, err
	}
	c := &yamlConcurrency{line: n.Line}
	for _, p := range fs {
		switch p.key {
		case "max":
			c.hasMax = true
			c.max, err = r.integer(p, 1, MaxConcurrency)
		case "headroom", "reserve": // reserve: headroom's deprecated name
			if c.hasHeadroom {
				return nil, r.errf(p.line, "error loading config file: concurrency has both headroom and reserve (its deprecated name): keep headroom")
			}
			if p.key == "reserve" {
				c.reserveLine = p.line
			}
			c.hasHeadroom = true
			c.headroom, err = r.integer(p, 0, MaxConcurrency-1)
		case "lifetime":
			c.lifetimeLine = p.line
			c.lifetime, err = r.str(p)
		case "name":
			c.name, err = r.str(p)
		}
		if err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (r *reader) replaces(p pair) ([]yamlReplace, error) {
	ns, err := r.list(p)
	if err != nil {
		return nil, err
	}
	out := make([]yamlReplace, 0, len(ns))
	for _, n := range ns {
		fs, err := r.fields(n, "a replaces entry", replaceKeys)
		if err != nil {
			return nil, err
		}
		rp := yamlReplace{line: n.Line}
		for _, p := range fs {
			if rp.name, err = r.str(p); err != nil {
				return nil, err
			}
		}
		out = append(out, rp)
	}
	return out, nil
}

// metadata reads a descriptor's metadata, a map of any YAML, into the values
// envoyproxy/ratelimit hands back to Envoy (its yaml.v2 decoding, then
// google.protobuf.Struct): see Rule.Metadata. A metadata that is not a map
// is a load error, as in envoy; null or an empty map is none.
func (r *reader) metadata(p pair) (map[string]any, error) {
	n, null, err := r.value(p)
	if err != nil || null {
		return nil, err
	}
	if n.Kind != yaml.MappingNode {
		return nil, r.errf(n.Line, "error loading config file: metadata must be a map, not %s", kindName(n))
	}
	m := map[string]any{}
	if err := r.metaMap(n, m, true, 0); err != nil {
		return nil, err
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}

// metaMap adds a mapping's pairs to m in order, a later key replacing an
// earlier one, merge keys (<<) adding the merged maps' pairs where they
// stand, as yaml.v2 decodes into a map. top: the metadata's own keys, read
// as text as yaml.v2 reads a map[string]any's keys; deeper keys are the
// text of their decoded value (1.0 is "1").
func (r *reader) metaMap(n *yaml.Node, m map[string]any, top bool, depth int) error {
	if int64(depth) > r.caps.Depth {
		return overDepth(r.caps, r.file, n.Line, "metadata")
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, err := r.deref(n.Content[i])
		if err != nil {
			return err
		}
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			if err := r.metaMerge(n.Content[i+1], m, top, depth+1); err != nil {
				return err
			}
			continue
		}
		if k.Kind != yaml.ScalarNode {
			return r.errf(k.Line, "error loading config file: metadata: a key must be a scalar, not %s", kindName(k))
		}
		if !utf8.ValidString(k.Value) {
			return r.errf(k.Line, "error loading config file: metadata: a key is not valid UTF-8")
		}
		key := k.Value
		if !top {
			key = metaKey(k)
		}
		v, err := r.metaValue(n.Content[i+1], depth+1)
		if err != nil {
			return err
		}
		m[key] = v
	}
	return nil
}

// metaMerge adds the pairs of a merge key's map, or of each map of its list.
func (r *reader) metaMerge(v *yaml.Node, m map[string]any, top bool, depth int) error {
	v, err := r.deref(v)
	if err != nil {
		return err
	}
	switch v.Kind {
	case yaml.MappingNode:
		return r.metaMap(v, m, top, depth)
	case yaml.SequenceNode:
		for _, c := range v.Content {
			c, err := r.deref(c)
			if err != nil {
				return err
			}
			if c.Kind != yaml.MappingNode {
				return r.errf(c.Line, "error loading config file: metadata: map merge requires map or sequence of maps as the value")
			}
			if err := r.metaMap(c, m, top, depth); err != nil {
				return err
			}
		}
		return nil
	}
	return r.errf(v.Line, "error loading config file: metadata: map merge requires map or sequence of maps as the value")
}

// metaValue is one metadata value: a map[string]any, a []any, a string, a
// float64 (every number, as google.protobuf.Value holds them), a bool or
// nil.
func (r *reader) metaValue(n *yaml.Node, depth int) (any, error) {
	n, err := r.deref(n)
	if err != nil {
		return nil, err
	}
	switch n.Kind {
	case yaml.MappingNode:
		m := map[string]any{}
		return m, r.metaMap(n, m, false, depth)
	case yaml.SequenceNode:
		if int64(depth) > r.caps.Depth {
			return nil, overDepth(r.caps, r.file, n.Line, "metadata")
		}
		l := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := r.metaValue(c, depth+1)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
		}
		return l, nil
	}
	if !utf8.ValidString(n.Value) {
		return nil, r.errf(n.Line, "error loading config file: metadata: a value is not valid UTF-8")
	}
	return metaScalar(n), nil
}

// yaml11Bools are the plain scalars yaml.v2 (YAML 1.1) reads as booleans,
// which YAML 1.2 reads as strings.
var yaml11Bools = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true, "on": true, "On": true, "ON": true,
	"n": false, "N": false, "no": false, "No": false, "NO": false, "off": false, "Off": false, "OFF": false,
}

// metaScalar reads a scalar as yaml.v2 decodes one into an interface{}
// (timestamps stay text), numbers as float64.
func metaScalar(n *yaml.Node) any {
	switch n.Tag {
	case "!!null":
		return nil
	case "!!bool":
		var b bool
		if n.Decode(&b) == nil {
			return b
		}
	case "!!int":
		var i int64
		if n.Decode(&i) == nil {
			return float64(i)
		}
		var u uint64
		if n.Decode(&u) == nil {
			return float64(u)
		}
		var f float64
		if n.Decode(&f) == nil {
			return f
		}
	case "!!float":
		var f float64
		if n.Decode(&f) == nil {
			return f
		}
	case "!!str":
		if b, ok := yaml11Bools[n.Value]; ok && n.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) == 0 {
			return b
		}
	}
	return n.Value
}

// metaKey is a nested map's key as envoy names it: the text of its decoded
// value (fmt's %v).
func metaKey(k *yaml.Node) string {
	switch v := metaScalar(k).(type) {
	case nil:
		return "<nil>"
	case bool:
		return strconv.FormatBool(v)
	case float64:
		if k.Tag == "!!int" && v == math.Trunc(v) && math.Abs(v) < 1<<63 {
			return strconv.FormatInt(int64(v), 10)
		}
		return strconv.FormatFloat(v, 'g', -1, 64)
	case string:
		return v
	}
	return k.Value
}

// value returns a field's node, aliases followed, and whether it is null.
func (r *reader) value(p pair) (*yaml.Node, bool, error) {
	n, err := r.deref(p.value)
	if err != nil {
		return nil, false, err
	}
	return n, n.Kind == yaml.ScalarNode && n.Tag == "!!null", nil
}

// str reads a scalar as text, as yaml.v2 reads one into a Go string: 8080
// is "8080", null is "".
func (r *reader) str(p pair) (string, error) {
	n, null, err := r.value(p)
	if err != nil || null {
		return "", err
	}
	if n.Kind != yaml.ScalarNode {
		return "", r.errf(n.Line, "error loading config file: %s must be a string, not %s", p.key, kindName(n))
	}
	return n.Value, nil
}

// boolean reads true or false (and YAML 1.1's yes, no, on, off, as envoy's
// yaml.v2 does); null is false.
func (r *reader) boolean(p pair) (bool, error) {
	n, null, err := r.value(p)
	if err != nil || null {
		return false, err
	}
	var b bool
	if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
		return false, r.errf(n.Line, "error loading config file: %s must be true or false, not %s", p.key, describe(n))
	}
	return b, nil
}

// integer reads a whole number from lo to hi; null is 0.
func (r *reader) integer(p pair, lo, hi int64) (int64, error) {
	n, null, err := r.value(p)
	if err != nil || null {
		return 0, err
	}
	var v int64
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil || v < lo || v > hi {
		return 0, r.errf(n.Line, "error loading config file: %s must be a whole number from %d to %s, not %s", p.key, lo, strconv.FormatInt(hi, 10), describe(n))
	}
	return v, nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a map"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "empty"
}
