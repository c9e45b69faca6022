package serve

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cmd/sluice/internal/rlsconfig"
)

// The lease calls by descriptors: an acquire names a domain and its
// descriptors, the service finds the concurrency limit the configuration
// gives them (and the rate limit of the same descriptor, taken with it),
// and answers a token that a release or an extension echoes.

// tokenPrefix begins a lease token: a key form's lease (a number, or
// localLease and a number) never does.
const tokenPrefix = "c1."

// leaseToken is what a lease token holds: the domain and the descriptor
// whose concurrency limit holds the lease, the pool's key the lease is
// held under (rlsconfig.Concurrency.Key), the lease's id, and whether the
// store's failure policy held it in this process. A release or an
// extension finds the limit again in the configuration in use, and the
// hold where the acquire put it, though a reload has moved the pool since
// (the limit's name is its key's, but an unnamed shared wildcard's is its
// pattern). A token names no key but one of its domain's pools: a caller
// can forge one only for a domain's pools, and must guess a 53-bit id.
type leaseToken struct {
	Domain   string      `json:"d"`
	Entries  [][2]string `json:"e"`
	Key      string      `json:"k,omitempty"`
	ID       int64       `json:"i"`
	Degraded bool        `json:"l,omitempty"`
}

// encode writes t as tokenPrefix and base64url JSON.
func (t *leaseToken) encode() string {
	b, _ := json.Marshal(t) // strings and numbers: cannot fail
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// decodeToken reads a lease token and checks its descriptor against o's
// bounds, as an acquire's are checked.
func decodeToken(s string, o *Options) (*leaseToken, []rlsconfig.Entry, error) {
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(s, tokenPrefix))
	var t leaseToken
	if err == nil {
		err = json.Unmarshal(b, &t)
	}
	if err != nil || t.ID <= 0 {
		return nil, nil, badRequest("lease: not a token an acquire answered")
	}
	d := &rlv3.RateLimitDescriptor{Entries: make([]*rlv3.RateLimitDescriptor_Entry, len(t.Entries))}
	for i, e := range t.Entries {
		d.Entries[i] = &rlv3.RateLimitDescriptor_Entry{Key: e[0], Value: e[1]}
	}
	if err := validate(&pb.RateLimitRequest{Domain: t.Domain, Descriptors: []*rlv3.RateLimitDescriptor{d}}, o); err != nil {
		return nil, nil, badRequest("lease: %v", err)
	}
	if t.Key != "" && !rlsconfig.InDomain(t.Domain, t.Key) {
		return nil, nil, badRequest("lease: not a token an acquire answered")
	}
	entries := make([]rlsconfig.Entry, len(t.Entries))
	for i, e := range t.Entries {
		entries[i] = rlsconfig.Entry{Key: e[0], Value: e[1]}
	}
	return &t, entries, nil
}

// leaseByRules answers a lease call in the descriptor form on the
// configuration in use.
func (s *service) leaseByRules(ctx context.Context, op string, t *LeaseRequest) (*LeaseResponse, error) {
	st := s.state.Load()
	if st == nil {
		return nil, errNoConfig
	}
	if op == "acquire" {
		return s.acquireByRules(ctx, st, t)
	}
	tok, entries, err := decodeToken(t.Lease, &s.opts)
	if err != nil {
		return nil, err
	}
	cc := st.cfg.ResolveConcurrency(tok.Domain, entries)
	if cc == nil {
		// A reload took the limit away: the lease comes back by itself
		// at its expiry, as one released too late does.
		return &LeaseResponse{Remaining: -1}, nil
	}
	held := sluice.Lease{Key: s.leaseKey(cc, entries), Limit: cc.Limit, Units: 1, ID: tok.ID}
	if tok.Key != "" {
		held.Key = s.slotKey(tok.Key) // where the acquire held it
	}
	held.Degraded = tok.Degraded
	var ls sluice.Lease
	if op == "release" {
		ls.Result, err = s.lim.Release(ctx, held)
	} else {
		ls, err = s.lim.Extend(ctx, held, 0)
	}
	if err != nil {
		st.concCounters.count(cc, leaseErrored)
		return nil, leaseError(err)
	}
	out := leaseResponse(&ls, cc)
	out.key = held.Key
	switch {
	case !ls.Allowed:
		st.concCounters.count(cc, leaseNotHeld)
	case op == "release":
		st.concCounters.count(cc, leaseReleased)
	default:
		st.concCounters.count(cc, leaseExtended)
		out.Lease, out.ExpiryUS = t.Lease, ls.Expiry
	}
	return out, nil
}

// acquireByRules finds the concurrency limit of t's descriptors and
// acquires a lease of it, with the rate limit of its descriptor.
func (s *service) acquireByRules(ctx context.Context, st *state, t *LeaseRequest) (*LeaseResponse, error) {
	req := &pb.RateLimitRequest{Domain: t.Domain, Descriptors: make([]*rlv3.RateLimitDescriptor, len(t.Descriptors))}
	for i, d := range t.Descriptors {
		rd := &rlv3.RateLimitDescriptor{Entries: make([]*rlv3.RateLimitDescriptor_Entry, len(d))}
		for j, e := range d {
			rd.Entries[j] = &rlv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value}
		}
		req.Descriptors[i] = rd
	}
	if err := validate(req, &s.opts); err != nil {
		return nil, err
	}
	var cc *rlsconfig.Concurrency
	var entries []rlsconfig.Entry
	which := -1
	for i, d := range t.Descriptors {
		es := make([]rlsconfig.Entry, len(d))
		for j, e := range d {
			es[j] = rlsconfig.Entry{Key: e.Key, Value: e.Value}
		}
		c := st.cfg.ResolveConcurrency(t.Domain, es)
		if c == nil {
			continue
		}
		if cc != nil {
			return nil, badRequest("descriptors %d and %d both have a concurrency limit (%s, %s): an acquire holds one lease", which, i, concName(cc), concName(c))
		}
		cc, entries, which = c, es, i
	}
	if cc == nil {
		return &LeaseResponse{Allowed: true, Remaining: -1}, nil // no limit: nothing to hold
	}
	units := int64(1)
	if t.Units != nil {
		units = *t.Units
	}
	ls, err := s.acquireRule(ctx, cc, entries, units)
	if err != nil {
		st.concCounters.count(cc, leaseErrored)
		return nil, leaseError(err)
	}
	out := leaseResponse(&ls, cc)
	out.key = ls.Key
	switch {
	case ls.Allowed:
		st.concCounters.count(cc, leaseHeld)
		if ls.ID != 0 {
			tok := leaseToken{Domain: t.Domain, Entries: make([][2]string, len(entries)), Key: cc.Key(entries), ID: ls.ID, Degraded: ls.Degraded}
			for i, e := range entries {
				tok.Entries[i] = [2]string{e.Key, e.Value}
			}
			out.Lease, out.ExpiryUS = tok.encode(), ls.Expiry
		}
	case s.opts.GlobalShadow:
		// --shadow: over the limit is answered OK, with nothing held.
		st.concCounters.count(cc, leaseRefused)
		s.metrics.globalShadow.Inc()
		out.Allowed, out.RetryAfterUS = true, 0
	default:
		st.concCounters.count(cc, leaseRefused)
	}
	return out, nil
}

// acquireRule acquires units of cc for a descriptor's entries, with the
// rate limit of the same descriptor (a hit per unit), all or nothing. A
// rate limit of requests_per_unit 0 refuses without asking the store.
func (s *service) acquireRule(ctx context.Context, cc *rlsconfig.Concurrency, entries []rlsconfig.Entry, units int64) (sluice.Lease, error) {
	key := s.leaseKey(cc, entries)
	r := cc.Rate
	if r == nil || r.Unlimited {
		return s.lim.Acquire(ctx, key, cc.Limit, units)
	}
	if r.Limit.Rate == 0 {
		return sluice.Lease{Key: key, Limit: cc.Limit, Units: units}, nil
	}
	part := sluice.Part{Key: r.Key(entries), Limit: r.Limit, Cost: units}
	if s.opts.DomainSlot {
		part.Key = domainSlot(part.Key)
	}
	return s.lim.Acquire(ctx, key, cc.Limit, units, part)
}

// leaseKey is the store key of cc's leases for a descriptor's entries.
func (s *service) leaseKey(cc *rlsconfig.Concurrency, entries []rlsconfig.Entry) string {
	return s.slotKey(cc.Key(entries))
}

// slotKey is a pool's key as the store keeps it: in its domain's slot
// under Options.DomainSlot.
func (s *service) slotKey(k string) string {
	if s.opts.DomainSlot {
		k = domainSlot(k)
	}
	return k
}

// leaseResponse is the answer for ls under cc, without its lease.
func leaseResponse(ls *sluice.Lease, cc *rlsconfig.Concurrency) *LeaseResponse {
	return &LeaseResponse{
		Allowed: ls.Allowed, Rule: concName(cc), Remaining: ls.Remaining, Degraded: ls.Degraded,
		RetryAfterUS: ls.RetryAfter.Microseconds(), ResetAfterUS: ls.ResetAfter.Microseconds(),
		limit: cc.Limit.Limit,
	}
}

// concName names a concurrency limit in answers and metrics: its name,
// else its descriptor path.
func concName(cc *rlsconfig.Concurrency) string {
	if cc.Name != "" {
		return cc.Name
	}
	return cc.Path
}
