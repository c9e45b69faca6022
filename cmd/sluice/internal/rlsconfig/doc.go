// Package rlsconfig loads envoyproxy/ratelimit's YAML configuration, unchanged,
// and matches request descriptors against it exactly as envoyproxy/ratelimit
// does, for `sluice serve`.
//
// # The format
//
// One domain per file:
//
//	domain: edge
//	descriptors:
//	  - key: remote_address          # a key alone: any value, each its own counter
//	    rate_limit:
//	      unit: second
//	      requests_per_unit: 10
//	  - key: path
//	    value: "/api/*"              # '*' anywhere in the value, any number of them
//	    share_threshold: true        # every matching value shares one counter
//	    rate_limit: {unit: minute, requests_per_unit: 600, name: api}
//	  - key: source_cluster
//	    value: proxy                 # key and value: that value only
//	    descriptors:                 # nested: the request's next entry
//	      - key: destination_cluster
//	        rate_limit: {unit: hour, requests_per_unit: 1000}
//	        shadow_mode: true        # over the limit is reported, not enforced
//	  - key: plan
//	    value: internal
//	    rate_limit: {unlimited: true}
//
// A descriptor holds key (required), value, rate_limit, descriptors,
// shadow_mode, detailed_metric, share_threshold (only on a value or key with
// a '*'), and envoy's quota_mode, value_to_metric and metadata, which are
// passed on (Rule.QuotaMode, Rule.ValueToMetric, Rule.Metadata: any map, as
// envoy's yaml.v2 reads it; a metadata that is not a map is a load error).
// A rate_limit holds unit
// (second, minute, hour, day, week, month, year: 1, 60, 3600, 86400,
// 604800, 2592000 and 31536000 seconds, any case), requests_per_unit,
// unlimited, name and replaces (a list of {name: …}).
//
// sluice adds five fields to a rate_limit:
//
//	algorithm: token-bucket   # any name sluice.ParseAlgorithm accepts; default aligned-window
//	burst: 50                 # token-bucket, gcra, leaky-bucket; default requests_per_unit
//	period: 90s               # a Go duration, instead of unit
//	debt: 5000                # units a charge may leave the key owing past empty (sluice.Limit.Debt)
//	charge: true              # a call's hits are charged whatever the answer (Rule.Charge)
//
// Without them a limit counts as envoy counts: sluice.AlignedWindow, the
// window aligned to the Unix epoch (a minute's window starts on the minute,
// a month's every 30 days from 1970), requests_per_unit per unit. A
// requests_per_unit of 0 makes every hit over the limit, as in envoy.
//
// debt and charge apply to the algorithms that can carry a debt
// (token-bucket, gcra, fixed-window, aligned-window) and need a
// requests_per_unit above 0; a charge rule cannot be in quota_mode. A
// charge rule is how costs known only after the work (an LLM call's
// tokens) are counted exactly: Envoy sends them when the stream is done,
// and a check of 0 hits before the next call is over the limit exactly
// while the key is in debt (docs/serve.md, "Charges").
//
// sluice counts exactly, in integers that stay below 2^50 (see
// sluice.Limit.Validate). envoy's windows (aligned-window, the default, and
// fixed-window) only count, and take every requests_per_unit envoy reads
// (up to 4,294,967,295) at every unit. The algorithms that scale units by
// time (token-bucket, gcra, leaky-bucket, sliding-window, sliding-log) keep
// (capacity+1)·period within 2^50 µs; with the default burst (the
// requests_per_unit) that is at most 1,125,899,905 per second, 18,764,997
// per minute, 312,748 per hour, 13,030 per day, 1,860 per week, 433 per
// month and 34 per year (one less for leaky-bucket, whose capacity is
// burst + 1). A larger limit is a load error that says so; a smaller burst,
// a shorter period:, or one of envoy's windows is the way to express it.
//
// # Concurrency limits
//
// sluice adds concurrency to a descriptor, beside its rate_limit: at most
// max units held at once by the leases of the descriptors that resolve to
// it (sluice serve's /v1/acquire), each lease coming back by itself
// lifetime after it was acquired or last extended:
//
//	descriptors:
//	- key: tenant
//	  concurrency: {max: 10, lifetime: 30s, name: tenants}   # a pool: 10 per tenant
//	  descriptors:
//	    - key: priority
//	      value: critical
//	      concurrency: {headroom: 0}    # a class of the pool above: uses all 10
//	    - key: priority
//	      concurrency: {headroom: 2}    # any other priority leaves 2 free for critical
//	- key: report
//	  rate_limit: {unit: minute, requests_per_unit: 100}
//	  concurrency: {max: 2}             # a lease takes a slot and a hit, or neither
//
// max is a whole number from 1 to MaxConcurrency (2^50); lifetime a Go
// duration from 1ms to the lifetime cap (limits.Lifetime, 24h unless
// Options.Limits raises it), default sluice.DefaultLifetime
// (1m); headroom, from 0 to max-1, the units a lease leaves free for the
// pool's other classes (sluice.Concurrency.Headroom; reserve, its old name,
// is still read and reported by Config.Deprecations); name names it in
// metrics. A descriptor whose concurrency gives max is a pool, keyed as its
// rate_limit would be (Concurrency.Key; share_threshold applies), but that
// a pool under a shared wildcard must have a name and is keyed by it, not
// by the pattern: a reload that changes the pattern keeps its leases in
// one pool (an unnamed one is a load error). One that
// gives headroom alone is a class of the nearest pool above: its leases hold
// that pool's units, under the pool's key, with its own headroom. A
// descriptor's rate_limit and its concurrency are taken together, all or
// nothing; the rate rules (Resolve) are those of the rate_limits alone, so
// a descriptor with only a concurrency has no rate limit, as envoy reads
// it. Like rules, a configuration holds at most Options.Limits.Rules
// concurrency limits.
// Load errors say what is wrong: a max or headroom out of range, a headroom
// not below its pool's max, a class with no pool above it or with a
// lifetime of its own, and a concurrency on a descriptor in shadow_mode or
// quota_mode (a lease is held or it is not).
//
// # Matching
//
// A request names a domain and a list of descriptors, each a list of entries
// (key, value). Each descriptor is matched on its own, level by level from
// the domain: at each level the configured descriptor with this key and this
// value, else the first configured wildcard (in file order) that the key and
// value match, else the configured descriptor with this key alone. The rule
// is the rate_limit of the descriptor reached by the request's last entry; a
// descriptor that stops matching, or that is longer than the configured path,
// has no limit and is answered OK, as is every descriptor of an unknown
// domain. Then envoy's replaces: a matched rule whose name another matched
// rule of the same request lists in its replaces does not apply (Resolve).
//
// Rule.Key names the counter of a matched descriptor: the domain and every
// entry as sent, except that a level matched through a wildcard with
// share_threshold names the pattern, so all its values share one counter.
// Rule.StatKey is envoy's stat name for it. Override builds the rule of a
// request's per-descriptor limit override, which envoy applies (to a
// configured domain) instead of the configuration.
//
// Like envoy, a level is looked up by the composite key "key_value" (and a
// wildcard matches that composite), so the quirks of that joining are kept:
// key "a" with value "b_c" and key "a_b" with value "c" are one descriptor
// (a duplicate), and a '*' in a key makes a wildcard too.
//
// # Load errors
//
// A configuration that cannot be loaded is an *Error naming the file, the
// line and the descriptor (envoy's composite path, "domain.key_value.key"),
// with envoy's message where envoy has one: "config file cannot have empty
// domain", "duplicate domain 'x' in config file", "descriptor has empty key",
// "duplicate descriptor composite key 'x'", "invalid rate limit unit 'x'",
// "should not specify rate limit unit when unlimited", "should not have an
// empty replaces entry", "replaces should not contain name of same
// descriptor", "share_threshold can only be used with wildcard values
// (containing '*'), but found key 'x'", "config error, unknown key 'x'",
// "config error, key is not of type string: x", "config error, yaml file
// contains list of type other than map: x", "error loading config file: …".
//
// Bounds keep a small file from exhausting the machine, each a load error
// that names it. Options.Limits holds the service's caps (package limits,
// each a *limits.Exceeded naming the cap and its flag): a configuration's
// bytes, all its files together (config-bytes, 4 MiB); its rules, an
// alias's counted at each use (rules, 10,000: a 2 KB file of anchors reused
// under many parents once made 71,110); how deep descriptors and metadata
// nest (depth, 64). A file expands to at most 1,048,576 YAML nodes, an
// alias counted at each use. The caps are checked while the input is read,
// before what is over them is built: a file's size before it is read, its
// rate_limit keys, flow nesting and nodes in a pass over its text before
// the YAML library builds its tree, what aliases add as the tree is read.
//
// # From xDS
//
// Options.ParseXDS reads envoy's RateLimitConfig resources (Envoy Gateway
// sends them over xDS), each a file of the configuration: the same fields
// but quota_mode, value_to_metric, share_threshold, metadata and sluice's
// extensions, which the resource has not. Its caps are checked on the
// resources' wire form, in a pass that decodes and allocates nothing,
// before each is decoded and built.
//
// # Deliberate differences from envoyproxy/ratelimit
//
// Loading is stricter where envoy silently ignores something: a key envoy
// knows but that has no meaning where it is written (unit on a descriptor), a
// key written twice in one map, and a second YAML document in a file are
// errors. A limit sluice cannot count exactly is an error rather than a
// limit that would drift: envoy's own limits (aligned windows) are always
// exact, since a window only counts; a bucket or a sliding window whose
// capacity times its period is beyond sluice's exact range (see
// sluice.Limit.Validate) is refused. Scalars of any type are read as strings
// where a string is expected (envoy refuses a float such as value: 1.5).
// Load reads *.yaml and *.yml files of one directory, not its
// subdirectories. Two files with one domain are an error unless
// Options.MergeDomains (envoy's MERGE_DOMAIN_CONFIG) merges them; merged
// files are taken in the order of their names, where envoy's order is its
// runtime's.
//
// Keys (Rule.Key) escape their separators, so two descriptors share a
// counter only when envoy's matching says they should (share_threshold),
// never because their joined text happens to be equal.
//
// What the service then does differently (the descriptors of one call decided
// together, all or nothing; rejected hits consume nothing) is the service's
// business, not this package's.
package rlsconfig
