package rlsconfig

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
)

// MaxConcurrency is the largest max (and headroom + 1) a concurrency limit
// takes: sluice counts the units held exactly up to 2^50.
const MaxConcurrency = 1 << 50

// Concurrency is one configured concurrency limit (sluice's extension
// concurrency: on a descriptor): at most Limit.Limit units held at once by
// the leases of the descriptors that resolve to it. A Concurrency is shared
// by every request that matches it and must not be modified.
//
// A descriptor whose concurrency gives max is a pool: its own key's units.
// One that gives headroom alone is a class of the nearest pool above it:
// its leases hold the pool's units, under the pool's key, and it passes
// only if headroom units are still free after it
// (sluice.Concurrency.Headroom), so that the pool keeps them for its other
// classes. reserve is headroom's deprecated name (Config.Deprecations).
type Concurrency struct {
	// Domain, Path and Name are as a Rule's: the domain, the descriptor
	// path ("tenant/priority=low") and the concurrency's name, "" when not
	// set.
	Domain, Path, Name string
	// Pool is the path of the descriptor whose max this is: Path itself,
	// or for a class the pool's.
	Pool string
	// Limit is what sluice enforces: the pool's max and lifetime (0 when
	// not set: sluice.DefaultLifetime), this descriptor's headroom.
	Limit sluice.Concurrency
	// Rate is the rate_limit of the same descriptor, nil when it has none:
	// a lease of this descriptor takes it too, all or nothing.
	Rate *Rule

	levels []level // the pool's descriptors, from the top
	// shared is how the pool's key writes a shared wildcard's level: "="
	// and its name, escaped, when the pool has one (see Key); "" when not.
	shared string
}

// Key returns the store key of a lease for a descriptor (its entries) that
// resolved to c: the pool's key, as Rule.Key names it, made of the entries
// that reached the pool, but that a named pool writes a shared wildcard's
// level (share_threshold) as its name, not its pattern: a reload that
// changes the pattern keeps the pool, and its leases, under one key.
func (c *Concurrency) Key(entries []Entry) string {
	return key(c.Domain, c.levels, entries[:min(len(c.levels), len(entries))], c.shared)
}

// InDomain reports whether key could be the store key of a lease of one of
// domain's concurrency limits (a key Key returns begins with the domain):
// a lease token names the key it holds, and a token must not reach past
// its domain.
func InDomain(domain, key string) bool {
	var b strings.Builder
	escape(&b, domain)
	b.WriteByte('/')
	return strings.HasPrefix(key, b.String())
}

// ResolveConcurrency returns the concurrency limit a descriptor (its
// entries) of a request to domain resolves to, matched as a rate limit is
// (see Resolve), or nil when it matches no descriptor with a concurrency.
// envoy's replaces does not apply to concurrency limits.
func (c *Config) ResolveConcurrency(domain string, entries []Entry) *Concurrency {
	root := c.domains[domain]
	if root == nil || len(entries) == 0 {
		return nil
	}
	if n := root.matchNode(entries); n != nil {
		return n.conc
	}
	return nil
}

// Concurrencies returns every configured concurrency limit, sorted by
// domain, then path.
func (c *Config) Concurrencies() []*Concurrency { return slices.Clone(c.concs) }

// Deprecations returns what the configuration says with a deprecated name
// (a concurrency's reserve, now headroom), one message each, naming the
// file, line and descriptor: the configuration loads, and its loader logs
// them.
func (c *Config) Deprecations() []string { return slices.Clone(c.deprecations) }

// concurrency builds the Concurrency of descriptor d (its composite path
// full, its Rule.Path path, its descriptors from the top levels), under
// pool, the nearest pool above (nil when none), with rate its rate_limit's
// rule (nil when none).
func (b *builder) concurrency(file, domain, full, path string, d *yamlDesc, levels []level, pool *Concurrency, rate *Rule) (*Concurrency, error) {
	yc := d.concurrency
	fail := func(line int, format string, args ...any) error {
		return &Error{File: file, Line: line, Path: full, Msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case d.shadowMode:
		return nil, fail(yc.line, "concurrency cannot be in shadow_mode: a lease is held or it is not (shadow_mode applies to the rate_limit; move the concurrency to a descriptor of its own)")
	case d.quotaMode:
		return nil, fail(yc.line, "concurrency cannot be in quota_mode: quota_mode applies to rate limits")
	case !yc.hasMax && !yc.hasHeadroom:
		return nil, fail(yc.line, "concurrency needs max (a pool of that many units held at once), or headroom alone (a class of the pool above)")
	case !yc.hasMax && pool == nil:
		return nil, fail(yc.line, "concurrency has headroom but no max, and no descriptor above it has a concurrency max: a class needs a pool above it")
	case !yc.hasMax && yc.lifetime != "":
		return nil, fail(yc.lifetimeLine, "a class (headroom without max) takes its pool's lifetime: set lifetime on the pool (%s)", pool.Pool)
	}
	if yc.reserveLine != 0 {
		b.c.deprecations = append(b.c.deprecations, (&Error{File: file, Line: yc.reserveLine, Path: full, Msg: "concurrency reserve is deprecated: call it headroom (reserve is read until the next minor release)"}).Error())
	}
	c := &Concurrency{Domain: domain, Path: path, Name: yc.name, Rate: rate}
	if yc.hasMax {
		c.Pool, c.levels = path, levels
		if yc.name == "" && sharesWildcard(levels) {
			return nil, fail(yc.line, "a concurrency under a shared wildcard (share_threshold) needs a name: its pool is keyed by it rather than by the pattern, so that a reload that changes the pattern keeps its leases in one pool")
		}
		if yc.name != "" {
			var b strings.Builder
			escape(&b, yc.name)
			c.shared = "=" + b.String()
		}
		c.Limit = sluice.MaxConcurrent(yc.max)
		if yc.lifetime != "" {
			d, err := time.ParseDuration(yc.lifetime)
			if err != nil || d < time.Millisecond || d%time.Microsecond != 0 {
				return nil, fail(yc.lifetimeLine, "lifetime '%s' is not a Go duration of at least 1ms in whole microseconds (like 30s, 5m)", yc.lifetime)
			}
			if err := b.caps.Check(limits.Lifetime, "lifetime", int64(d)); err != nil {
				return nil, &Error{File: file, Line: yc.lifetimeLine, Path: full, Msg: err.Error(), Err: err}
			}
			c.Limit.Lifetime = d
		}
	} else {
		c.Pool, c.levels, c.shared, c.Limit = pool.Pool, pool.levels, pool.shared, pool.Limit.WithHeadroom(0)
	}
	if yc.headroom >= c.Limit.Limit {
		word := "headroom"
		if yc.reserveLine != 0 {
			word = "reserve" // the name the file gave
		}
		return nil, fail(yc.line, "concurrency %s %d out of a max of %d: a class keeps fewer units than its pool has (0 ≤ %[1]s < max)", word, yc.headroom, c.Limit.Limit)
	}
	c.Limit.Headroom = yc.headroom
	if err := c.Limit.Validate(); err != nil {
		return nil, fail(yc.line, "concurrency: %v", err)
	}
	return c, nil
}

// sharesWildcard reports whether a descriptor of levels counts a wildcard's
// matching values together (share_threshold).
func sharesWildcard(levels []level) bool {
	for i := range levels {
		if levels[i].share && levels[i].wildcard {
			return true
		}
	}
	return false
}

// sortConcurrencies sorts cs by domain, then path.
func sortConcurrencies(cs []*Concurrency) {
	slices.SortFunc(cs, func(x, y *Concurrency) int {
		if c := strings.Compare(x.Domain, y.Domain); c != 0 {
			return c
		}
		return strings.Compare(x.Path, y.Path)
	})
}
