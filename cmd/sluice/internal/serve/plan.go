package serve

import (
	"fmt"
	"math"
	"strings"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
	"github.com/sluice-go/sluice/cmd/sluice/internal/rlsconfig"
	"github.com/sluice-go/sluice/observe"
)

// part kinds of a descriptor.
const (
	kindNone      = iota // no rule matched: OK, no limit
	kindUnlimited        // an unlimited rule: OK
	kindEnforced
	kindShadow
	kindQuota  // quota_mode: over only refuses when every quota descriptor is (quota.go)
	kindRefund // is_negative_hits: gives its units back (quota.go)
	kindCharge // a charge rule's, or any under /v1/charge: charged whatever the answer (charge.go)
)

// descState is one descriptor of a call: what plan made of it, then what
// respond found.
type descState struct {
	// Set by plan.
	rule *rlsconfig.Rule
	kind uint8
	zero bool // requests_per_unit 0: over the limit without asking the store
	part int  // index in its kind's parts (after merging equal keys)
	// Set by respond.
	over bool
	res  sluice.Result
	out  observe.Outcome // what the descriptor is counted as (not for kindNone, kindRefund)
}

// shadow reports whether ds is over the limit without refusing the call:
// a shadow_mode rule's, taken or charged.
func (ds *descState) shadow() bool {
	return ds.kind == kindShadow || ds.kind == kindCharge && ds.rule.Shadow
}

// plan is what one call asks of the stores: which rule each descriptor
// matched, what kind of descriptor that makes it, and the parts to decide,
// each kind apart.
type plan struct {
	req     *pb.RateLimitRequest
	entries [][]rlsconfig.Entry // each descriptor's entries, as the configuration matches them
	flat    []rlsconfig.Entry   // the entries' one array
	desc    []descState         // one per descriptor
	// The parts of each kind, equal keys merged (two descriptors that name
	// one counter spend it together), but refunds: one per give-back.
	enforced, shadow, quota, refunds, charges []sluice.Part
	// chargeAll: every limited descriptor is charged (/v1/charge), not
	// only those of charge rules. Set before make.
	chargeAll bool
	// blocked: an enforced descriptor of requests_per_unit 0 refuses the
	// call, whatever the stores say.
	blocked bool
	// quotaDecides: the call has quota_mode descriptors and none that
	// always passes, so the call is over the limit when every one of them
	// is (quotaRefuses).
	quotaDecides bool
}

// make plans req under cfg and the modes of o (DomainSlot, GlobalQuota).
// Its error is a requestError: a limit override or a give-back the
// configuration cannot take. req must be valid (validate).
func (p *plan) make(req *pb.RateLimitRequest, cfg *rlsconfig.Config, o *Options) error {
	p.req = req
	p.flatten(req.Descriptors)
	rules := cfg.Resolve(req.Domain, p.entries)
	p.desc = grow(p.desc, len(req.Descriptors))
	p.enforced, p.shadow, p.quota, p.refunds, p.charges = p.enforced[:0], p.shadow[:0], p.quota[:0], p.refunds[:0], p.charges[:0]
	for i, d := range req.Descriptors {
		var rule *rlsconfig.Rule
		if i < len(rules) {
			rule = rules[i]
		}
		if d.Limit != nil && cfg.HasDomain(req.Domain) {
			over, err := rlsconfig.Override(req.Domain, p.entries[i], d.Limit.RequestsPerUnit, d.Limit.Unit.String())
			if err != nil {
				return badRequest("descriptor %d: limit override: %v", i, err)
			}
			if err := checkOverride(i, over, &o.Limits); err != nil {
				return err
			}
			rule = over
		}
		if err := p.add(i, d, rule, o); err != nil {
			return err
		}
	}
	p.blocked, p.quotaDecides = false, false
	quotaPasses := false // a quota descriptor whose status is always OK
	for i := range p.desc {
		ds := &p.desc[i]
		switch {
		case ds.kind == kindEnforced || ds.kind == kindCharge && !ds.rule.Shadow:
			p.blocked = p.blocked || ds.zero
		case ds.kind == kindQuota:
			p.quotaDecides = true
		case ds.kind == kindUnlimited:
		case o.GlobalQuota || (ds.kind == kindShadow || ds.kind == kindRefund) && ds.rule.QuotaMode:
			// As envoy counts it: in shadow_mode or giving units back,
			// and under global quota mode one without a rule too.
			quotaPasses = true
		}
	}
	p.quotaDecides = p.quotaDecides && !quotaPasses
	return nil
}

// checkOverride checks descriptor i's limit override against the limits
// table: a limit of the caller's, as the key form's.
func checkOverride(i int, over *rlsconfig.Rule, lt *limits.Table) error {
	err := lt.Check(limits.Units, fmt.Sprintf("descriptor %d's limit override", i), over.RequestsPerUnit)
	if err == nil {
		err = lt.Check(limits.Window, fmt.Sprintf("descriptor %d's limit override's unit", i), int64(over.Limit.Period))
	}
	return capped(err)
}

// flatten copies the descriptors' entries into p.flat, one allocation
// however many descriptors, and slices p.entries out of it.
func (p *plan) flatten(ds []*rlv3.RateLimitDescriptor) {
	total := 0
	for _, d := range ds {
		total += len(d.Entries)
	}
	p.flat = p.flat[:0]
	if cap(p.flat) < total {
		p.flat = make([]rlsconfig.Entry, 0, total)
	}
	p.entries = p.entries[:0]
	for _, d := range ds {
		lo := len(p.flat)
		for _, e := range d.Entries {
			p.flat = append(p.flat, rlsconfig.Entry{Key: e.Key, Value: e.Value})
		}
		p.entries = append(p.entries, p.flat[lo:len(p.flat):len(p.flat)])
	}
}

// add plans descriptor i, d, under rule (nil when none matched).
func (p *plan) add(i int, d *rlv3.RateLimitDescriptor, rule *rlsconfig.Rule, o *Options) error {
	ds := &p.desc[i]
	ds.rule = rule
	switch {
	case rule == nil:
		ds.kind = kindNone
		return nil
	case rule.Unlimited:
		ds.kind = kindUnlimited
		return nil
	}
	part := sluice.Part{Key: rule.Key(p.entries[i]), Limit: rule.Limit, Cost: cost(p.req, d)}
	if o.DomainSlot {
		part.Key = domainSlot(part.Key)
	}
	if d.IsNegativeHits && part.Cost > 0 {
		return p.addRefund(i, ds, part)
	}
	switch {
	case rule.Charge || p.chargeAll:
		if err := p.checkCharge(i, ds, part, o); err != nil {
			return err
		}
		ds.kind = kindCharge
	case rule.Shadow:
		ds.kind = kindShadow
	case rule.QuotaMode || o.GlobalQuota:
		ds.kind = kindQuota
	default:
		ds.kind = kindEnforced
	}
	if rule.Limit.Rate == 0 {
		// requests_per_unit 0: every hit is over the limit, as envoy has
		// it; the store is not asked.
		ds.zero = true
		return nil
	}
	switch ds.kind {
	case kindCharge:
		ds.part = addPart(&p.charges, part)
	case kindShadow:
		ds.part = addPart(&p.shadow, part)
	case kindQuota:
		ds.part = addPart(&p.quota, part)
	default:
		ds.part = addPart(&p.enforced, part)
	}
	return nil
}

// addRefund makes descriptor i (its state ds, its part of cost > 0) a
// give-back, or says why its rule cannot give units back.
func (p *plan) addRefund(i int, ds *descState, part sluice.Part) error {
	if !canGiveBack(part.Limit) {
		return badRequest("descriptor %d: is_negative_hits: rule %q counts with %s, which cannot give units back (token-bucket, gcra, fixed-window and aligned-window can)",
			i, policyName(ds.rule), part.Limit.Algorithm)
	}
	ds.kind, ds.zero = kindRefund, part.Limit.Rate == 0
	ds.part = len(p.refunds)
	p.refunds = append(p.refunds, part)
	return nil
}

// quotaRefuses reports whether the quota_mode descriptors refuse the call,
// over holding whether each quota part could not spend its cost: when
// every one of them is over, and none always passes (quotaDecides).
func (p *plan) quotaRefuses(over []bool) bool {
	if !p.quotaDecides {
		return false
	}
	for i := range p.desc {
		if ds := &p.desc[i]; ds.kind == kindQuota && !ds.zero && !over[ds.part] {
			return false
		}
	}
	return true
}

// clear drops what p holds of the request and the configuration: a pooled
// plan must keep neither alive.
func (p *plan) clear() {
	p.req = nil
	clear(p.flat)
	clear(p.desc)
	clear(p.enforced)
	clear(p.shadow)
	clear(p.quota)
	clear(p.refunds)
	clear(p.charges)
	p.chargeAll = false
}

// validate checks a request against the service's limits (o.Limits).
func validate(req *pb.RateLimitRequest, o *Options) error {
	if req.Domain == "" {
		return badRequest("rate limit domain must not be empty")
	}
	if len(req.Descriptors) == 0 {
		return badRequest("rate limit descriptor list must not be empty")
	}
	lt := &o.Limits
	if int64(len(req.Descriptors)) > lt.Descriptors {
		return capped(lt.Check(limits.Descriptors, "descriptors", int64(len(req.Descriptors))))
	}
	if int64(len(req.Domain)) > lt.EntryBytes {
		return capped(lt.Check(limits.EntryBytes, "domain", int64(len(req.Domain))))
	}
	for i, d := range req.Descriptors {
		if d == nil || len(d.Entries) == 0 {
			return badRequest("descriptor %d has no entries", i)
		}
		if int64(len(d.Entries)) > lt.Entries {
			return capped(lt.Check(limits.Entries, fmt.Sprintf("descriptor %d's entries", i), int64(len(d.Entries))))
		}
		size := int64(0)
		for j, e := range d.Entries {
			if e == nil {
				return badRequest("descriptor %d entry %d is empty", i, j)
			}
			if n := int64(max(len(e.Key), len(e.Value))); n > lt.EntryBytes {
				return capped(lt.Check(limits.EntryBytes, fmt.Sprintf("descriptor %d entry %d's key or value", i, j), n))
			}
			if e.Key == "" {
				return badRequest("descriptor %d entry %d has an empty key", i, j)
			}
			size += int64(len(e.Key) + len(e.Value))
		}
		if size > lt.KeyBytes {
			return capped(lt.Check(limits.KeyBytes, fmt.Sprintf("descriptor %d's keys and values", i), size))
		}
	}
	return nil
}

// cost is a descriptor's cost: its own hits_addend when set (0 only looks),
// else the request's, else 1.
func cost(req *pb.RateLimitRequest, d *rlv3.RateLimitDescriptor) int64 {
	if d.HitsAddend != nil {
		return int64(min(d.HitsAddend.Value, math.MaxInt64>>1))
	}
	if req.HitsAddend != 0 {
		return int64(req.HitsAddend)
	}
	return 1
}

// addPart appends p to parts, merging it into a part of the same key (two
// descriptors that name one counter spend it together); it returns the
// part's index.
func addPart(parts *[]sluice.Part, p sluice.Part) int {
	for i := range *parts {
		if (*parts)[i].Key == p.Key {
			(*parts)[i].Cost = addCost((*parts)[i].Cost, p.Cost)
			return i
		}
	}
	*parts = append(*parts, p)
	return len(*parts) - 1
}

// addCost adds two costs (neither negative), saturating at math.MaxInt64:
// a sum that does not fit is over every limit's capacity, so the call is
// refused as any cost that could never pass is, where a wrapped sum would
// pass as a small cost or fail as a negative one.
func addCost(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// domainSlot makes a store key's domain (the escaped text before its first
// '/', never empty and with no brace) its Redis Cluster hash tag.
func domainSlot(key string) string {
	i := strings.IndexByte(key, '/')
	if i < 0 {
		i = len(key)
	}
	return "{" + key[:i] + "}" + key[i:]
}
