package rlsconfig

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
	"github.com/sluice-go/sluice/internal/algo"
)

// Entry is one entry of a request's descriptor: a key and the value sent
// with it (possibly empty).
type Entry struct{ Key, Value string }

// Rule is one configured rate_limit (or one request's limit override): what
// sluice enforces for the descriptors that resolve to it. A Rule is shared by
// every request that matches it and must not be modified.
type Rule struct {
	// Domain is the domain of the file that configured the rule.
	Domain string
	// Path is the descriptor path as configured, entries joined by "/",
	// a key alone or key=value: "source_cluster=proxy/destination_cluster".
	// For display and for metric labels.
	Path string
	// Name is the rate_limit's name, "" when not set.
	Name string
	// Limit is what sluice enforces; zero when Unlimited. Its Rate is 0 (and
	// the Limit not valid for a store) when requests_per_unit is 0, which
	// envoy reads as "every hit is over the limit": the caller refuses such
	// a descriptor without asking the store.
	Limit sluice.Limit
	// Unit is the envoy unit as configured, lower case ("second" … "year");
	// "" when the sluice extension period: was used, or when Unlimited.
	Unit string
	// RequestsPerUnit is requests_per_unit as configured.
	RequestsPerUnit int64
	// Unlimited: the descriptor is allowed without counting (envoy answers
	// OK with no current limit).
	Unlimited bool
	// Shadow: shadow_mode; an over-limit decision is reported (metrics,
	// logs) but the answer is OK.
	Shadow bool
	// DetailedMetric: detailed_metric; metrics may name the values sent.
	DetailedMetric bool
	// ShareThreshold: share_threshold is set on this rule's descriptor or on
	// one above it, so values matching that wildcard share one counter (see
	// Key).
	ShareThreshold bool
	// QuotaMode and ValueToMetric are envoy's quota_mode and
	// value_to_metric, kept for the caller's metrics and answers.
	QuotaMode, ValueToMetric bool
	// Charge: the rate_limit's charge (sluice's extension): a call's hits
	// are charged whatever the answer (sluice.Limiter.Charge), leaving the
	// key in debt up to Limit.Debt, rather than taken only when they fit;
	// the descriptor is over the limit when they did not fit.
	Charge bool
	// Metadata is the metadata of the rule's descriptor, nil when none:
	// envoy's arbitrary map, which it hands back to Envoy as dynamic
	// metadata. Its values are what google.protobuf.Value holds, as
	// envoyproxy/ratelimit reads them: map[string]any, []any, string,
	// float64 (every number), bool and nil. Shared by every caller: not to
	// be modified.
	Metadata map[string]any
	// Replaces lists the names of the rules this one replaces (envoy's
	// replaces: a rule named here does not apply to a request this rule
	// matches).
	Replaces []string

	// levels describes the configured descriptors on the rule's path, from
	// the top (nil for an override).
	levels []level
}

// level is one configured descriptor on a rule's path.
type level struct {
	composite     string   // envoy's composite key, "key" or "key_value"
	hasValue      bool     // configured with a value
	wildcard      bool     // the composite holds a '*'
	parts         [][]byte // the composite split on '*', when wildcard
	share         bool     // share_threshold: matching values share a counter
	valueToMetric bool
}

// Config is a loaded configuration: every domain's descriptor tree. It is
// immutable and safe for concurrent use; a reload builds a new Config.
type Config struct {
	domains map[string]*node
	rules   []*Rule
	concs   []*Concurrency
	sources []string
	// deprecations are the messages of Deprecations.
	deprecations []string
}

// node is one configured descriptor, or a domain's root.
type node struct {
	// children maps envoy's composite key of each child ("key" or
	// "key_value") to it.
	children map[string]*node
	// wild lists the children whose composite key holds a '*', in file
	// order: envoy tries them in that order and takes the first that
	// matches.
	wild []wildcard
	rule *Rule
	conc *Concurrency // sluice's extension, nil when none
}

type wildcard struct {
	key   string   // composite key, "path_/api/*"
	parts [][]byte // key split on '*'
}

// Error is a configuration that cannot be loaded: the file, the line (0 when
// not known), the descriptor (envoy's composite path, "domain.key1_value1.key2",
// "" for the file as a whole) and envoy's message for it where envoy has one.
// A configuration over one of Options.Limits' caps is an Error whose Err is
// the *limits.Exceeded (errors.As finds it) and whose Msg is its text.
type Error struct {
	File string
	Line int
	Path string
	Msg  string
	Err  error
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// Error returns "file:line: descriptor path: message", without "file:"
// when File is "" (the files together) and without what else is not
// known.
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	}
	if e.Path != "" {
		fmt.Fprintf(&b, "descriptor %s: ", e.Path)
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Options are how files are loaded; the zero value is envoy's default.
type Options struct {
	// MergeDomains merges files that configure the same domain, as envoy's
	// MERGE_DOMAIN_CONFIG does: the later file's descriptors join the
	// domain's, and a top-level descriptor both configure is an error
	// ("duplicate descriptor composite key"). Without it, two files with one
	// domain are an error.
	MergeDomains bool
	// Limits caps what a configuration may hold (package limits): its
	// bytes (ConfigBytes, the files together or an xDS response's
	// resources), its rules (Rules, rate_limits and concurrency limits each,
	// an alias's counted at each use) and how deep its descriptors and
	// metadata nest (Depth). A cap left 0 is its default. Each is checked
	// while the configuration is read, before what is over it is built.
	Limits limits.Table
}

// caps is o.Limits with its defaults.
func (o Options) caps() *limits.Table {
	t := o.Limits
	t.FillDefaults()
	return &t
}

// Load reads a file, or every *.yaml and *.yml file of a directory (not its
// subdirectories, nor files whose name starts with a dot), and returns the
// configuration, or an *Error for the first file that cannot be loaded. A
// directory without such files is an empty configuration.
func Load(path string) (*Config, error) { return Options{}.Load(path) }

// Load is the package's Load with o. The files' sizes are checked against
// o.Limits.ConfigBytes, all of them together, before they are read.
func (o Options) Load(path string) (*Config, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	caps := o.caps()
	left := caps.ConfigBytes
	files := map[string][]byte{}
	if !fi.IsDir() {
		if files[path], err = readCapped(caps, path, path, &left); err != nil {
			return nil, err
		}
		return o.Parse(files)
	}
	des, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	for _, de := range des {
		name := de.Name()
		ext := strings.ToLower(filepath.Ext(name))
		if strings.HasPrefix(name, ".") || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		full := filepath.Join(path, name)
		fi, err := os.Stat(full) // follows symbolic links, as a Kubernetes ConfigMap mounts files
		if err != nil {
			return nil, err
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		if files[full], err = readCapped(caps, path, full, &left); err != nil {
			return nil, err
		}
	}
	return o.Parse(files)
}

// readCapped reads file, one of the configuration at path, whose files
// may hold left bytes more: no more is read, and a file over is an
// *Error naming the cap.
func readCapped(caps *limits.Table, path, file string, left *int64) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size := int64(-1)
	if fi, err := f.Stat(); err == nil {
		size = fi.Size()
	}
	what := "the configuration's files"
	if path == file {
		what = "the file"
	}
	if size > *left {
		return nil, overBytes(caps, file, what, caps.ConfigBytes-*left+size)
	}
	data, err := io.ReadAll(io.LimitReader(f, *left+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > *left {
		return nil, overBytes(caps, file, what, 0) // grew since its size was read
	}
	*left -= int64(len(data))
	return data, nil
}

// overBytes is the *Error of what, got bytes of a configuration (0: not
// all counted), over the cap at file ("" when not one).
func overBytes(caps *limits.Table, file, what string, got int64) error {
	var e error
	if got > 0 {
		e = caps.Check(limits.ConfigBytes, what, got)
	} else {
		e = caps.Over(limits.ConfigBytes, what)
	}
	return &Error{File: file, Msg: e.Error(), Err: e}
}

// Check reports whether the configuration at path (as Load reads it) loads.
func Check(path string) error {
	_, err := Load(path)
	return err
}

// Parse builds the configuration from files, each file's name mapped to its
// contents, in the order of their names (so a duplicate domain is reported on
// the later name).
func Parse(files map[string][]byte) (*Config, error) { return Options{}.Parse(files) }

// Parse is the package's Parse with o: files that merge do so in the order
// of their names, which is also the order of their wildcards. The files
// are checked against o.Limits as they are read: their bytes together,
// then each file's nesting and rules in a pass over its text (scanYAML)
// before its YAML is parsed, then the rules and nesting its aliases add
// as its tree is read.
func (o Options) Parse(files map[string][]byte) (*Config, error) {
	caps := o.caps()
	names := make([]string, 0, len(files))
	var size int64
	for name, data := range files {
		names = append(names, name)
		size += int64(len(data))
	}
	slices.Sort(names)
	if size > caps.ConfigBytes {
		if len(names) == 1 {
			return nil, overBytes(caps, names[0], "the file", size)
		}
		return nil, overBytes(caps, "", "the configuration's files", size)
	}
	rules := 0
	for _, name := range names {
		if err := scanYAML(caps, name, files[name], &rules); err != nil {
			return nil, err
		}
	}
	b := o.builder(caps, names)
	for _, name := range names {
		f, err := readYAML(caps, &b.read, name, files[name])
		if err != nil {
			return nil, err
		}
		if err := b.file(name, f); err != nil {
			return nil, err
		}
	}
	return b.finish(), nil
}

// builder starts the configuration of the files (or resources) names.
func (o Options) builder(caps *limits.Table, names []string) *builder {
	return &builder{c: &Config{domains: map[string]*node{}, sources: names}, first: map[string]string{}, merge: o.MergeDomains, caps: caps}
}

// finish sorts what b built and returns it.
func (b *builder) finish() *Config {
	slices.SortFunc(b.c.rules, func(x, y *Rule) int {
		if c := strings.Compare(x.Domain, y.Domain); c != 0 {
			return c
		}
		return strings.Compare(x.Path, y.Path)
	})
	sortConcurrencies(b.c.concs)
	return b.c
}

// Domains returns the configured domains, sorted.
func (c *Config) Domains() []string {
	out := make([]string, 0, len(c.domains))
	for d := range c.domains {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// HasDomain reports whether domain is configured. envoyproxy/ratelimit
// applies a request's limit override only to a configured domain.
func (c *Config) HasDomain(domain string) bool { return c.domains[domain] != nil }

// Rules returns every configured rule, sorted by domain, then path.
func (c *Config) Rules() []*Rule { return slices.Clone(c.rules) }

// Sources returns the files loaded, sorted.
func (c *Config) Sources() []string { return slices.Clone(c.sources) }

// unitSeconds is envoy's divider for each unit (RateLimitResponse.RateLimit.Unit
// names): a month is 30 days, a year 365.
var unitSeconds = map[string]int64{
	"SECOND": 1,
	"MINUTE": 60,
	"HOUR":   60 * 60,
	"DAY":    24 * 60 * 60,
	"WEEK":   7 * 24 * 60 * 60,
	"MONTH":  30 * 24 * 60 * 60,
	"YEAR":   365 * 24 * 60 * 60,
}

// validUnits says which units there are, after envoy's "invalid rate limit
// unit" (which names none).
const validUnits = "want second, minute, hour, day, week, month or year (or, sluice's extension, period: 90s instead of unit)"

type builder struct {
	c     *Config
	first map[string]string // domain -> the file that configured it
	merge bool              // Options.MergeDomains
	caps  *limits.Table     // Options.Limits, defaults filled
	read  counts            // what the files' readers counted, all files together
}

func (b *builder) file(name string, f *yamlFile) error {
	if f.domain == "" {
		line := f.domainLine
		if line == 0 {
			line = f.line
		}
		return &Error{File: name, Line: line, Msg: "config file cannot have empty domain"}
	}
	if prev, ok := b.first[f.domain]; ok {
		if !b.merge {
			return &Error{File: name, Line: f.domainLine, Msg: fmt.Sprintf("duplicate domain '%s' in config file (first in %s)", f.domain, prev)}
		}
		return b.descs(name, f.domain, b.c.domains[f.domain], f.domain+".", "", nil, nil, f.descs)
	}
	b.first[f.domain] = name
	root := &node{children: map[string]*node{}}
	if err := b.descs(name, f.domain, root, f.domain+".", "", nil, nil, f.descs); err != nil {
		return err
	}
	b.c.domains[f.domain] = root
	return nil
}

// descs loads the descriptors under parent, in the order envoy checks them.
// prefix is the parent's composite path with a trailing dot, path its Rule.Path,
// levels the configured descriptors above, pool the nearest concurrency pool
// above (nil when none).
func (b *builder) descs(file, domain string, parent *node, prefix, path string, levels []level, pool *Concurrency, ds []*yamlDesc) error {
	for _, d := range ds {
		if d.key == "" {
			return &Error{File: file, Line: d.line, Path: strings.TrimSuffix(prefix, "."), Msg: "descriptor has empty key"}
		}
		composite := d.key
		step := d.key
		if d.value != "" {
			composite += "_" + d.value
			step += "=" + d.value
		}
		full := prefix + composite
		if _, dup := parent.children[composite]; dup {
			return &Error{File: file, Line: d.line, Path: full, Msg: fmt.Sprintf("duplicate descriptor composite key '%s'", full)}
		}
		rulePath := step
		if path != "" {
			rulePath = path + "/" + step
		}
		wild := strings.Contains(composite, "*")
		var parts [][]byte
		if wild {
			for _, p := range strings.Split(composite, "*") {
				parts = append(parts, []byte(p))
			}
			parent.wild = append(parent.wild, wildcard{key: composite, parts: parts})
		}
		here := append(slices.Clip(levels), level{
			composite:     composite,
			hasValue:      d.value != "",
			wildcard:      wild,
			parts:         parts,
			share:         d.shareThreshold && wild,
			valueToMetric: d.valueToMetric,
		})
		n := &node{children: map[string]*node{}}
		if d.rateLimit != nil {
			if int64(len(b.c.rules)) >= b.caps.Rules {
				return overRules(b.caps, file, d.rateLimit.line, full, false)
			}
			r, err := b.rule(file, domain, full, rulePath, d, here)
			if err != nil {
				return err
			}
			n.rule = r
			b.c.rules = append(b.c.rules, r)
		}
		if d.shareThreshold && !wild {
			return &Error{File: file, Line: d.line, Path: full, Msg: fmt.Sprintf("share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", composite)}
		}
		below := pool
		if d.concurrency != nil {
			if int64(len(b.c.concs)) >= b.caps.Rules {
				return overRules(b.caps, file, d.concurrency.line, full, true)
			}
			c, err := b.concurrency(file, domain, full, rulePath, d, here, pool, n.rule)
			if err != nil {
				return err
			}
			n.conc = c
			b.c.concs = append(b.c.concs, c)
			if c.Pool == c.Path {
				below = c
			}
		}
		if err := b.descs(file, domain, n, full+".", rulePath, here, below, d.descs); err != nil {
			return err
		}
		parent.children[composite] = n
	}
	return nil
}

// rule builds the Rule of descriptor d's rate_limit.
func (b *builder) rule(file, domain, full, path string, d *yamlDesc, levels []level) (*Rule, error) {
	rl := d.rateLimit
	fail := func(line int, format string, args ...any) error {
		return &Error{File: file, Line: line, Path: full, Msg: fmt.Sprintf(format, args...)}
	}
	seconds, validUnit := unitSeconds[strings.ToUpper(rl.unit)]
	switch {
	case rl.unlimited && validUnit:
		return nil, fail(rl.line, "should not specify rate limit unit when unlimited")
	case rl.unlimited && (rl.hasAlgorithm || rl.hasBurst || rl.period != "" || rl.hasDebt || rl.hasCharge):
		return nil, fail(rl.line, "an unlimited rate_limit takes no algorithm, burst, period, debt or charge")
	case !rl.unlimited && rl.period != "" && rl.unit != "":
		return nil, fail(rl.periodLine, "rate_limit has both unit and period: give one (period is sluice's extension)")
	case !rl.unlimited && rl.period == "" && !validUnit:
		return nil, fail(rl.line, "invalid rate limit unit '%s': %s", rl.unit, validUnits)
	}
	r := &Rule{
		Domain:          domain,
		Path:            path,
		Name:            rl.name,
		RequestsPerUnit: int64(rl.requestsPerUnit),
		Unlimited:       rl.unlimited,
		Shadow:          d.shadowMode,
		DetailedMetric:  d.detailedMetric,
		QuotaMode:       d.quotaMode,
		ValueToMetric:   d.valueToMetric,
		Metadata:        d.metadata,
		Charge:          rl.charge,
		Replaces:        make([]string, 0, len(rl.replaces)),
		levels:          levels,
	}
	for _, rp := range rl.replaces {
		r.Replaces = append(r.Replaces, rp.name)
	}
	for _, rp := range rl.replaces {
		if rp.name == "" {
			return nil, fail(rp.line, "should not have an empty replaces entry")
		}
		if rp.name == rl.name {
			return nil, fail(rp.line, "replaces should not contain name of same descriptor")
		}
	}
	for _, l := range levels {
		r.ShareThreshold = r.ShareThreshold || l.share
	}
	if r.Unlimited {
		return r, nil
	}
	period := time.Duration(seconds) * time.Second
	if rl.period != "" {
		p, err := time.ParseDuration(rl.period)
		if err != nil || p <= 0 {
			return nil, fail(rl.periodLine, "period '%s' is not a positive Go duration (like 1s, 90s, 1h30m)", rl.period)
		}
		period = p
	} else {
		r.Unit = strings.ToLower(rl.unit)
	}
	alg := sluice.AlignedWindow
	if rl.hasAlgorithm {
		a, err := sluice.ParseAlgorithm(rl.algorithm)
		if err != nil {
			return nil, fail(rl.line, "algorithm '%s': %v", rl.algorithm, err)
		}
		alg = a
	}
	rate := int64(rl.requestsPerUnit)
	r.Limit = sluice.Limit{Algorithm: alg, Rate: rate, Period: period, Burst: rate}
	if rl.hasBurst {
		if alg != sluice.TokenBucket && alg != sluice.GCRA && alg != sluice.LeakyBucket {
			return nil, fail(rl.line, "burst applies to token-bucket, gcra and leaky-bucket, not %s", alg)
		}
		if rate == 0 {
			return nil, fail(rl.line, "burst needs a requests_per_unit above 0")
		}
		r.Limit.Burst = rl.burst
	}
	if err := chargeable(r, rl); err != nil {
		return nil, fail(rl.line, "%s", err)
	}
	if rate > 0 {
		if err := r.Limit.Validate(); err != nil {
			return nil, fail(rl.line, "sluice cannot count %d per %s exactly with %s: %v", rate, unitOrPeriod(r), alg, err)
		}
	}
	return r, nil
}

// chargeable sets r's debt allowance from rl, or says why r cannot have
// it or its charge: only the algorithms that can carry a debt can
// (sluice.Limiter.Charge), and a requests_per_unit of 0 counts nothing.
func chargeable(r *Rule, rl *yamlRateLimit) error {
	if !rl.hasDebt && !r.Charge {
		return nil
	}
	what := "debt"
	if r.Charge {
		what = "charge"
	}
	switch {
	case !algo.Chargeable(algo.Kind(r.Limit.Algorithm)):
		return fmt.Errorf("%s applies to token-bucket, gcra, fixed-window and aligned-window (the algorithms that can carry a debt), not %s", what, r.Limit.Algorithm)
	case r.Limit.Rate == 0:
		return fmt.Errorf("%s needs a requests_per_unit above 0", what)
	case r.Charge && r.QuotaMode:
		return errors.New("charge cannot be in quota_mode: a charge is never refused, so it cannot be one of the quota descriptors that refuse together")
	}
	r.Limit.Debt = rl.debt
	return nil
}

func unitOrPeriod(r *Rule) string {
	if r.Unit != "" {
		return r.Unit
	}
	return r.Limit.Period.String()
}
