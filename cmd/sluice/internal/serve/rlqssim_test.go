package serve

import (
	"container/heap"
	"context"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice/cmd/sluice/internal/rlqs"
	"github.com/sluice-go/sluice/internal/testsupport/redistest"
	"github.com/sluice-go/sluice/internal/testsupport/testenv"
	"github.com/sluice-go/sluice/store"
)

// This file is a simulator of RLQS clients, faithful to what the brief
// (../shared/RLQS.md) found in Envoy's filter and in gRPC's proposal A77,
// driving the service's core (rlqsService: report, round, open, close)
// on a simulated clock, every message through its wire encoding. Time is
// µs of the simulation; nothing sleeps.

const simSec = int64(time.Second / time.Microsecond)

// A simProfile is how a client behaves.
type simProfile int

const (
	// envoyProfile: Envoy as it is: a report of every bucket every 5s
	// with the domain, time_elapsed in whole seconds, a new bucket
	// reported at once (dropped with the stream down), no report on an
	// assignment, requests_per_time_unit ignored, limiters kept when
	// (max_tokens, tokens_per_fill, fill_interval.nanos) are unchanged
	// and else started full, TTLs in whole seconds, expiry to the
	// fallback for its timeout then to the no-assignment default (the
	// bucket kept), reconnection at the next tick.
	envoyProfile simProfile = iota
	// a77Profile: gRPC's proposal: the domain in a stream's first message
	// only, a timer per bucket, time_elapsed in ns, a report at once when
	// an assignment is replaced, exact TTLs (unset: never), an expired
	// bucket dropped at its next report, reconnection with backoff.
	a77Profile
)

// A simStrategy is what a client enforces for a bucket: a blanket rule
// or a token bucket (per the budget's fill interval).
type simStrategy struct {
	allow, deny   bool
	tokens, burst int64
	fill          int64 // µs
}

var (
	simDenyAll  = simStrategy{deny: true}
	simAllowAll = simStrategy{allow: true}
)

// simOptions are a client's configuration, as its RLQS filter's.
type simOptions struct {
	profile      simProfile
	weight       int64
	noAssignment simStrategy  // no_assignment_behavior (default ALLOW_ALL)
	fallback     *simStrategy // expired_assignment_behavior's fallback_rate_limit
	fallbackFor  int64        // its timeout, µs
	reportEvery  int64        // µs: envoy 5s; A77 per bucket
	clockRate    float64      // the client's clock runs at this rate (1: true time)
}

// simBucket is a client's bucket: its id, counters and enforcement.
type simBucket struct {
	id      map[string]string
	budget  string
	allowed uint64
	denied  uint64
	last    int64 // µs, the last report's (local clock)
	// enforcement
	assigned   bool // an assignment is in force (else fallback or default)
	inFallback bool // the expired fallback is in force
	expired    bool // A77: expired, dropped at its next report
	params     *typev3.TokenBucket
	blanket    typev3.RateLimitStrategy_BlanketRule
	tb         *rlqs.TokenBucket // nil for a blanket rule
	allowAll   bool              // an ALLOW_ALL in force
	gen        int               // timers of an earlier state are stale
	limiter    int               // index of its open limiter in the budget's trace, -1 none
	timerGen   int               // A77 per-bucket timer
}

// simClient is one client (one process, one domain, one stream at a
// time).
type simClient struct {
	s       *sim
	name    string
	domain  string
	o       simOptions
	buckets []*simBucket
	byKey   map[string]*simBucket
	// rep is the replica it connects to (another when that one is down,
	// as a load balancer would send it); the stream: its server side
	// while it is open, on replica srep
	rep        int
	srep       *simReplica
	stream     *rlqsStream
	streamGen  int
	sentFirst  bool // A77: the domain was sent on this stream
	started    bool // the first bucket opened the stream and the timer
	backoff    int64
	blackholed bool  // messages both ways are lost, the stream stays open
	delay      int64 // more latency on what the server sends
	admitted   int64 // requests it admitted, all buckets
}

// budgetTrace is what happened to one budget: the limiters clients
// enforced and the requests they admitted.
type budgetTrace struct {
	limiters  []rlqs.Limiter
	fills     []int64 // each limiter's fill interval, µs
	admitted  []int64
	unbounded []int64 // admissions under ALLOW_ALL
	demanded  int64   // requests that arrived
}

// simReplica is one replica of the server.
type simReplica struct {
	svc  *service
	q    *rlqsService
	down bool // the replica is restarting: streams cannot open
}

// sim is the event loop, the servers and the clients.
type sim struct {
	t      testing.TB
	now    int64
	seq    int
	events simEvents
	// reps are the replicas (one unless newSimReplicas), over store (nil:
	// each its own memstore); svc and q are the first's.
	reps    []*simReplica
	store   func() store.Store
	svc     *service
	q       *rlqsService
	clients []*simClient
	streams map[*rlqsStream]*simClient
	trace   map[string]*budgetTrace
	rng     *rand.Rand
	latency int64
	opts    RLQSOptions
	rules   string
}

type simEvent struct {
	at  int64
	seq int
	do  func()
}

type simEvents []simEvent

func (e simEvents) Len() int { return len(e) }
func (e simEvents) Less(i, j int) bool {
	return e[i].at < e[j].at || e[i].at == e[j].at && e[i].seq < e[j].seq
}
func (e simEvents) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *simEvents) Push(x any)   { *e = append(*e, x.(simEvent)) }
func (e *simEvents) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// at runs do at t (µs).
func (s *sim) at(t int64, do func()) {
	s.seq++
	heap.Push(&s.events, simEvent{at: max(t, s.now), seq: s.seq, do: do})
}

// run runs events until end.
func (s *sim) run(end int64) {
	for len(s.events) > 0 && s.events[0].at <= end {
		e := heap.Pop(&s.events).(simEvent)
		s.now = e.at
		e.do()
	}
	s.now = end
}

// newSim starts a server on rules (a rules file's YAML) with o, its
// rounds every o.Round from 0.
func newSim(t testing.TB, rules string, o RLQSOptions, seed uint64) *sim {
	return newSimReplicas(t, rules, o, seed, 1, nil)
}

// newSimReplicas starts n replicas, each over the store st returns (nil:
// a memstore each), their rounds every o.Round from 0, each round after
// the replica renewed its slices (over Redis).
func newSimReplicas(t testing.TB, rules string, o RLQSOptions, seed uint64, n int, st func() store.Store) *sim {
	t.Helper()
	s := &sim{t: t, streams: map[*rlqsStream]*simClient{}, trace: map[string]*budgetTrace{},
		rng: rand.New(rand.NewPCG(seed, 77)), latency: 2000, opts: o, rules: rules, store: st}
	for i := range n {
		s.reps = append(s.reps, &simReplica{})
		s.boot(i)
	}
	round := o.Round
	if round == 0 {
		round = rlqs.DefaultRound
	}
	var tick func()
	tick = func() {
		for _, r := range s.reps {
			if r.down {
				continue
			}
			r.q.renew(context.Background(), s.now)
			for st, m := range r.q.round(s.now) {
				if c := s.streams[st]; c != nil {
					c.receive(m)
				}
			}
		}
		s.at(s.now+round.Microseconds(), tick)
	}
	s.at(round.Microseconds(), tick)
	return s
}

// boot starts a fresh replica i: a service with the rules, and an RLQS
// core on the simulation's clock.
func (s *sim) boot(i int) {
	o := Options{Config: writeConfig(s.t, map[string]string{"rules.yaml": s.rules}), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if s.store != nil {
		o.Store = s.store()
	}
	if err := o.setDefaults(); err != nil {
		s.t.Fatal(err)
	}
	svc := newService(o)
	if err := svc.reload(); err != nil {
		s.t.Fatal(err)
	}
	ro := s.opts
	ro.Now = func() time.Time { return time.UnixMicro(s.now) }
	q, err := newRLQSService(svc, &ro)
	if err != nil {
		s.t.Fatal(err)
	}
	s.reps[i].svc, s.reps[i].q = svc, q
	if i == 0 {
		s.svc, s.q = svc, q
	}
}

// restart stops the first replica at once (every stream on it ends) and
// boots a fresh one, with nothing of the old's, after downtime.
func (s *sim) restart(downtime int64) { s.restartReplica(0, downtime) }

// restartReplica is restart of replica i.
func (s *sim) restartReplica(i int, downtime int64) {
	r := s.reps[i]
	for _, c := range s.clients {
		if c.srep == r {
			c.lost()
		}
	}
	r.down = true
	s.at(s.now+downtime, func() { s.boot(i); r.down = false })
}

// move has client c talk to replica i: its stream ends, and it opens one
// to i when it next reports (Envoy) or reconnects (A77).
func (c *simClient) move(i int) {
	c.kill()
	c.rep = i
}

// addClient adds a client.
func (s *sim) addClient(name, domain string, o simOptions) *simClient {
	if o.weight == 0 {
		o.weight = 1
	}
	if o.clockRate == 0 {
		o.clockRate = 1
	}
	if o.reportEvery == 0 {
		o.reportEvery = 5 * simSec
	}
	c := &simClient{s: s, name: name, domain: domain, o: o, byKey: map[string]*simBucket{}}
	s.clients = append(s.clients, c)
	return c
}

// demand has the client send requests for the bucket id (which names its
// budget in "name") at rate(t) a second, from t on.
func (c *simClient) demand(id map[string]string, rate func(t int64) float64) {
	key := bucketKeyOf(id)
	var next func()
	next = func() {
		r := rate(c.s.now)
		if r <= 0 {
			c.s.at(c.s.now+simSec/10, next)
			return
		}
		c.request(id, key)
		gap := int64(-math.Log(1-c.s.rng.Float64()) / r * float64(simSec))
		c.s.at(c.s.now+max(gap, 1), next)
	}
	c.s.at(c.s.now, next)
}

func bucketKeyOf(id map[string]string) string {
	keys := make([]string, 0, len(id))
	for k := range id {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "=" + id[k] + ";")
	}
	return b.String()
}

// local is a local duration d as true time (the client's clock runs at
// its rate).
func (c *simClient) local(d int64) int64 { return int64(float64(d) / c.o.clockRate) }

// elapsed is true time t on the client's clock.
func (c *simClient) clock(t int64) int64 { return int64(float64(t) * c.o.clockRate) }

func (s *sim) budget(name string) *budgetTrace {
	bt := s.trace[name]
	if bt == nil {
		bt = &budgetTrace{}
		s.trace[name] = bt
	}
	return bt
}

// request is one request for bucket id at now: decided by what the
// bucket enforces, a new bucket created (and reported at once).
func (c *simClient) request(id map[string]string, key string) {
	b := c.byKey[key]
	bt := c.s.budget(id["name"])
	bt.demanded++
	if b == nil {
		b = &simBucket{id: id, budget: id["name"], limiter: -1, last: c.clock(c.s.now)}
		c.byKey[key] = b
		c.buckets = append(c.buckets, b)
		c.apply(b, c.o.noAssignment, false)
		allowed := c.take(b, bt)
		if allowed {
			b.allowed++
		} else {
			b.denied++
		}
		c.start()
		if c.o.profile == a77Profile {
			c.bucketTimer(b)
		}
		c.send([]*simBucket{b})
		return
	}
	if c.take(b, bt) {
		b.allowed++
	} else {
		b.denied++
	}
}

// take decides one request by what b enforces, and records an admission.
func (c *simClient) take(b *simBucket, bt *budgetTrace) bool {
	switch {
	case b.allowAll:
		bt.unbounded = append(bt.unbounded, c.s.now)
		return true
	case b.tb != nil && b.tb.Take(c.s.now, 1):
		bt.admitted = append(bt.admitted, c.s.now)
		c.admitted++
		return true
	}
	return false
}

// apply puts strategy st in force for b (an assignment when assigned),
// closing the limiter in force and opening the new one.
func (c *simClient) apply(b *simBucket, st simStrategy, fallback bool) {
	c.closeLimiter(b)
	b.tb, b.allowAll, b.params = nil, st.allow, nil
	if !st.allow && !st.deny {
		b.tb = rlqs.NewTokenBucket(st.tokens, st.burst, st.fill, c.s.now)
		c.openLimiter(b, st.tokens, st.burst, st.fill, fallback)
	}
}

func (c *simClient) openLimiter(b *simBucket, tokens, burst, fill int64, fallback bool) {
	bt := c.s.budget(b.budget)
	bt.limiters = append(bt.limiters, rlqs.Limiter{Start: c.s.now, End: math.MaxInt64 / 4, Tokens: tokens, Burst: burst, Fallback: fallback})
	bt.fills = append(bt.fills, fill)
	b.limiter = len(bt.limiters) - 1
}

func (c *simClient) closeLimiter(b *simBucket) {
	if b.limiter >= 0 {
		c.s.budget(b.budget).limiters[b.limiter].End = c.s.now
		b.limiter = -1
	}
}

// start opens the stream and the report timer at the first bucket.
func (c *simClient) start() {
	if c.started {
		return
	}
	c.started = true
	c.open()
	if c.o.profile == envoyProfile {
		var tick func()
		tick = func() {
			if c.stream == nil && !c.open() {
				c.buildReport(c.buckets) // the counters are lost
			} else {
				c.send(c.buckets)
			}
			c.s.at(c.s.now+c.local(c.o.reportEvery), tick)
		}
		c.s.at(c.s.now+c.local(c.o.reportEvery), tick)
	}
}

// bucketTimer is an A77 bucket's own report timer.
func (c *simClient) bucketTimer(b *simBucket) {
	b.timerGen++
	gen := b.timerGen
	var tick func()
	tick = func() {
		if gen != b.timerGen || c.byKey[bucketKeyOf(b.id)] != b {
			return
		}
		if b.expired {
			c.drop(b)
			return
		}
		if c.stream == nil {
			c.reopen()
			c.buildReport([]*simBucket{b})
		} else {
			c.send([]*simBucket{b})
		}
		c.s.at(c.s.now+c.local(c.o.reportEvery), tick)
	}
	c.s.at(c.s.now+c.local(c.o.reportEvery), tick)
}

// reopen is A77's reconnection, with a doubling backoff.
func (c *simClient) reopen() {
	if c.backoff > 0 {
		return
	}
	c.backoff = simSec
	var try func()
	try = func() {
		if c.stream != nil || c.open() {
			c.backoff = 0
			return
		}
		c.backoff = min(2*c.backoff, 30*simSec)
		c.s.at(c.s.now+c.backoff, try)
	}
	c.s.at(c.s.now+c.backoff, try)
}

// open opens a stream to the client's replica, or when that one is down
// to the next that is up; false when every one is down.
func (c *simClient) open() bool {
	var r *simReplica
	for k := range c.s.reps {
		if x := c.s.reps[(c.rep+k)%len(c.s.reps)]; !x.down {
			r = x
			break
		}
	}
	if r == nil {
		return false
	}
	st, err := r.q.open(metadata.Pairs(WeightHeader, strconv.FormatInt(c.o.weight, 10), ClientHeader, c.name))
	if err != nil {
		c.s.t.Fatalf("%s: open: %v", c.name, err)
	}
	c.stream, c.srep, c.sentFirst = st, r, false
	c.streamGen++
	c.s.streams[st] = c
	return true
}

// lost is the stream's end as the client sees it (Envoy's
// onRemoteClose): the stream is gone, state and timers stay.
func (c *simClient) lost() {
	if c.stream == nil {
		return
	}
	delete(c.s.streams, c.stream)
	c.stream = nil
	c.streamGen++
	if c.o.profile == a77Profile {
		c.reopen()
	}
}

// kill ends the stream on both sides.
func (c *simClient) kill() {
	if c.stream != nil && !c.srep.down {
		c.srep.q.close(c.stream)
	}
	c.lost()
}

// buildReport builds the report of bs, resetting their counters.
func (c *simClient) buildReport(bs []*simBucket) *rlqspb.RateLimitQuotaUsageReports {
	m := &rlqspb.RateLimitQuotaUsageReports{}
	if c.o.profile == envoyProfile || !c.sentFirst {
		m.Domain = c.domain
	}
	now := c.clock(c.s.now)
	for _, b := range bs {
		el := now - b.last
		d := durationpb.New(time.Duration(el) * time.Microsecond)
		if c.o.profile == envoyProfile {
			d = &durationpb.Duration{Seconds: el / simSec}
		}
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: &rlqspb.BucketId{Bucket: b.id}, TimeElapsed: d, NumRequestsAllowed: b.allowed, NumRequestsDenied: b.denied})
		b.allowed, b.denied, b.last = 0, 0, now
	}
	return m
}

// send reports bs on the stream (dropped when it is down).
func (c *simClient) send(bs []*simBucket) {
	m := c.buildReport(bs)
	if c.stream == nil || len(bs) == 0 {
		return
	}
	c.sentFirst = true
	wire, err := proto.Marshal(m)
	if err != nil {
		c.s.t.Fatal(err)
	}
	if c.blackholed {
		return
	}
	st, gen, r := c.stream, c.streamGen, c.srep
	c.s.at(c.s.now+c.s.latency, func() {
		if c.streamGen != gen || r.down {
			return // the stream ended while the message was on its way
		}
		var in rlqspb.RateLimitQuotaUsageReports
		if err := proto.Unmarshal(wire, &in); err != nil {
			c.s.t.Fatal(err)
		}
		resp, pushes, err := r.q.answer(c.s.now, st, &in)
		if err != nil {
			c.s.t.Errorf("%s: the server ended the stream: %v", c.name, err)
			c.kill()
			return
		}
		if resp != nil {
			c.receive(resp)
		}
		for st, m := range pushes {
			if other := c.s.streams[st]; other != nil {
				other.receive(m)
			}
		}
	})
}

// receive delivers a server's message to the client, after the latency
// and the client's delay (nothing when blackholed, or once the stream
// it came on has ended).
func (c *simClient) receive(m *rlqspb.RateLimitQuotaResponse) {
	if c.blackholed {
		return
	}
	wire, err := proto.Marshal(m)
	if err != nil {
		c.s.t.Fatal(err)
	}
	gen := c.streamGen
	c.s.at(c.s.now+c.s.latency+c.delay, func() {
		if c.streamGen != gen {
			return
		}
		var in rlqspb.RateLimitQuotaResponse
		if err := proto.Unmarshal(wire, &in); err != nil {
			c.s.t.Fatal(err)
		}
		c.actions(&in)
	})
}

// actions applies a response's actions in order.
func (c *simClient) actions(m *rlqspb.RateLimitQuotaResponse) {
	var replaced []*simBucket
	for _, a := range m.GetBucketAction() {
		id := a.GetBucketId().GetBucket()
		if len(id) == 0 {
			continue
		}
		b := c.byKey[bucketKeyOf(id)]
		if b == nil {
			continue
		}
		if a.GetAbandonAction() != nil {
			c.drop(b)
			continue
		}
		qa := a.GetQuotaAssignmentAction()
		if qa == nil {
			continue
		}
		st := qa.GetRateLimitStrategy()
		switch {
		case st.GetTokenBucket() != nil:
			tb := st.GetTokenBucket()
			same := b.assigned && b.params != nil && b.params.GetMaxTokens() == tb.GetMaxTokens() &&
				b.params.GetTokensPerFill().GetValue() == tb.GetTokensPerFill().GetValue() &&
				b.params.GetFillInterval().GetNanos() == tb.GetFillInterval().GetNanos()
			if c.o.profile == a77Profile {
				same = same && b.params.GetFillInterval().GetSeconds() == tb.GetFillInterval().GetSeconds()
			}
			if !same {
				fill := tb.GetFillInterval().GetSeconds() * simSec // Envoy divides by the whole seconds
				if c.o.profile == a77Profile {
					fill = tb.GetFillInterval().AsDuration().Microseconds()
				}
				c.apply(b, simStrategy{tokens: int64(tb.GetTokensPerFill().GetValue()), burst: int64(tb.GetMaxTokens()), fill: fill}, false)
				b.params = tb
				replaced = append(replaced, b)
			}
		case st.GetStrategy() != nil && st.GetRequestsPerTimeUnit() == nil:
			rule := st.GetBlanketRule()
			if !b.assigned || b.params != nil || b.blanket != rule || b.inFallback {
				if rule == typev3.RateLimitStrategy_ALLOW_ALL {
					c.apply(b, simAllowAll, false)
				} else {
					c.apply(b, simDenyAll, false)
				}
				replaced = append(replaced, b)
			}
			b.blanket = rule
		default:
			continue // requests_per_time_unit, or no strategy: skipped, no TTL restart
		}
		b.assigned, b.inFallback, b.expired = true, false, false
		c.ttl(b, qa.GetAssignmentTimeToLive())
	}
	if c.o.profile == a77Profile && len(replaced) > 0 && c.stream != nil {
		c.send(replaced)
	}
}

// ttl starts b's assignment's timer.
func (c *simClient) ttl(b *simBucket, d *durationpb.Duration) {
	b.gen++
	gen := b.gen
	var after int64
	switch {
	case c.o.profile == envoyProfile:
		after = d.GetSeconds() * simSec // unset or under a second: at once
	case d == nil:
		return // A77: no expiry
	default:
		after = d.AsDuration().Microseconds()
	}
	c.s.at(c.s.now+c.local(after), func() {
		if gen != b.gen || c.byKey[bucketKeyOf(b.id)] != b {
			return
		}
		c.expire(b)
	})
}

// expire is an assignment's TTL running out.
func (c *simClient) expire(b *simBucket) {
	b.assigned = false
	if c.o.profile == a77Profile && c.o.fallback == nil {
		b.expired = true
		c.apply(b, c.o.noAssignment, false)
		return
	}
	if c.o.fallback == nil {
		c.apply(b, c.o.noAssignment, false)
		return
	}
	c.apply(b, *c.o.fallback, true)
	b.params, b.inFallback = nil, true
	b.gen++
	gen := b.gen
	c.s.at(c.s.now+c.local(c.o.fallbackFor/simSec*simSec), func() {
		if gen != b.gen || c.byKey[bucketKeyOf(b.id)] != b {
			return
		}
		b.inFallback = false
		if c.o.profile == a77Profile {
			b.expired = true
		}
		c.apply(b, c.o.noAssignment, false)
	})
}

// drop erases b (an abandon, or A77's expiry): its counts are lost.
func (c *simClient) drop(b *simBucket) {
	c.closeLimiter(b)
	b.gen++
	b.timerGen++
	delete(c.byKey, bucketKeyOf(b.id))
	c.buckets = slices.DeleteFunc(c.buckets, func(x *simBucket) bool { return x == b })
}

// finish closes every open limiter at the end of the run.
func (s *sim) finish() {
	for _, c := range s.clients {
		for _, b := range c.buckets {
			c.closeLimiter(b)
		}
	}
}

// checkBound checks every budget's trace against the bound and the rates
// in force, and fails the test on an excess.
func (s *sim) checkBound(rates map[string]int64, fill int64) {
	s.t.Helper()
	s.finish()
	names := make([]string, 0, len(s.trace))
	for n := range s.trace {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		bt := s.trace[n]
		rate := rates[n]
		if len(bt.unbounded) > 0 {
			s.t.Errorf("budget %s: %d admissions under ALLOW_ALL (unbounded)", n, len(bt.unbounded))
		}
		if at, sum, ok := rlqs.CheckRates(rate, bt.limiters); !ok {
			s.t.Errorf("budget %s: at %dµs the clients enforce %d tokens per fill, over %d", n, at, sum, rate)
		}
		v, err := rlqs.Check(rate, fill, bt.limiters, bt.admitted)
		if err != nil {
			s.t.Fatal(err)
		}
		if v != nil {
			s.t.Errorf("budget %s: %v", n, v)
		}
	}
}

// threeClients adds clients a, b and c, DENY_ALL without an assignment,
// asking 20, 60 and 200 a second of budget b0.
func (s *sim) threeClients() {
	deny := simOptions{noAssignment: simDenyAll}
	for i, r := range []float64{20, 60, 200} {
		c := s.addClient(string(rune('a'+i)), "sim", deny)
		c.demand(map[string]string{"name": "b0"}, func(int64) float64 { return r })
	}
}

// reloadRules has replica i load rules in place of its own (and a
// replica booted later too).
func (s *sim) reloadRules(i int, rules string) {
	s.t.Helper()
	s.rules = rules
	r := s.reps[i]
	if err := os.WriteFile(filepath.Join(r.svc.opts.Config, "rules.yaml"), []byte(rules), 0o644); err != nil {
		s.t.Fatal(err)
	}
	if err := r.svc.reload(); err != nil {
		s.t.Fatal(err)
	}
}

// checkReload checks budget n's trace across a reload, its rates per fill
// (µs, which every limiter's fill interval divides): over the whole run
// the larger of the rates before (from) and after (to) it, and from
// settled on (the old leases ended) the new rate alone, the limiters in
// force at settled counted from it (at most full there).
func (s *sim) checkReload(n string, fill, from, to, settled int64) {
	s.t.Helper()
	s.finish()
	bt := s.trace[n]
	if bt == nil || len(bt.admitted) == 0 {
		s.t.Fatalf("budget %s: nothing admitted", n)
	}
	if len(bt.unbounded) > 0 {
		s.t.Errorf("budget %s: %d admissions under ALLOW_ALL (unbounded)", n, len(bt.unbounded))
	}
	ls := slices.Clone(bt.limiters)
	for i := range ls {
		if fill%bt.fills[i] != 0 {
			s.t.Fatalf("limiter fill %dµs does not divide %dµs", bt.fills[i], fill)
		}
		ls[i].Tokens *= fill / bt.fills[i]
	}
	var late []rlqs.Limiter
	for _, l := range ls {
		if l.End > settled {
			l.Start = max(l.Start, settled)
			late = append(late, l)
		}
	}
	var lateAdmitted []int64
	for _, t := range bt.admitted {
		if t >= settled {
			lateAdmitted = append(lateAdmitted, t)
		}
	}
	for _, c := range []struct {
		what     string
		rate     int64
		ls       []rlqs.Limiter
		admitted []int64
	}{
		{"the whole run", max(from, to), ls, bt.admitted},
		{"once the old leases ended", to, late, lateAdmitted},
	} {
		if at, sum, ok := rlqs.CheckRates(c.rate, c.ls); !ok {
			s.t.Errorf("budget %s, %s: at %dµs the clients enforce %d tokens per %dµs, over %d", n, c.what, at, sum, fill, c.rate)
		}
		v, err := rlqs.Check(c.rate, fill, c.ls, c.admitted)
		if err != nil {
			s.t.Fatal(err)
		}
		if v != nil {
			s.t.Errorf("budget %s, %s: %v", n, c.what, v)
		}
		s.t.Logf("budget %s, %s: %d admitted, within %d per %dµs", n, c.what, len(c.admitted), c.rate, fill)
	}
}

// Rules reloaded mid-run, the clients asking more than the budget: a
// lowered rate, and a unit changed (a minute to a second, and the rate
// lowered with it; over two replicas on Redis, and there raised, the
// replicas reloading 5s apart). Over the whole run the clients admit within the
// bound of the larger rate, and within the new rate's once the reload has
// reached them (one replica: a round and the slack, since the round
// shares the new rate without waiting for reports; replicas: a report
// interval, a round and a lease after the last one reloaded): 0 windows
// over either.
func TestRLQSSimReload(t *testing.T) {
	for _, tc := range []struct {
		name, after string
		from, to    int64 // per minute
		replicas    int   // over Redis when more than 1
	}{
		{"lowered", "{unit: minute, requests_per_unit: 1500}", 6000, 1500, 1},
		{"unit", "{unit: second, requests_per_unit: 50}", 6000, 3000, 1},
		{"unit/replicas=2", "{unit: second, requests_per_unit: 50}", 6000, 3000, 2},
		// the second replica 5s after the first, the rate raised: the
		// first's new slice counts the second's old one
		{"unit raised/replicas=2", "{unit: second, requests_per_unit: 200}", 6000, 12000, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var st func() store.Store
			if tc.replicas > 1 {
				st = redisStores(t, redistest.Standalone(t).Client())
			}
			s := newSimReplicas(t, simRules, RLQSOptions{}, testenv.SeedOr(t, 1), tc.replicas, st)
			s.threeClients()
			for i, c := range s.clients {
				c.rep = i % tc.replicas
			}
			reload, stagger := 42*simSec+simSec/2, 5*simSec // between reports
			for i := range tc.replicas {
				s.run(reload + int64(i)*stagger)
				s.reloadRules(i, strings.Replace(simRules, "{unit: minute, requests_per_unit: 6000}", tc.after, 1))
			}
			s.run(100 * simSec)
			c := s.q.alloc.Config()
			// One replica: the round after the reload cuts every client
			// to the new rate (what it grants comes from the new rate less
			// the old leases), and the cuts reach them within the slack.
			// Replicas: their slices come down to the new rate as they
			// renew them (a round or two) and cut their clients, whose old
			// leases end a lease later.
			settled := reload + (c.Round + c.Slack).Microseconds()
			if tc.replicas > 1 {
				settled = reload + int64(tc.replicas-1)*stagger + (5*time.Second + c.TTL + c.Slack + c.Round).Microseconds()
			}
			var after int
			for _, at := range s.trace["b0"].admitted {
				if at >= settled {
					after++
				}
			}
			perMinute := float64(after) * 60 / float64(100*simSec-settled) * float64(simSec)
			if perMinute < 0.8*float64(tc.to) {
				t.Errorf("after the reload %.0f a minute admitted, want most of the new rate %d", perMinute, tc.to)
			}
			s.checkReload("b0", 60*simSec, tc.from, tc.to, settled)
		})
	}
}
