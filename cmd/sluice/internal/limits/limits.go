// Package limits is the table of `sluice serve`'s limits: every quantity
// a caller chooses — over HTTP, gRPC, xDS or in a rules file — and that the
// service then pays for in memory, CPU, output or store time has a cap
// here, with its default, the flag that raises it and why it is what it
// is. A cap is enforced where the input enters, before anything is built
// from it, and an input over it is refused with an *Exceeded error that
// names the cap and the flag.
//
// The table is docs/serve.md's "Limits" (a test checks that the two agree),
// and each row names the test that sends its cap + 1 (a test checks that
// the test exists). A new endpoint or field that takes a caller-sized
// quantity adds its row here first.
package limits

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Table holds the caps in force. The zero Table is not usable: start from
// Defaults() and Set what the operator raises or lowers.
type Table struct {
	// A request, over gRPC or HTTP.
	RequestBytes int64 // a request's encoded size
	Descriptors  int64 // descriptors in one call
	Entries      int64 // entries in one descriptor
	EntryBytes   int64 // a domain, a key or a value
	KeyBytes     int64 // the store key a call names: a descriptor's entries, or the key form's key

	// RLQS (--rlqs): its clients and what they report.
	RLQSClients int64 // streams open at once
	RLQSBuckets int64 // buckets one stream reports
	RLQSReports int64 // bucket reports one stream sends per second
	RLQSWeight  int64 // the fairness weight a stream claims

	// A limit of the caller's: the key form of /v1/take and /v1/acquire,
	// and a descriptor's limit override.
	Units    int64         // its units (a take's capacity, an acquire's limit); a call's units are at most it
	Window   time.Duration // its period or window
	Lifetime time.Duration // a lease's lifetime (the key form's, and a rules file's concurrency)

	// A configuration: rules files and xDS resources.
	ConfigBytes int64 // a rules file, or one xDS response
	Rules       int64 // rules in one configuration, an alias's counted at each use
	Depth       int64 // nesting of a configuration's maps and lists

	// Metrics: series named by the values callers send.
	ValueSeries int64 // detailed_metric and value_to_metric values with decision series of their own
	StatSeries  int64 // envoy's per-rule series (--envoy-stats) named by the values sent

	// The web console.
	WalkRequests int64 // requests in one step-through
	AnswerBytes  int64 // one console answer (a step-through, a playground run)
	RunTicks     int64 // ticks of a run's shape of traffic (a playground run, a step-through)
	RunArrivals  int64 // arrivals a run's shape or trace makes
	RunBodyBytes int64 // the body of a run
	ViewKeys     int64 // keys the slots view follows
	ViewLeases   int64 // leases the slots view follows per key
	ViewBytes    int64 // bytes the slots view holds, all keys together
}

// Kind says how a row's value reads and prints.
type Kind int

// The kinds of rows.
const (
	Count Kind = iota
	Bytes
	Duration
)

// A Row is one line of the table.
type Row struct {
	// Name is the row's name as --limit takes it ("lifetime").
	Name string
	// Alias is an older flag of its own that sets it too
	// ("max-request-bytes"), "" when none.
	Alias string
	Kind  Kind
	// Default is the cap when the operator sets none (a Duration's in
	// nanoseconds).
	Default int64
	// Max is the largest cap an operator may set, 0 when only int64
	// bounds it (a cap whose arithmetic could overflow past it).
	Max int64
	// Where is what the cap applies to, Why why its default is what it is.
	Where, Why string
	// Test names the test that sends the cap + 1 and sees it refused.
	Test string
	at   func(*Table) *int64
}

// The rows, in docs/serve.md's order (Rows).
var (
	RequestBytes = &Row{Name: "request-bytes", Alias: "max-request-bytes", Kind: Bytes, Default: 64 << 10,
		Where: "an HTTP body or a gRPC message", Why: "envoy's descriptors are a few hundred bytes; every other bound on a request is below it",
		Test: "TestRequestBytesCap", at: func(t *Table) *int64 { return &t.RequestBytes }}
	Descriptors = &Row{Name: "descriptors", Alias: "max-descriptors", Kind: Count, Default: 64,
		Where: "descriptors in one call", Why: "an Envoy route sends one per rate_limits action, rarely more than a few",
		Test: "TestDescriptorsCap", at: func(t *Table) *int64 { return &t.Descriptors }}
	Entries = &Row{Name: "entries", Alias: "max-entries", Kind: Count, Default: 32,
		Where: "entries in one descriptor, or in an RLQS bucket id", Why: "one per action of a rate_limits entry; 32 is many times what configurations nest",
		Test: "TestEntriesCap", at: func(t *Table) *int64 { return &t.Entries }}
	EntryBytes = &Row{Name: "entry-bytes", Alias: "max-entry-bytes", Kind: Bytes, Default: 1024,
		Where: "a domain, a key or a value (an RLQS bucket id's too); an RLQS client's name (x-sluice-client)", Why: "an address, a path or an API key fits; a store key is made of them",
		Test: "TestEntryBytesCap", at: func(t *Table) *int64 { return &t.EntryBytes }}
	KeyBytes = &Row{Name: "key-bytes", Kind: Bytes, Default: 2048,
		Where: "the store key a call names: a descriptor's keys and values together, or the key form's key; an RLQS bucket id's keys and values together",
		Why:   "a key lives in the store as long as its window or lease; without it 32 entries of 1 KiB made 32 KiB keys that a day-long override kept",
		Test:  "TestKeyBytesCap", at: func(t *Table) *int64 { return &t.KeyBytes }}
	RLQSClients = &Row{Name: "rlqs-clients", Kind: Count, Default: 1000,
		Where: "RLQS streams open at once (--rlqs); one more is refused RESOURCE_EXHAUSTED",
		Why:   "a stream holds its buckets, their shares and a sender: a few hundred bytes with no bucket; an Envoy opens one per RLQS server and domain; with rlqs-buckets, about 1.7 GB at most",
		Test:  "TestRLQSClientsCap", at: func(t *Table) *int64 { return &t.RLQSClients }}
	RLQSBuckets = &Row{Name: "rlqs-buckets", Kind: Count, Default: 1000,
		Where: "buckets one RLQS stream reports; a bucket beyond is answered DENY_ALL and not kept",
		Why:   "each bucket is about 1.7 KB of state and a share every round; an Envoy reports every bucket in one message, which request-bytes also caps (about 60 bytes a bucket with a short id)",
		Test:  "TestRLQSBucketsCap", at: func(t *Table) *int64 { return &t.RLQSBuckets }}
	RLQSReports = &Row{Name: "rlqs-reports", Kind: Count, Default: 1000,
		Where: "bucket reports one RLQS stream sends a second, ten seconds of it at once; a message beyond ends the stream RESOURCE_EXHAUSTED",
		Why:   "an Envoy reports every bucket every 5 s and a new one at once: 1,000 buckets are 200 a second; gRPC's clients (A77) may report each bucket every 100 ms",
		Test:  "TestRLQSReportsCap", at: func(t *Table) *int64 { return &t.RLQSReports }}
	RLQSWeight = &Row{Name: "rlqs-weight", Kind: Count, Default: 1000, Max: 1 << 20,
		Where: "the weight an RLQS stream claims in every share (its x-sluice-weight metadata); a larger one is refused INVALID_ARGUMENT",
		Why:   "a client's weight multiplies its share of every budget it reports: 1,000 lets one Envoy stand for a thousand without letting it starve the others to a token; at most 2^20, so that the weights of rlqs-clients streams sum within 64 bits",
		Test:  "TestRLQSWeightCap", at: func(t *Table) *int64 { return &t.RLQSWeight }}
	Units = &Row{Name: "units", Kind: Count, Default: 1_000_000,
		Where: "the units of a limit the caller names: the key form's limit and its debt allowance, a descriptor's limit override's requests_per_unit (a take's units are at most its limit's); and a charge's units, which a limit does not bound: a charge rule's hits, /v1/charge's, /v1/settle's estimate and actual",
		Why:   "a sliding log keeps an entry per admitted call and a concurrency limit a hold per lease: the limit bounds what one key holds",
		Test:  "TestUnitsCap", at: func(t *Table) *int64 { return &t.Units }}
	Window = &Row{Name: "window", Kind: Duration, Default: int64(24 * time.Hour),
		Where: "the period of a limit the caller names (the key form's; a limit override's unit)",
		Why:   "a key is kept as long as its window; envoy's longest common unit is a day",
		Test:  "TestWindowCap", at: func(t *Table) *int64 { return (*int64)(&t.Window) }}
	Lifetime = &Row{Name: "lifetime", Kind: Duration, Default: int64(24 * time.Hour),
		Where: "a lease's lifetime: the key form's, and a rules file's concurrency lifetime",
		Why:   "a lease not released holds its slot and its memory until then; a job longer than a day extends its lease",
		Test:  "TestLifetimeCap", at: func(t *Table) *int64 { return (*int64)(&t.Lifetime) }}
	ConfigBytes = &Row{Name: "config-bytes", Alias: "xds-max-message-bytes", Kind: Bytes, Default: 4 << 20,
		Where: "a configuration's bytes: its rules files together, or one xDS response's resources",
		Why:   "gRPC's default largest message; a configuration of 10,000 rules is about 1 MiB. A file's size is checked before it is read; the xDS stream reads a message up to twice the cap and 1 MiB",
		Test:  "TestConfigBytesCap", at: func(t *Table) *int64 { return &t.ConfigBytes }}
	Rules = &Row{Name: "rules", Kind: Count, Default: 10_000,
		Where: "rules in one configuration, all its files together, an alias's counted at each use; concurrency limits the same, apart",
		Why:   "each rule has its series and its console row; a few KB of YAML anchors once made 71,110, and 100,000 descriptors over xDS took 290 MB before they were counted: they are counted on the text and the wire form, before anything is built",
		Test:  "TestRulesCap", at: func(t *Table) *int64 { return &t.Rules }}
	Depth = &Row{Name: "depth", Kind: Count, Default: 64,
		Where: "descriptors nested in descriptors, and a descriptor's metadata's maps and lists",
		Why:   "envoy's configurations nest a few levels; a 51 KB chain 4,900 deep once took 764 MB over xDS: the depth is checked on a file's text and a response's wire form, before anything is built",
		Test:  "TestDepthCap", at: func(t *Table) *int64 { return &t.Depth }}
	ValueSeries = &Row{Name: "value-series", Kind: Count, Default: 1000,
		Where: "stat names of detailed_metric and value_to_metric rules with decision series of their own; the others are counted together as (other)",
		Why:   "every value a caller sends would be a series on /metrics: 1,000 keep a scrape small",
		Test:  "TestDecisionSeriesBounded", at: func(t *Table) *int64 { return &t.ValueSeries }}
	StatSeries = &Row{Name: "stat-series", Kind: Count, Default: 10_000,
		Where: "envoy's per-rule series (--envoy-stats), which detailed_metric and value_to_metric name by the values sent; beyond, hits are not counted in them",
		Why:   "100,000 distinct values once meant as many series",
		Test:  "TestStatSeriesCap", at: func(t *Table) *int64 { return &t.StatSeries }}
	WalkRequests = &Row{Name: "walk-requests", Kind: Count, Default: 1000,
		Where: "requests in one step-through (the console's, sluice sim --steps)", Why: "a walk is for reading, step by step",
		Test: "TestWalkRequestsCap", at: func(t *Table) *int64 { return &t.WalkRequests }}
	AnswerBytes = &Row{Name: "answer-bytes", Kind: Bytes, Default: 1 << 20,
		Where: "one answer of the console (a step-through, a playground run), JSON or HTML",
		Why:   "a page a browser shows at once; a sliding log's state is summarised past a few entries",
		Test:  "TestAnswerBytesCap", at: func(t *Table) *int64 { return &t.AnswerBytes }}
	RunTicks = &Row{Name: "run-ticks", Kind: Count, Default: 200,
		Where: "ticks of a console run's traffic: a playground run, or a step-through's shape",
		Why:   "a playground answer is up to about 5 KB a tick (its figure most of it): under 1 MB; its figure outgrows its width past 195",
		Test:  "TestRunTicksCap", at: func(t *Table) *int64 { return &t.RunTicks }}
	RunArrivals = &Row{Name: "run-arrivals", Kind: Count, Default: 10_000,
		Where: "arrivals a console run's shape or pasted trace makes",
		Why:   "each is decided by all seven algorithms: some tens of ms of CPU in all, one run at a time",
		Test:  "TestRunArrivalsCap", at: func(t *Table) *int64 { return &t.RunArrivals }}
	RunBodyBytes = &Row{Name: "run-body-bytes", Kind: Bytes, Default: 1 << 20,
		Where: "the body of a console run (a playground run, a step-through): its form or JSON, a pasted trace",
		Why:   "a trace of 10,000 requests in replay's format fits",
		Test:  "TestRunBodyBytesCap", at: func(t *Table) *int64 { return &t.RunBodyBytes }}
	ViewKeys = &Row{Name: "view-keys", Kind: Count, Default: 1024,
		Where: "keys the console's slots view follows", Why: "the view is a table a person reads; the keys holding the most come first",
		Test: "TestViewKeysCap", at: func(t *Table) *int64 { return &t.ViewKeys }}
	ViewLeases = &Row{Name: "view-leases", Kind: Count, Default: 64,
		Where: "leases the slots view follows per key", Why: "the oldest and the next to expire are what a reader looks for",
		Test: "TestViewLeasesCap", at: func(t *Table) *int64 { return &t.ViewLeases }}
	ViewBytes = &Row{Name: "view-bytes", Kind: Bytes, Default: 4 << 20,
		Where: "bytes the slots view holds, its keys and names together; the bytes of the RLQS view's budgets",
		Why:   "keys and names are callers' strings: a count alone let 1 KiB names grow the view to 213 MB",
		Test:  "TestViewBytesCap", at: func(t *Table) *int64 { return &t.ViewBytes }}
)

// Rows is the table, in docs/serve.md's order.
var Rows = []*Row{
	RequestBytes, Descriptors, Entries, EntryBytes, KeyBytes, RLQSClients, RLQSBuckets, RLQSReports, RLQSWeight, Units, Window, Lifetime, ConfigBytes, Rules, Depth,
	ValueSeries, StatSeries, WalkRequests, AnswerBytes, RunTicks, RunArrivals, RunBodyBytes, ViewKeys, ViewLeases, ViewBytes,
}

// Defaults returns the table with every row at its default.
func Defaults() Table {
	var t Table
	for _, r := range Rows {
		*r.at(&t) = r.Default
	}
	return t
}

// FillDefaults sets every cap of t that is not positive to its default.
func (t *Table) FillDefaults() {
	for _, r := range Rows {
		if p := r.at(t); *p <= 0 {
			*p = r.Default
		}
	}
}

// Lookup returns the row named name (or its alias), or nil.
func Lookup(name string) *Row {
	for _, r := range Rows {
		if r.Name == name || (r.Alias != "" && r.Alias == name) {
			return r
		}
	}
	return nil
}

// Get returns r's cap in t.
func (t *Table) Get(r *Row) int64 { return *r.at(t) }

// Set sets r's cap in t from its text ("24h", "4096"); a cap must be
// positive.
func (t *Table) Set(r *Row, text string) error {
	v, err := r.Parse(text)
	if err != nil {
		return err
	}
	*r.at(t) = v
	return nil
}

// Parse reads a value of r's kind: a Go duration for a Duration ("30s",
// "24h"), a positive whole number otherwise, with KiB or MiB after it for
// Bytes ("64KiB").
func (r *Row) Parse(text string) (int64, error) {
	if r.Kind == Duration {
		d, err := time.ParseDuration(text)
		if err != nil || d <= 0 {
			return 0, fmt.Errorf("limit %s=%q: want a positive duration such as 30s or 24h", r.Name, text)
		}
		return int64(d), nil
	}
	num, scale := text, int64(1)
	if r.Kind == Bytes {
		for _, u := range byteUnits {
			if n, ok := strings.CutSuffix(text, u.name); ok {
				num, scale = n, u.size
				break
			}
		}
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v <= 0 || v > math.MaxInt64/scale || (r.Max > 0 && v*scale > r.Max) {
		want := "a positive whole number"
		if r.Kind == Bytes {
			want += " of bytes, or of KiB or MiB (64KiB)"
		}
		if r.Max > 0 {
			want += " up to " + r.Format(r.Max)
		}
		return 0, fmt.Errorf("limit %s=%q: want %s", r.Name, text, want)
	}
	return v * scale, nil
}

// byteUnits are the suffixes Parse reads and Format writes for Bytes,
// largest first.
var byteUnits = []struct {
	name string
	size int64
}{{"MiB", 1 << 20}, {"KiB", 1 << 10}}

// Format writes v as Parse reads it: a duration in its largest whole unit
// ("24h", "90s"), bytes in whole MiB or KiB when they are ("64KiB").
func (r *Row) Format(v int64) string {
	switch r.Kind {
	case Duration:
		d := time.Duration(v)
		for _, u := range []struct {
			unit time.Duration
			name string
		}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
			if d%u.unit == 0 {
				return strconv.FormatInt(int64(d/u.unit), 10) + u.name
			}
		}
		return d.String()
	case Bytes:
		for _, u := range byteUnits {
			if v%u.size == 0 {
				return strconv.FormatInt(v/u.size, 10) + u.name
			}
		}
	}
	return strconv.FormatInt(v, 10)
}

// Flag is the command-line flag that sets r: "--limit NAME=VALUE".
func (r *Row) Flag() string {
	v := "N"
	if r.Kind == Duration {
		v = "DURATION"
	}
	return "--limit " + r.Name + "=" + v
}

// SetAll reads a --limit value: NAME=VALUE pairs separated by commas.
func (t *Table) SetAll(list string) error {
	for _, kv := range strings.Split(list, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		name, val, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("limit %q: want NAME=VALUE (%s)", kv, names())
		}
		r := Lookup(strings.TrimSpace(name))
		if r == nil {
			return fmt.Errorf("limit %q: no such limit (%s)", name, names())
		}
		if err := t.Set(r, strings.TrimSpace(val)); err != nil {
			return err
		}
	}
	return nil
}

// names lists the rows' names.
func names() string {
	s := make([]string, len(Rows))
	for i, r := range Rows {
		s[i] = r.Name
	}
	return strings.Join(s, ", ")
}

// ErrExceeded is what every *Exceeded wraps, for errors.Is.
var ErrExceeded = errors.New("over the service's limit")

// Exceeded is the error of an input over a cap: What was given, Got of it
// where Cap is the cap of Row.
type Exceeded struct {
	Row  *Row
	What string // what the input was: `"lifetime"`, "descriptor 3", "xds/edge"
	Got  int64  // 0 when the input was refused before it was all counted
	Cap  int64
}

// Error says what was over, the cap and how to raise it.
func (e *Exceeded) Error() string {
	limit := fmt.Sprintf("the service's limit %s of %s", e.Row.Name, e.Row.quantity(e.Cap))
	if e.Got <= 0 {
		return fmt.Sprintf("%s: over %s (%s raises it)", e.What, limit, e.Row.Flag())
	}
	return fmt.Sprintf("%s: %s, over %s (%s raises it)", e.What, e.Row.quantity(e.Got), limit, e.Row.Flag())
}

// quantity writes v for a reader: Format's text, "bytes" after a plain
// number of them.
func (r *Row) quantity(v int64) string {
	s := r.Format(v)
	if r.Kind == Bytes && !strings.HasSuffix(s, "iB") {
		s += " bytes"
	}
	return s
}

// Unwrap makes errors.Is(err, ErrExceeded) true.
func (e *Exceeded) Unwrap() error { return ErrExceeded }

// Check returns an *Exceeded when got is over r's cap in t, else nil.
func (t *Table) Check(r *Row, what string, got int64) error {
	if c := *r.at(t); got > c {
		return &Exceeded{Row: r, What: what, Got: got, Cap: c}
	}
	return nil
}

// Over returns the *Exceeded of an input over r's cap whose size was not
// all counted (a stream cut at the cap).
func (t *Table) Over(r *Row, what string) error {
	return &Exceeded{Row: r, What: what, Cap: *r.at(t)}
}
