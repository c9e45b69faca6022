package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
	"github.com/sluice-go/sluice/cmd/sluice/internal/rlqs"
	"github.com/sluice-go/sluice/cmd/sluice/internal/rlsconfig"
	"github.com/sluice-go/sluice/internal/rateslice"
)

// RLQSOptions turn on Envoy's Rate Limit Quota Service (Options.RLQS,
// docs/rlqs.md): clients report their usage per bucket, and each bucket
// the rules limit is a budget whose rate the server shares among them.
type RLQSOptions struct {
	// Config are the allocator's parameters (report interval, TTL,
	// slack, burst, reserve, headroom, band, idle reports); zero fields
	// default.
	rlqs.Config
	// Now is the service's clock, for tests; nil is time.Now. With it,
	// the slices' ends in Redis are on it too (else on Redis's TIME).
	Now func() time.Time
}

// ClientHeader is the gRPC metadata a client may set (Envoy: the
// GrpcService's initial_metadata) to name itself across its streams: a
// stream that opens under the name of one still open ends that one at
// once (codes.Aborted) and takes its buckets over, shares and leases,
// when its first message names the same domain (else they are let go),
// instead of both counting until the old one is found silent. At most
// entry-bytes long.
const ClientHeader = "x-sluice-client"

// WeightHeader is the gRPC metadata a client sets (Envoy: the
// GrpcService's initial_metadata) to weigh its share of every budget
// (a whole number from 1 to the limits table's rlqs-weight; 1 when
// absent).
const WeightHeader = "x-sluice-weight"

// rlqsService is the Rate Limit Quota Service: the allocator, and the
// open streams with their buckets. One mutex serialises reports, rounds
// and scrapes; each takes it for one message, one round or one scrape.
type rlqsService struct {
	s     *service
	alloc *rlqs.Allocator
	now   func() int64 // µs
	mu    sync.Mutex
	// streams are the open streams; holders maps the allocator's holders
	// to the buckets that report them.
	streams map[*rlqsStream]struct{}
	clients map[string]*rlqsStream // the open streams that name their client
	holders holderSlots
	// roundCfg is the configuration the rounds last matched buckets to.
	roundCfg *rlsconfig.Config
	metrics  *rlqsMetrics
	// stopping is closed when the server shuts down: the streams end
	// (a stream lasts as long as its client, and would hold up a
	// graceful stop until its timeout).
	stopping chan struct{}
	stopOnce sync.Once
	// badRules are the rules whose rate RLQS cannot express, logged once
	// each, with the configuration they came in (a reload's rules are
	// new: the map is emptied when another configuration's rule comes).
	badRules map[*rlsconfig.Rule]*rlsconfig.Config

	// slicer, when set, leases this replica (named replica) its slice of
	// every budget's rate each round (the allocator is Config.Sliced);
	// serverTime: the slices' ends are on Redis's TIME; failing is set
	// while renewals fail (logged once a streak). Only run (or the
	// tests' rounds) renews.
	slicer     rateslice.Func
	replica    string
	serverTime bool
	failing    bool
}

// rlqsStream is one client: one RLQS stream, its domain and buckets.
type rlqsStream struct {
	domain  string
	weight  int64
	buckets map[string]*rlqsBucket // by bucketKey
	pace    *rlqs.TokenBucket      // its reports (limits.RLQSReports)
	// out carries what the stream's sender writes: the answers to its
	// reports, and the rounds' pushes (dropped when it is full).
	out    chan *rlqspb.RateLimitQuotaResponse
	warned map[*limits.Row]bool // the caps whose refusals were logged
	closed bool                 // close has run: a late report is refused
	// client is its ClientHeader ("" when none); replaced is closed when
	// another stream of the same client ends it.
	client   string
	replaced chan struct{}
	// heir holds the buckets of the stream of the same client this one
	// replaced, and their domain, until its first message: they become
	// its own when it names that domain (inherit).
	heir       map[string]*rlqsBucket
	heirDomain string
}

// rlqsBucket is one bucket a client reports.
type rlqsBucket struct {
	st *rlqsStream
	id *rlqspb.BucketId // as the client sent it: actions echo it
	// cfg is the configuration it was matched under; a reload matches it
	// again.
	cfg *rlsconfig.Config
	// holder is its share of a budget, 0 when it has none: fixed is then
	// its blanket answer (no rule, unlimited or shadow: ALLOW_ALL;
	// requests_per_unit 0 or a rate RLQS cannot express: DENY_ALL).
	holder rlqs.Holder
	budget rlqs.Budget
	fixed  typev3.RateLimitStrategy_BlanketRule
	// sent is the holder's last action, sentMsg its message (actionOf).
	sent    rlqs.Action
	sentMsg *rlqspb.RateLimitQuotaResponse_BucketAction
	lastUse int64 // µs: the last report that counted a request (fixed buckets' idleness)
}

func newRLQSService(s *service, o *RLQSOptions) (*rlqsService, error) {
	cfg := o.Config
	slicer := rateslice.For(s.opts.Store) // redisstore's, nil in memory
	cfg.Sliced = slicer != nil
	a, err := rlqs.New(cfg)
	if err != nil {
		return nil, err
	}
	now := func() int64 { return time.Now().UnixMicro() }
	if o.Now != nil {
		clock := o.Now
		now = func() int64 { return clock().UnixMicro() }
	}
	q := &rlqsService{s: s, alloc: a, now: now, streams: map[*rlqsStream]struct{}{}, clients: map[string]*rlqsStream{}, stopping: make(chan struct{}), badRules: map[*rlsconfig.Rule]*rlsconfig.Config{}}
	q.metrics = newRLQSMetrics(q)
	if slicer != nil {
		var name [8]byte
		_, _ = rand.Read(name[:]) // never fails (crypto/rand)
		q.slicer, q.replica, q.serverTime = slicer, hex.EncodeToString(name[:]), o.Now == nil
	}
	a.Start(now()) // the warm-up runs from the server's start
	return q, nil
}

// rlqsSliceKey is the store key of budget key's slices, whatever its
// unit: a reload that changes a rule's unit counts the old unit's slices
// against the new unit's, as rates (rateslice.Claim.Unit).
func rlqsSliceKey(key string) string { return "rlqs/" + key }

// renew leases the replica's slice of every budget's rate at now (µs)
// from the store, the service's lock released while it waits. A budget
// whose slice cannot be renewed grants from the slice it holds until that
// ends, then nothing (DENY_ALL).
func (q *rlqsService) renew(ctx context.Context, now int64) {
	if q.slicer == nil {
		return
	}
	q.mu.Lock()
	claims := q.alloc.Claims(now, nil)
	q.mu.Unlock()
	rc := make([]rateslice.Claim, len(claims))
	for i, c := range claims {
		rc[i] = rateslice.Claim{Key: rlqsSliceKey(c.Key), Unit: c.Fill, Rate: c.Rate, Want: c.Want, Demand: c.Demand, Weight: c.Weight}
	}
	if len(claims) == 0 {
		return
	}
	at := now
	if q.serverTime {
		at = -1
	}
	got := q.slicer(ctx, q.replica, at, q.alloc.Config().SliceLife, rc)
	set := make([]rlqs.Slice, 0, len(got))
	var failed error
	for i, g := range got {
		if g.Err != nil {
			failed = g.Err
			q.metrics.sliceFailures.Inc()
			continue
		}
		set = append(set, rlqs.Slice{Key: claims[i].Key, Fill: claims[i].Fill, Tokens: g.Tokens, Fair: g.Fair})
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.alloc.SetSlices(now, set)
	switch {
	case failed != nil && !q.failing:
		q.s.log.Warn("RLQS: this replica cannot renew its slices of the budgets' rates: it grants from those it holds until they end, then DENY_ALL", "replica", q.replica, "err", failed)
	case failed == nil && q.failing:
		q.s.log.Info("RLQS: this replica renews its slices again", "replica", q.replica)
	}
	q.failing = failed != nil
}

// open starts a client's stream with its metadata: its WeightHeader
// (none: 1) and its ClientHeader, whose stream still open it ends. Its
// error is a gRPC status: too many streams, a bad weight or name.
func (q *rlqsService) open(md metadata.MD) (*rlqsStream, error) {
	lt := &q.s.opts.Limits
	weight, client := md.Get(WeightHeader), ""
	if c := md.Get(ClientHeader); len(c) > 0 {
		client = strings.TrimSpace(c[len(c)-1])
		if err := lt.Check(limits.EntryBytes, ClientHeader, int64(len(client))); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	w := int64(1)
	if len(weight) > 0 {
		v, err := strconv.ParseInt(strings.TrimSpace(weight[len(weight)-1]), 10, 64)
		if err != nil || v < 1 {
			return nil, status.Errorf(codes.InvalidArgument, "%s %q: want a whole number from 1 to %d", WeightHeader, weight[len(weight)-1], lt.RLQSWeight)
		}
		if err := lt.Check(limits.RLQSWeight, WeightHeader, v); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		w = v
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	var old *rlqsStream
	if client != "" {
		old = q.clients[client]
	}
	n := int64(len(q.streams))
	if old != nil {
		n-- // it ends: a replacement is let in at the cap
	}
	if n >= lt.RLQSClients {
		return nil, status.Error(codes.ResourceExhausted, lt.Check(limits.RLQSClients, "RLQS streams open", n+1).Error())
	}
	var heir map[string]*rlqsBucket
	var heirDomain string
	if old != nil {
		close(old.replaced)
		heir, heirDomain, old.buckets = old.buckets, old.domain, nil
		if old.heir != nil { // replaced before its first message: its heir's
			heir, heirDomain, old.heir = old.heir, old.heirDomain, nil
		}
		q.closeLocked(old)
	}
	rate := lt.RLQSReports
	st := &rlqsStream{weight: w, client: client, buckets: map[string]*rlqsBucket{}, warned: map[*limits.Row]bool{},
		pace:     rlqs.NewTokenBucket(rate, rate*rlqsReportBurst, int64(time.Second/time.Microsecond), q.now()),
		out:      make(chan *rlqspb.RateLimitQuotaResponse, rlqsOutBuffer),
		replaced: make(chan struct{}), heir: heir, heirDomain: heirDomain}
	for _, b := range heir {
		b.st = st // the rounds push to the client's new stream
	}
	if client != "" {
		q.clients[client] = st
	}
	q.streams[st] = struct{}{}
	q.metrics.streams.Inc()
	return st, nil
}

// rlqsReportBurst is how many seconds of the report rate a stream may
// send at once (an Envoy sends every bucket in one message).
const rlqsReportBurst = 10

// rlqsOutBuffer is how many messages wait for a stream's sender before a
// round's push to it is dropped (an answer to a report waits instead).
const rlqsOutBuffer = 4

// close ends st: its holders are gone (their leases count until they
// end).
func (q *rlqsService) close(st *rlqsStream) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closeLocked(st)
}

// closeLocked is close under q.mu; a stream closed already is left as is.
func (q *rlqsService) closeLocked(st *rlqsStream) {
	if st.closed {
		return
	}
	q.releaseAll(st.buckets)
	q.releaseAll(st.heir)
	st.heir = nil
	st.closed = true
	delete(q.streams, st)
	if q.clients[st.client] == st {
		delete(q.clients, st.client)
	}
	q.metrics.streams.Dec()
}

// shutdown ends every stream (the server is stopping).
func (q *rlqsService) shutdown() { q.stopOnce.Do(func() { close(q.stopping) }) }

// releaseAll lets the holders of bs go.
func (q *rlqsService) releaseAll(bs map[string]*rlqsBucket) {
	for _, b := range bs {
		q.release(b)
	}
}

// inherit gives st, whose first message named its domain, the buckets of
// the stream it replaced when they are of that domain (the same client
// again: its shares and leases go on, counted once), else lets them go.
func (q *rlqsService) inherit(st *rlqsStream) {
	if st.heir == nil {
		return
	}
	if st.domain == st.heirDomain {
		st.buckets = st.heir
	} else {
		q.releaseAll(st.heir)
	}
	st.heir = nil
}

// release lets b's holder go.
func (q *rlqsService) release(b *rlqsBucket) {
	if b.holder != 0 {
		q.alloc.Close(b.holder)
		q.holders.remove(b.holder)
		b.holder = 0
	}
}

// report answers one message of st's, received at now (µs). Its error is
// a gRPC status that ends the stream: no domain in the first message, a
// domain that changes, or reports faster than the cap. Nothing else in a
// message is refused as a whole; a bucket over a cap is answered
// DENY_ALL, and the rest as usual. Reports are never validated against
// the protocol's own rules, which real clients break (time_elapsed 0,
// no usages, no domain after the first message). A report that shares a
// budget again at once pushes to the budget's other clients as a round
// does.
func (q *rlqsService) report(now int64, st *rlqsStream, msg *rlqspb.RateLimitQuotaUsageReports) (*rlqspb.RateLimitQuotaResponse, error) {
	resp, pushes, err := q.answer(now, st, msg)
	q.push(pushes)
	return resp, err
}

// answer is report's answer, and the messages for other streams it
// leaves to the caller to push.
func (q *rlqsService) answer(now int64, st *rlqsStream, msg *rlqspb.RateLimitQuotaUsageReports) (resp *rlqspb.RateLimitQuotaResponse, pushes map[*rlqsStream]*rlqspb.RateLimitQuotaResponse, err error) {
	state := q.s.state.Load()
	if state == nil {
		return nil, nil, status.Error(codes.Unavailable, errNoConfig.Error())
	}
	lt := &q.s.opts.Limits
	q.mu.Lock()
	defer q.mu.Unlock()
	if st.closed {
		return nil, nil, status.Error(codes.Canceled, "the stream has ended")
	}
	switch d := msg.GetDomain(); {
	case st.domain == "" && d == "":
		return nil, nil, status.Error(codes.InvalidArgument, "the stream's first message names no domain")
	case st.domain == "":
		if err := lt.Check(limits.EntryBytes, "domain", int64(len(d))); err != nil {
			return nil, nil, status.Error(codes.InvalidArgument, err.Error())
		}
		st.domain = d
		q.inherit(st)
	case d != "" && d != st.domain:
		return nil, nil, status.Errorf(codes.InvalidArgument, "domain %.64q: the stream's domain is %q", d, st.domain)
	}
	usages := msg.GetBucketQuotaUsages()
	if !st.pace.Take(now, int64(len(usages))) {
		q.metrics.refused.WithLabelValues(limits.RLQSReports.Name).Add(float64(len(usages)))
		return nil, nil, status.Error(codes.ResourceExhausted, lt.Over(limits.RLQSReports, fmt.Sprintf("%d bucket reports on one stream", len(usages))).Error())
	}
	q.metrics.reports.Add(float64(len(usages)))
	resp = &rlqspb.RateLimitQuotaResponse{BucketAction: make([]*rlqspb.RateLimitQuotaResponse_BucketAction, 0, len(usages))}
	pushes = map[*rlqsStream]*rlqspb.RateLimitQuotaResponse{}
	push := q.collect(pushes)
	for _, u := range usages {
		if len(u.GetBucketId().GetBucket()) == 0 {
			continue // nothing to answer: clients drop actions without a bucket id
		}
		if act := q.usage(now, st, state.cfg, u, push); act != nil {
			resp.BucketAction = append(resp.BucketAction, act)
		}
	}
	if mine := pushes[st]; mine != nil {
		// After its own answers: clients apply a message's actions in
		// order, the later one for a bucket in force.
		resp.BucketAction = append(resp.BucketAction, mine.BucketAction...)
		delete(pushes, st)
	}
	if len(resp.BucketAction) == 0 {
		return nil, pushes, nil
	}
	return resp, pushes, nil
}

// usage answers one bucket's report; nil is no answer (the server is
// warming up: rlqs.Action.Wait). A report that shares its budget again
// at once hands what it sends the budget's other clients to push.
func (q *rlqsService) usage(now int64, st *rlqsStream, cfg *rlsconfig.Config, u *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage, push func(rlqs.Holder, rlqs.Action)) *rlqspb.RateLimitQuotaResponse_BucketAction {
	id := u.GetBucketId()
	entries, err := bucketEntries(id.GetBucket(), &q.s.opts.Limits)
	if err != nil {
		return q.refuse(st, id, err)
	}
	key := bucketKey(entries)
	b := st.buckets[key]
	if b == nil {
		if n := int64(len(st.buckets)); n >= q.s.opts.Limits.RLQSBuckets {
			return q.refuse(st, id, q.s.opts.Limits.Check(limits.RLQSBuckets, "buckets on one stream", n+1))
		}
		b = &rlqsBucket{st: st, id: id, lastUse: now}
		st.buckets[key] = b
	}
	if b.cfg != cfg {
		q.match(b, st.domain, cfg, entries)
	}
	if b.holder == 0 {
		if u.GetNumRequestsAllowed() > 0 || u.GetNumRequestsDenied() > 0 {
			b.lastUse = now
		}
		if now-b.lastUse >= q.idle() {
			delete(st.buckets, key)
			q.metrics.abandon.Inc()
			return abandonAction(b.id)
		}
		q.metrics.actions.WithLabelValues(strings.ToLower(b.fixed.String())).Inc()
		return blanketAction(b.id, b.fixed, q.alloc.Config().SteadyTTL)
	}
	act, err := q.alloc.Report(now, b.budget, b.holder, st.weight, u.GetNumRequestsAllowed(), u.GetNumRequestsDenied(), push)
	if err != nil { // a budget the allocator cannot share: match refuses those
		return q.refuse(st, id, err)
	}
	switch {
	case act.Wait:
		return nil
	case act.Abandon:
		q.release(b)
		delete(st.buckets, key)
	}
	return q.actionOf(b, act)
}

// idle is how long a bucket without a share may report nothing before it
// is abandoned: the allocator's idle reports.
func (q *rlqsService) idle() int64 {
	c := q.alloc.Config()
	return c.ReportInterval.Microseconds() * int64(c.IdleReports)
}

// match finds b's rule under cfg: its entries, sorted by key, are a
// descriptor of the stream's domain. A limited rule makes b a holder of
// the rule's budget (its key as the rule names its counter), its rate
// requests_per_unit per unit (or period).
func (q *rlqsService) match(b *rlqsBucket, domain string, cfg *rlsconfig.Config, entries []rlsconfig.Entry) {
	b.cfg = cfg
	for r, c := range q.badRules {
		if c != cfg {
			delete(q.badRules, r)
		}
	}
	rule := cfg.Resolve(domain, [][]rlsconfig.Entry{entries})[0]
	var budget rlqs.Budget
	switch {
	case rule == nil || rule.Unlimited || rule.Shadow:
		q.release(b)
		b.fixed = typev3.RateLimitStrategy_ALLOW_ALL
		return
	case rule.RequestsPerUnit == 0:
		q.release(b)
		b.fixed = typev3.RateLimitStrategy_DENY_ALL
		return
	default:
		budget = rlqs.Budget{Key: rule.Key(entries), Family: domain + "\x00" + policyName(rule), Rate: rule.RequestsPerUnit, Fill: rule.Limit.Period}
	}
	if err := budget.Check(); err != nil {
		q.release(b)
		b.fixed = typev3.RateLimitStrategy_DENY_ALL
		if q.badRules[rule] == nil {
			q.badRules[rule] = cfg
			q.s.log.Warn("RLQS: a rule's rate cannot be assigned to token buckets: its buckets are denied", "domain", domain, "rule", policyName(rule), "err", err)
		}
		return
	}
	if b.holder != 0 && b.budget.Key == budget.Key {
		b.budget = budget // the same budget, maybe another rate
		return
	}
	q.release(b)
	b.holder, b.budget = q.holders.add(b), budget
}

// refuse answers a bucket over a cap: DENY_ALL (it is not tracked, and
// a client that heard nothing would apply its no-assignment default,
// ALLOW_ALL unless configured), logged once per stream and cap.
func (q *rlqsService) refuse(st *rlqsStream, id *rlqspb.BucketId, err error) *rlqspb.RateLimitQuotaResponse_BucketAction {
	row := "error"
	var ex *limits.Exceeded
	if errors.As(err, &ex) {
		row = ex.Row.Name
		if !st.warned[ex.Row] {
			st.warned[ex.Row] = true
			q.s.log.Warn("RLQS: a bucket over the service's limits is denied", "domain", st.domain, "err", err)
		}
	}
	q.metrics.refused.WithLabelValues(row).Inc()
	q.metrics.denyAll.Inc()
	return blanketAction(id, typev3.RateLimitStrategy_DENY_ALL, q.alloc.Config().SteadyTTL)
}

// bucketEntries are a BucketId's entries sorted by key: the descriptor
// it names. Its error is a *limits.Exceeded: too many entries, a key or
// value too long, or too long all together.
func bucketEntries(m map[string]string, lt *limits.Table) ([]rlsconfig.Entry, error) {
	if n := int64(len(m)); n > lt.Entries {
		return nil, lt.Check(limits.Entries, "a bucket id's entries", n)
	}
	entries := make([]rlsconfig.Entry, 0, len(m))
	size := int64(0)
	for k, v := range m {
		if n := int64(max(len(k), len(v))); n > lt.EntryBytes {
			return nil, lt.Check(limits.EntryBytes, "a bucket id's key or value", n)
		}
		size += int64(len(k) + len(v))
		entries = append(entries, rlsconfig.Entry{Key: k, Value: v})
	}
	if size > lt.KeyBytes {
		return nil, lt.Check(limits.KeyBytes, "a bucket id's keys and values", size)
	}
	slices.SortFunc(entries, func(a, b rlsconfig.Entry) int { return strings.Compare(a.Key, b.Key) })
	return entries, nil
}

// bucketKey names a bucket id on its stream: its sorted entries, each
// length-prefixed (no two ids share one).
func bucketKey(entries []rlsconfig.Entry) string {
	var b strings.Builder
	for _, e := range entries {
		b.WriteString(strconv.Itoa(len(e.Key)))
		b.WriteByte(':')
		b.WriteString(e.Key)
		b.WriteString(strconv.Itoa(len(e.Value)))
		b.WriteByte(':')
		b.WriteString(e.Value)
	}
	return b.String()
}

// round shares every budget at now and returns the pushes, one message
// per stream.
func (q *rlqsService) round(now int64) map[*rlqsStream]*rlqspb.RateLimitQuotaResponse {
	q.mu.Lock()
	defer q.mu.Unlock()
	if state := q.s.state.Load(); state != nil && state.cfg != q.roundCfg {
		q.rematch(now, state.cfg)
		q.roundCfg = state.cfg
	}
	out := map[*rlqsStream]*rlqspb.RateLimitQuotaResponse{}
	q.alloc.Round(now, q.collect(out))
	return out
}

// rematch matches every bucket to cfg's rules after a reload, so that
// the round that follows shares the new rates: a budget whose rule
// changed its rate or unit takes them at once rather than at its next
// report. A bucket whose budget changed altogether gets its new holder
// at its next report, its old lease counted until it ends.
func (q *rlqsService) rematch(now int64, cfg *rlsconfig.Config) {
	for st := range q.streams {
		for _, b := range st.buckets {
			if b.cfg == cfg {
				continue
			}
			entries, err := bucketEntries(b.id.GetBucket(), &q.s.opts.Limits)
			if err != nil {
				continue // answered at its report, as any bucket over a cap
			}
			q.match(b, st.domain, cfg, entries)
			if b.holder != 0 {
				q.alloc.Reload(now, b.budget) // match checked it
			}
		}
	}
}

// collect returns the allocator's push for a round or a report: each
// assignment goes into its stream's message in out.
func (q *rlqsService) collect(out map[*rlqsStream]*rlqspb.RateLimitQuotaResponse) func(rlqs.Holder, rlqs.Action) {
	return func(h rlqs.Holder, act rlqs.Action) {
		b := q.holders.get(h)
		if b == nil {
			return
		}
		m := out[b.st]
		if m == nil {
			m = &rlqspb.RateLimitQuotaResponse{}
			out[b.st] = m
		}
		m.BucketAction = append(m.BucketAction, q.actionOf(b, act))
	}
}

// holderSlots maps the allocator's holders to their buckets. A holder's
// number is its slot (the low 32 bits) and the slot's generation (the
// high 32, from 1), so that a slot freed and taken again never names two
// holders (the allocator counts a gone holder's lease until it ends),
// and a lookup is an index rather than a hash: a round looks up every
// grant it resends, 100,000 of them in a few tens of milliseconds.
type holderSlots struct {
	slots []holderSlot
	free  []uint32
}

type holderSlot struct {
	b   *rlqsBucket
	gen uint32
}

// add gives b a holder number.
func (hs *holderSlots) add(b *rlqsBucket) rlqs.Holder {
	var i uint32
	if n := len(hs.free); n > 0 {
		i, hs.free = hs.free[n-1], hs.free[:n-1]
	} else {
		i = uint32(len(hs.slots))
		hs.slots = append(hs.slots, holderSlot{})
	}
	s := &hs.slots[i]
	s.gen++
	if s.gen == 0 { // 2^32 holders in one slot: skip 0, which is none
		s.gen = 1
	}
	s.b = b
	return rlqs.Holder(uint64(s.gen)<<32 | uint64(i))
}

// get returns h's bucket, nil when h has been removed.
func (hs *holderSlots) get(h rlqs.Holder) *rlqsBucket {
	i := uint64(h) & (1<<32 - 1)
	if i >= uint64(len(hs.slots)) {
		return nil
	}
	if s := &hs.slots[i]; s.gen == uint32(h>>32) {
		return s.b
	}
	return nil
}

// remove frees h's slot.
func (hs *holderSlots) remove(h rlqs.Holder) {
	i := uint64(h) & (1<<32 - 1)
	if hs.get(h) == nil {
		return
	}
	hs.slots[i].b = nil
	hs.slots[i].gen++ // a late lookup of h finds nothing
	hs.free = append(hs.free, uint32(i))
}

// push hands the round's messages to their streams' senders, dropping
// those a stream has no room for (its client is slow: the grant is
// resent at its next report).
func (q *rlqsService) push(msgs map[*rlqsStream]*rlqspb.RateLimitQuotaResponse) {
	for st, m := range msgs {
		select {
		case st.out <- m:
			q.metrics.pushes.Inc()
		default:
			q.metrics.dropped.Inc()
		}
	}
}

// run has rounds every Round until ctx ends.
func (q *rlqsService) run(ctx context.Context) {
	t := time.NewTicker(q.alloc.Config().Round)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			q.renew(ctx, q.now())
			q.push(q.round(q.now()))
		}
	}
}

// actionOf is b's action for act: the one sent last when act is the
// same (a refresh: rounds resend most grants unchanged every few
// seconds), else a new one. A message is only read once made (marshalled,
// perhaps by several streams' senders at once), so it may be shared.
func (q *rlqsService) actionOf(b *rlqsBucket, act rlqs.Action) *rlqspb.RateLimitQuotaResponse_BucketAction {
	if b.sentMsg != nil && b.sent == act {
		q.count(act)
		return b.sentMsg
	}
	m := q.action(b.id, act)
	b.sent, b.sentMsg = act, m
	return m
}

// count counts act in the actions' metric.
func (q *rlqsService) count(act rlqs.Action) {
	switch {
	case act.Abandon:
		q.metrics.abandon.Inc()
	case act.DenyAll():
		q.metrics.denyAll.Inc()
	default:
		q.metrics.tokenBucket.Inc()
	}
}

// action is an allocator's Action as the protocol says it, for bucket id.
func (q *rlqsService) action(id *rlqspb.BucketId, act rlqs.Action) *rlqspb.RateLimitQuotaResponse_BucketAction {
	q.count(act)
	switch {
	case act.Abandon:
		return abandonAction(id)
	case act.DenyAll():
		return blanketAction(id, typev3.RateLimitStrategy_DENY_ALL, act.TTL)
	}
	return assignAction(id, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens:     uint32(act.Burst),
		TokensPerFill: wrapperspb.UInt32(uint32(act.Tokens)),
		FillInterval:  durationpb.New(act.Fill),
	}}}, act.TTL)
}

func blanketAction(id *rlqspb.BucketId, rule typev3.RateLimitStrategy_BlanketRule, ttl time.Duration) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return assignAction(id, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}}, ttl)
}

func assignAction(id *rlqspb.BucketId, s *typev3.RateLimitStrategy, ttl time.Duration) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return &rlqspb.RateLimitQuotaResponse_BucketAction{BucketId: id,
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
			AssignmentTimeToLive: durationpb.New(ttl),
			RateLimitStrategy:    s,
		}}}
}

func abandonAction(id *rlqspb.BucketId) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return &rlqspb.RateLimitQuotaResponse_BucketAction{BucketId: id,
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction{}}}
}
