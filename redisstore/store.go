// Package redisstore keeps sluice's limiter state in Redis or Valkey, so that
// every process of a service spends one budget.
//
// Each decision is one atomic Lua script (scripts/*.lua, one per algorithm,
// each a line-by-line mirror of its step in package algo, so this store and
// memstore give identical decisions), sent as EVALSHA with EVAL on NOSCRIPT
// (and for good when the ACL user may not run EVALSHA): one round trip. The
// key's state is one string value whose TTL ends when the state is
// equivalent to fresh, plus a margin; the script sets value and TTL
// together, so no key is left without one, and gives a TTL to any key it
// finds without.
//
// Time is the server's TIME by default, so application servers with skewed
// clocks agree; WithCallerTime supplies it from the caller instead (managed
// services that refuse TIME in scripts, replays).
//
// Concurrent decisions are batched into pipelines (one round trip for many
// decisions), and the single decisions of a batch that may share a script
// into one multi-decision script (scripts/multi.lua) that makes them in
// turn: it multiplies throughput under load. WithoutBatching sends each
// decision on its own for strict per-call latency.
//
// # Routing
//
// Which keys may share a script is the client's to say (Router): on one
// server, any; on a Redis Cluster, keys of one hash slot; on a go-redis Ring,
// keys the Ring puts on one shard. GoRedis says it for every go-redis
// client, so New(GoRedis(c)) and NewGoRedis(c) are right for a Client, a
// Sentinel failover client, a ClusterClient and a Ring alike. A Client that
// does not say (not a Router) never has two keys named in one script; wrap
// it with OneNode or BySlot when it can. A composite whose keys are not in
// one group is taken part by part (see Store.TakeAll). A Ring moves keys when
// a shard goes down or comes back; limits then restart on the keys that
// moved.
//
// # Errors and the failure policy
//
// When Redis cannot be reached or does not answer in time (connection
// refused or reset, a timeout, the store's own WithTimeout, LOADING,
// CLUSTERDOWN, MASTERDOWN, READONLY after a failover, TRYAGAIN, BUSY) the
// failure policy decides: FailClosed returns ErrStoreUnavailable, FailOpen
// allows, FailLocal decides with an in-process memstore until Redis is back;
// a decision made by the policy is flagged Result.Degraded. Everything else
// is returned as an error, never turned into an admission: the caller's own
// context that ended (its error, context.Canceled or
// context.DeadlineExceeded; a context ended before the call sends nothing),
// a key holding foreign data
// (ErrForeignKey), Redis out of memory (ErrOutOfMemory), an ACL refusal
// (ErrNoPermission; for TIME, use WithCallerTime), a closed store
// (ErrClosed), an invalid request. A decision's error is its own: merged
// with others in one script, it fails alone and writes nothing.
//
// WithTimeout bounds how long a hung Redis can hold a call. A go-redis
// client with ContextTimeoutEnabled ends its calls by their deadline, and
// the store then sends a lone caller's decision on the caller's goroutine;
// without it go-redis waits out its ReadTimeout on a Redis that hangs, and
// the store keeps its timeout by handing each call to another goroutine.
//
// # Eviction
//
// A limiter key is state, not a cache entry: a Redis that evicts it forgets
// what was spent, and the key's next decision admits as on a fresh key. The
// store needs maxmemory-policy noeviction (the default), or a Redis of its
// own; every key it writes has a TTL, so the volatile-* policies evict them
// too. Store.CheckConfig checks it at start-up. Under noeviction a full
// Redis refuses writes, and the decisions that would write return
// ErrOutOfMemory.
package redisstore

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/memstore"
)

//go:embed scripts/*.lua
var scriptFiles embed.FS

// scripts holds each algorithm's script by algo.Kind: the prelude, the guard,
// the algorithm's step and the single-decision main; multis the same with the
// multi-decision main. composite holds every step and the composite main.
var (
	scripts      [algo.AlignedWindow + 1]*Script
	multis       [algo.AlignedWindow + 1]*Script
	composite    *Script
	refundScript *Script
	resetScript  *Script
)

var stepFiles = [...]string{
	algo.TokenBucket:   "token_bucket.lua",
	algo.GCRA:          "gcra.lua",
	algo.LeakyBucket:   "leaky_bucket.lua",
	algo.FixedWindow:   "fixed_window.lua",
	algo.AlignedWindow: "aligned_window.lua",
	algo.SlidingWindow: "sliding_window.lua",
	algo.SlidingLog:    "sliding_log.lua",
}

func init() {
	// Each script defines only the helpers its steps use: Lua recreates
	// every local function on every call. Every step reads the states other
	// limits wrote (convert.lua). Digests are computed on first use
	// (Script.SHA), not here.
	prelude, timestamp, guard := mustRead("prelude.lua")+mustRead("convert.lua"), mustRead("timestamp.lua"), mustRead("guard.lua")
	stepOf := func(k algo.Kind) string {
		if k == algo.GCRA || k == algo.LeakyBucket {
			return timestamp + mustRead(stepFiles[k])
		}
		return mustRead(stepFiles[k])
	}
	all := prelude + guard + timestamp
	for _, k := range algo.Kinds() {
		scripts[k] = NewScript(prelude + guard + stepOf(k) + mustRead("single.lua"))
		multis[k] = NewScript(prelude + guard + stepOf(k) + mustRead("multi.lua"))
		all += mustRead(stepFiles[k])
	}
	composite = NewScript(all + mustRead("composite.lua"))
	refundScript = NewScript(prelude + mustRead("refund.lua"))
	resetScript = NewScript(mustRead("reset.lua"))
}

func mustRead(name string) string {
	b, err := scriptFiles.ReadFile("scripts/" + name)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// ScriptFor returns the script that decides for algorithm k.
func ScriptFor(k algo.Kind) *Script { return scripts[k] }

// FailurePolicy says what a decision does when Redis cannot be reached or
// does not answer in time.
type FailurePolicy uint8

const (
	// FailClosed returns an error wrapping sluice.ErrStoreUnavailable.
	FailClosed FailurePolicy = iota
	// FailOpen allows the request, flagged Degraded.
	FailOpen
	// FailLocal decides with an in-process memstore for the outage, flagged
	// Degraded: each process then limits on its own.
	FailLocal
)

// Errors that callers can test for with errors.Is. None of them is an
// outage: the failure policy does not apply to them, and the decision they
// report spent nothing.
var (
	// ErrClosed: the store was closed (Close).
	ErrClosed = errors.New("redisstore: store closed")
	// ErrForeignKey: the decision's key holds data that is not a limiter
	// state of sluice's (another type, or a string of another program).
	// The error names the key; delete it, or give the store a prefix of
	// its own (WithPrefix).
	ErrForeignKey = errors.New("redisstore: key holds foreign data")
	// ErrOutOfMemory: Redis refused the decision's write (OOM, used memory
	// above maxmemory under maxmemory-policy noeviction). Give Redis more
	// memory, or the limiter a Redis of its own.
	ErrOutOfMemory = errors.New("redisstore: Redis is out of memory (OOM)")
	// ErrNoPermission: the ACL user may not run a command the store needs
	// (NOPERM): TIME in scripts (use WithCallerTime, or grant +time), EVAL,
	// or GET/SET on the store's keys (grant ~prefix*).
	ErrNoPermission = errors.New("redisstore: the Redis user may not run a command the store needs (NOPERM)")
	// ErrInvalidOption: New was given an option that cannot work.
	ErrInvalidOption = errors.New("redisstore: invalid option")
	// ErrEvictingPolicy: CheckConfig found a server whose maxmemory-policy
	// may evict limiter keys.
	ErrEvictingPolicy = errors.New("redisstore: Redis may evict limiter keys")
	// ErrConfigUnreadable: CheckConfig could not read the servers'
	// maxmemory-policy (CONFIG refused, as on managed services, or a
	// Client that cannot send CONFIG GET).
	ErrConfigUnreadable = errors.New("redisstore: cannot read Redis's maxmemory-policy")
)

// errBadReply: a script replied something else than its decisions.
var errBadReply = errors.New("redisstore: unexpected script reply")

// Store is a sluice.Store in Redis or Valkey.
type Store struct {
	client  Client
	prefix  string
	timeout time.Duration
	margin  int64 // µs
	policy  FailurePolicy
	local   *memstore.Store
	now     func() int64 // nil: the server's TIME
	batch   *batcher
	batchN  int
	// group is the client's Router.Group: the keys that one script may
	// name together.
	group func(key string) (uint64, bool)
	// inline: the client ends each call by its context's deadline, so a
	// call may run on the caller's goroutine.
	inline bool
	closed atomic.Bool
	// optErr collects the options that cannot work, for New.
	optErr []error
}

var _ sluice.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*Store)

// WithPrefix puts prefix in front of every key (default "sluice:").
func WithPrefix(prefix string) Option { return func(s *Store) { s.prefix = prefix } }

// WithTimeout bounds each decision: a Redis that does not answer within d is
// unavailable for that call (default 1s). d must be positive.
func WithTimeout(d time.Duration) Option {
	return func(s *Store) {
		if d <= 0 {
			s.optErr = append(s.optErr, fmt.Errorf("WithTimeout(%v): a decision needs a positive time to reach Redis", d))
		}
		s.timeout = d
	}
}

// WithTTLMargin sets how long past the moment its state is equivalent to
// fresh a key is kept (default 1s). It covers the distance between the
// clock decisions use and the server's expiry clock. d must not be
// negative.
func WithTTLMargin(d time.Duration) Option {
	return func(s *Store) {
		if d < 0 {
			s.optErr = append(s.optErr, fmt.Errorf("WithTTLMargin(%v): a negative margin would expire keys before their state is fresh", d))
		}
		s.margin = d.Microseconds()
	}
}

// WithFailurePolicy sets what happens when Redis cannot be reached or does
// not answer in time (default FailClosed).
func WithFailurePolicy(p FailurePolicy) Option {
	return func(s *Store) {
		if p > FailLocal {
			s.optErr = append(s.optErr, fmt.Errorf("WithFailurePolicy(%d): not FailClosed, FailOpen or FailLocal", p))
		}
		s.policy = p
	}
}

// WithCallerTime makes decisions at the caller's time instead of the server's
// TIME; the FailLocal fallback then decides at the caller's time too. Use it
// where the Redis user may not run TIME in scripts.
func WithCallerTime(now func() time.Time) Option {
	return func(s *Store) {
		if now == nil {
			s.optErr = append(s.optErr, errors.New("WithCallerTime(nil): no clock"))
			return
		}
		s.now = func() int64 { return now().UnixMicro() }
	}
}

// WithoutBatching sends every decision in its own round trip, for callers
// who want strict per-call latency over throughput.
func WithoutBatching() Option { return func(s *Store) { s.batchN = 0 } }

// maxPipelines bounds WithBatching.
const maxPipelines = 1024

// WithBatching sets how many pipelines may be in flight at once (default 4;
// 0 is WithoutBatching; at most 1024).
func WithBatching(pipelines int) Option {
	return func(s *Store) {
		if pipelines < 0 || pipelines > maxPipelines {
			s.optErr = append(s.optErr, fmt.Errorf("WithBatching(%d): pipelines in flight must be from 0 to %d", pipelines, maxPipelines))
		}
		s.batchN = pipelines
	}
}

// New returns a Store over client. It returns an error wrapping
// ErrInvalidOption when client is nil or an option cannot work.
//
// The store names several keys in one script only where client says they may
// share one (see Router): GoRedis says so for a single node, a Cluster and a
// Ring.
func New(client Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: no client", ErrInvalidOption)
	}
	s := &Store{client: client, prefix: "sluice:", timeout: time.Second, margin: 1_000_000, batchN: 4}
	for i, o := range opts {
		if o == nil {
			s.optErr = append(s.optErr, fmt.Errorf("option %d is nil", i))
			continue
		}
		o(s)
	}
	if len(s.optErr) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, errors.Join(s.optErr...))
	}
	if s.policy == FailLocal {
		// The fallback decides at the same time as the store: the caller's
		// when WithCallerTime gave it, else this process's clock.
		var lopts []memstore.Option
		if s.now != nil {
			lopts = append(lopts, memstore.WithMicros(s.now))
		}
		s.local = memstore.New(lopts...)
	}
	if cb, ok := client.(contextBound); ok {
		s.inline = cb.boundByContext()
	}
	if r, ok := client.(Router); ok {
		s.group = r.Group
	} else {
		s.group = func(string) (uint64, bool) { return 0, false }
	}
	if s.batchN > 0 {
		s.batch = newBatcher(client, s.batchN, s.timeout, s.group)
	}
	return s, nil
}

// NewGoRedis returns a Store over a go-redis client (single node, Sentinel,
// Cluster or Ring): New(GoRedis(c), opts...).
func NewGoRedis(c redis.UniversalClient, opts ...Option) (*Store, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: no client", ErrInvalidOption)
	}
	return New(GoRedis(c), opts...)
}

// Close stops the store's batching goroutines; every call made after it
// returns ErrClosed at once, and so do the calls still waiting to be sent.
// It waits for the pipelines already on their way (at most the store's
// timeout). It does not close the client.
func (s *Store) Close() error {
	s.closed.Store(true)
	if s.batch != nil {
		s.batch.close()
	}
	return nil
}

// Key returns the Redis key that holds key's state.
func (s *Store) Key(key string) string { return s.prefix + key }

// Take makes one decision for req, at the server's time unless the store was
// given the caller's. The failure policy applies only when Redis cannot be
// reached or does not answer in time: a context that ends first returns its
// error, and an error that waiting will not cure (ErrForeignKey,
// ErrOutOfMemory, ErrNoPermission, ErrClosed, an invalid request) is
// returned as it is.
func (s *Store) Take(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	if err := checkRequest(&req); err != nil {
		return sluice.Result{}, err
	}
	now, err := s.clock()
	if err != nil {
		return sluice.Result{}, err
	}
	d, err := s.decide(ctx, req, now)
	return s.settle(&d, err, func() (sluice.Result, error) { return s.local.Take(ctx, req) })
}

// checkRequest reports why req cannot be decided (sluice.CheckParams, and a
// limit that Validate refuses), or nil.
func checkRequest(req *sluice.Request) error {
	if err := req.Params.Validate(); err != nil {
		return err // wraps sluice.ErrInvalidLimit
	}
	if err := sluice.CheckParams(req.Key, req.Params, req.Cost); err != nil {
		return err
	}
	if req.MaxDelay < 0 {
		return fmt.Errorf("%w: max delay %dµs is negative", sluice.ErrInvalidLimit, req.MaxDelay)
	}
	return nil
}

// checkRequests is checkRequest for every part of a composite, which must
// name distinct keys.
func checkRequests(reqs []sluice.Request) error {
	if len(reqs) == 0 {
		return fmt.Errorf("%w: a composite needs at least one part", sluice.ErrInvalidLimit)
	}
	for i := range reqs {
		if err := checkRequest(&reqs[i]); err != nil {
			return fmt.Errorf("part %d (%q): %w", i, reqs[i].Key, err)
		}
		for j := range i {
			if reqs[j].Key == reqs[i].Key {
				return fmt.Errorf("%w: %q", sluice.ErrDuplicateKey, reqs[i].Key)
			}
		}
	}
	return nil
}

// clock is the time a decision is made at: the caller's, or -1 for the
// server's TIME. A caller's time a step does not accept is an error wrapping
// sluice.ErrInvalidTime, which no failure policy turns into a decision (a
// negative one would otherwise read as "use TIME" in the scripts).
func (s *Store) clock() (int64, error) {
	if s.now == nil {
		return -1, nil
	}
	now := s.now()
	if err := algo.CheckTime(now); err != nil {
		return 0, fmt.Errorf("%w: caller time: %v", sluice.ErrInvalidTime, err)
	}
	return now, nil
}

// settle turns a decision, or the error that kept Redis from making it, into
// the caller's answer: the failure policy applies to an outage
// (sluice.ErrStoreUnavailable) only; local decides in process.
func (s *Store) settle(d *algo.Decision, err error, local func() (sluice.Result, error)) (sluice.Result, error) {
	if err == nil {
		return sluice.FromDecision(d), nil
	}
	if !errors.Is(err, sluice.ErrStoreUnavailable) {
		return sluice.Result{}, err
	}
	switch s.policy {
	case FailOpen:
		return sluice.Result{Allowed: true, Degraded: true}, nil
	case FailLocal:
		r, lerr := local()
		r.Degraded = true
		return r, lerr
	}
	return sluice.Result{}, err
}

// TakeAt makes one decision for req at time now (µs since the epoch) and
// applies no failure policy: replays use it.
func (s *Store) TakeAt(ctx context.Context, req sluice.Request, now int64) (algo.Decision, error) {
	if err := algo.CheckTime(now); err != nil {
		return algo.Decision{}, fmt.Errorf("%w: %v", sluice.ErrInvalidTime, err)
	}
	if err := checkRequest(&req); err != nil {
		return algo.Decision{}, err
	}
	return s.decide(ctx, req, now)
}

// ready returns why no call may be sent now: the store is closed, or the
// caller's context has ended (then nothing is sent, nothing spent).
func (s *Store) ready(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	return ctx.Err()
}

func (s *Store) decide(ctx context.Context, req sluice.Request, now int64) (algo.Decision, error) {
	if err := s.ready(ctx); err != nil {
		return algo.Decision{}, err
	}
	p := &req.Params
	one := single{
		key:    s.prefix + req.Key,
		lim:    limit{int64(p.Kind), p.Rate, p.Period, p.Burst, maxDelayArg(req.MaxDelay)},
		cost:   req.Cost,
		now:    now,
		margin: s.margin,
	}
	if !s.alone() {
		r, err := s.batch.decide(ctx, &one)
		if err != nil {
			return algo.Decision{}, s.failed(ctx, err)
		}
		return decisionOf(r[:], one.key)
	}
	c := singleCall(&one)
	if err := s.direct(ctx, c); err != nil {
		return algo.Decision{}, s.failed(ctx, err)
	}
	if len(c.Reply) != 5 {
		return algo.Decision{}, fmt.Errorf("%w: script replied %v", errBadReply, c.Reply)
	}
	return decisionOf(c.Reply, one.key)
}

// run sends one call and waits at most the store's timeout for it: in its
// own round trip (alone) or through the batcher.
func (s *Store) run(ctx context.Context, c *Call) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	var err error
	if s.alone() {
		err = s.direct(ctx, c)
	} else if err = s.batch.run(ctx, c); err == nil {
		err = c.Err
	}
	if err != nil {
		return s.failed(ctx, err)
	}
	return nil
}

// alone reports whether a call goes in its own round trip now, sent with
// direct: batching is off, or the batcher is idle and the client ends calls
// by their deadline. Then the caller holds the batcher's inline slot
// (batcher.claim), which direct gives back: a lone caller is spared two
// hand-offs between goroutines, about a fifth of a local round trip.
func (s *Store) alone() bool {
	return s.batch == nil || s.inline && s.batch.claim()
}

// direct sends c, which alone let go in its own round trip, within the
// store's timeout: on this goroutine when the client ends calls by their
// deadline, else on another (runAlone). It returns the round trip's error
// or c's.
func (s *Store) direct(ctx context.Context, c *Call) error {
	if s.batch != nil {
		defer s.batch.release()
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if !s.inline {
		if err := runAlone(ctx, s.client, c); err != nil {
			return err
		}
	} else {
		s.client.Run(ctx, []*Call{c})
	}
	return c.Err
}

// runAlone sends c in its own round trip and waits for its reply or for ctx,
// whichever comes first. A Client need not stop at ctx's deadline: go-redis
// applies it to reads and writes only with ContextTimeoutEnabled, and
// otherwise waits up to its ReadTimeout (3s by default) on a Redis that does
// not answer. After ctx is done the round trip finishes in the background
// and c is not read again.
func runAlone(ctx context.Context, cl Client, c *Call) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		cl.Run(ctx, []*Call{c})
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		select {
		case <-done: // the reply came in time after all
			return nil
		default:
			return ctx.Err()
		}
	}
}

// failed sorts the error of a call made for a caller whose context is ctx:
// the caller's context that ended is returned as its own error, an error
// that waiting will not cure as itself (with what to do), and an outage
// wrapped in sluice.ErrStoreUnavailable, for the failure policy.
func (s *Store) failed(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, ErrClosed), errors.Is(err, errBadReply), errors.Is(err, sluice.ErrStoreUnavailable):
		return err
	case ctx.Err() != nil:
		return fmt.Errorf("redisstore: the caller's context ended: %w", ctx.Err())
	}
	if perm := permanent(err, s.now == nil); perm != nil {
		return perm
	}
	return unavailable(err)
}

// permanent returns err as an error that says what to do when it is not an
// outage (an error waiting will not cure), else nil. serverTime: the store
// reads Redis's TIME.
func permanent(err error, serverTime bool) error {
	if errors.Is(err, redis.ErrClosed) {
		return fmt.Errorf("redisstore: the go-redis client is closed: %w", err)
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return nil // the network, a timeout: an outage
	}
	msg := re.Error()
	for _, p := range transientReplies {
		if strings.HasPrefix(msg, p) {
			return nil
		}
	}
	switch {
	case strings.HasPrefix(msg, "NOPERM"), strings.Contains(msg, "can't run this command"):
		if serverTime {
			return fmt.Errorf("%w: %v (if TIME is refused, give the store the caller's time: WithCallerTime)", ErrNoPermission, err)
		}
		return fmt.Errorf("%w: %v", ErrNoPermission, err)
	case strings.HasPrefix(msg, "WRONGTYPE"), strings.Contains(msg, "sluice: foreign data"):
		return fmt.Errorf("%w: %v (delete the key, or give the store a prefix of its own: WithPrefix)", ErrForeignKey, err)
	case strings.HasPrefix(msg, "OOM"):
		return fmt.Errorf("%w: %v", ErrOutOfMemory, err)
	}
	return fmt.Errorf("redisstore: Redis refused the call: %w", err)
}

// transientReplies are the error replies of a server that cannot serve now
// but will (loading, failing over, a slot moving, a script running too
// long, too many clients): outages, for the failure policy.
var transientReplies = []string{
	"LOADING", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "TRYAGAIN", "BUSY",
	"MISCONF", "NOREPLICAS", "MOVED", "ASK", "NOSCRIPT", "ERR max number of clients",
}

func unavailable(err error) error {
	if errors.Is(err, sluice.ErrStoreUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", sluice.ErrStoreUnavailable, err)
}

// TakeAll makes one decision for a composite request (see sluice.Store).
//
// When the client puts every key in one group (see Router: always on a
// single node; on a cluster, keys that share a {hash tag}; on a Ring, keys
// its hash puts on one shard) it is one atomic script: every part is stepped
// and all are written only if all grant. Where the keys are apart no script
// can see them all, so the parts are taken one at a time and when one
// refuses the parts already taken are given back (Refund). That never
// admits over any limit. Its weakness: between a part's take and its
// give-back a concurrent request on that key may be refused that would have
// passed; a process dying in between (or a give-back that fails) leaves
// those units spent; and only token-bucket and gcra parts can be given back.
// So the parts that can be given back go first, in the order given (put the
// narrowest first: it refuses most, and a refusal there costs nothing), and
// the others after them; with two or more window or leaky parts, all but the
// last can lose units to a later refusal. A refusal on this path reports the
// parts it reached (the ones after the refusing part are not looked at).
// Taking a window part after the refundable ones matters: a per-chat fixed
// window taken before a global token bucket wastes its windows on the
// global's refusals (see the README's composite figures).
func (s *Store) TakeAll(ctx context.Context, reqs []sluice.Request) (sluice.Result, error) {
	if err := checkRequests(reqs); err != nil {
		return sluice.Result{}, err
	}
	now, err := s.clock()
	if err != nil {
		return sluice.Result{}, err
	}
	d, err := s.takeAll(ctx, reqs, now)
	return s.settle(&d, err, func() (sluice.Result, error) { return s.local.TakeAll(ctx, reqs) })
}

// TakeAllAt is TakeAll at time now (µs since the epoch), with no failure
// policy.
func (s *Store) TakeAllAt(ctx context.Context, reqs []sluice.Request, now int64) (algo.Decision, error) {
	if err := algo.CheckTime(now); err != nil {
		return algo.Decision{}, fmt.Errorf("%w: %v", sluice.ErrInvalidTime, err)
	}
	if err := checkRequests(reqs); err != nil {
		return algo.Decision{}, err
	}
	return s.takeAll(ctx, reqs, now)
}

func (s *Store) takeAll(ctx context.Context, reqs []sluice.Request, now int64) (algo.Decision, error) {
	if !s.together(reqs) {
		return s.takeInTurn(ctx, reqs, now)
	}
	c := Call{Script: composite, Keys: make([]string, len(reqs)), Args: make([]any, 0, 4+6*len(reqs))}
	c.Args = append(c.Args, s.margin, int64(1), now, int64(len(reqs)))
	for i, r := range reqs {
		c.Keys[i] = s.prefix + r.Key
		c.Args = append(c.Args, int64(r.Params.Kind), r.Params.Rate, r.Params.Period, r.Params.Burst, r.Cost, maxDelayArg(r.MaxDelay))
	}
	if err := s.run(ctx, &c); err != nil {
		return algo.Decision{}, err
	}
	if len(c.Reply) != 5*len(reqs) {
		return algo.Decision{}, fmt.Errorf("%w: composite script replied %v", errBadReply, c.Reply)
	}
	var acc algo.Decision
	looks := make([]algo.Decision, len(reqs))
	for i := range reqs {
		d, err := decisionOf(c.Reply[5*i:5*i+5], c.Keys[i])
		if err != nil {
			return algo.Decision{}, err
		}
		looks[i] = d
		if i == 0 {
			acc = looks[i]
		} else {
			algo.Combine(&acc, looks[i])
		}
	}
	if !acc.Allowed {
		// The script replied looks for the parts that granted.
		algo.Refused(&acc, looks)
	}
	return acc, nil
}

// takeInTurn takes the parts one at a time and gives back the ones taken when
// a later one refuses.
func (s *Store) takeInTurn(ctx context.Context, reqs []sluice.Request, now int64) (algo.Decision, error) {
	reqs = slices.Clone(reqs)
	slices.SortStableFunc(reqs, func(a, b sluice.Request) int {
		return cmp.Compare(refundRank(a.Params.Kind), refundRank(b.Params.Kind))
	})
	var acc algo.Decision
	taken := make([]algo.Decision, 0, len(reqs))
	for i, r := range reqs {
		d, err := s.decide(ctx, r, now)
		if err != nil || !d.Allowed {
			// Give back what can be; the refusal then reports the parts
			// taken as they are afterwards (a refund replies a look), the
			// ones not given back as spent, and the refusing part's own
			// look. The parts after it were not reached.
			looks := taken
			for j, t := range reqs[:i] {
				if t.Cost > 0 && (t.Params.Kind == algo.TokenBucket || t.Params.Kind == algo.GCRA) {
					if l, rerr := s.refund(context.WithoutCancel(ctx), t, now); rerr == nil {
						looks[j] = l
					}
				}
			}
			if err != nil {
				return algo.Decision{}, err
			}
			looks = append(looks, d)
			acc = d
			algo.Refused(&acc, looks)
			return acc, nil
		}
		taken = append(taken, d)
		if i == 0 {
			acc = d
		} else {
			algo.Combine(&acc, d)
		}
	}
	return acc, nil
}

// refundRank orders the parts of a cross-slot composite: those that can be
// given back first.
func refundRank(k algo.Kind) int {
	if k == algo.TokenBucket || k == algo.GCRA {
		return 0
	}
	return 1
}

// together reports whether one script may name every request's key: one
// key, or keys the client puts in one group (see Router).
func (s *Store) together(reqs []sluice.Request) bool {
	if len(reqs) == 1 {
		return true
	}
	g, ok := s.group(s.prefix + reqs[0].Key)
	if !ok {
		return false
	}
	for _, r := range reqs[1:] {
		if h, ok := s.group(s.prefix + r.Key); !ok || h != g {
			return false
		}
	}
	return true
}

// Refund gives req.Cost units back to req.Key (see algo.Refund). It applies
// no failure policy: a refund that cannot reach Redis is an error.
func (s *Store) Refund(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	if k := req.Params.Kind; k != algo.TokenBucket && k != algo.GCRA {
		return sluice.Result{}, fmt.Errorf("sluice: refund on %s: %w", k, algo.ErrNoRefund)
	}
	if err := req.Params.Validate(); err != nil {
		return sluice.Result{}, err // wraps sluice.ErrInvalidLimit
	}
	switch {
	case req.Key == "":
		return sluice.Result{}, sluice.ErrEmptyKey
	case req.Cost < 0:
		return sluice.Result{}, fmt.Errorf("%w: refund of %d", sluice.ErrInvalidCost, req.Cost)
	}
	now, err := s.clock()
	if err != nil {
		return sluice.Result{}, err
	}
	d, err := s.refund(ctx, req, now)
	return sluice.FromDecision(&d), err
}

func (s *Store) refund(ctx context.Context, req sluice.Request, now int64) (algo.Decision, error) {
	p := &req.Params
	c := Call{
		Script: refundScript,
		Keys:   []string{s.prefix + req.Key},
		Args:   []any{int64(p.Kind), p.Rate, p.Period, p.Burst, req.Cost, now, s.margin},
	}
	if err := s.run(ctx, &c); err != nil {
		return algo.Decision{}, err
	}
	if len(c.Reply) != 5 {
		return algo.Decision{}, fmt.Errorf("%w: refund script replied %v", errBadReply, c.Reply)
	}
	return decisionOf(c.Reply, c.Keys[0])
}

// Reset forgets key.
func (s *Store) Reset(ctx context.Context, key string) error {
	if key == "" {
		return sluice.ErrEmptyKey
	}
	c := Call{Script: resetScript, Keys: []string{s.prefix + key}}
	return s.run(ctx, &c)
}

// CheckConfig reports whether Redis keeps the limiter's keys: it reads the
// maxmemory-policy of every server (every master of a cluster, every shard
// of a Ring) and returns an error wrapping ErrEvictingPolicy when one is not
// noeviction. A limiter key is state, not a cache entry: evicted, it
// forgets what was spent and the next decision admits as on a fresh key
// (as reported: a 5/hour limit admitted 45 of 50 under allkeys-lru and memory
// pressure). Every key the store writes has a TTL, so the volatile-*
// policies evict them too. Where CONFIG is refused (managed services, an
// ACL without it) or the Client cannot send it, the error wraps
// ErrConfigUnreadable: check the policy in the provider's settings. Call it
// at start-up; it applies no failure policy.
func (s *Store) CheckConfig(ctx context.Context) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	cr, ok := s.client.(configReader)
	if !ok {
		return fmt.Errorf("%w: %v; make sure it is noeviction", ErrConfigUnreadable, errNoConfigReader)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	policies, err := cr.maxmemoryPolicies(ctx)
	if err != nil {
		var re redis.Error
		if errors.As(err, &re) && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("%w: CONFIG GET maxmemory-policy refused (%v); make sure it is noeviction in the service's settings", ErrConfigUnreadable, err)
		}
		return unavailable(err)
	}
	for _, p := range policies {
		if p == "" {
			return fmt.Errorf("%w: CONFIG GET maxmemory-policy returned nothing; make sure it is noeviction", ErrConfigUnreadable)
		}
		if p != "noeviction" {
			return fmt.Errorf("%w: maxmemory-policy is %s; set it to noeviction (CONFIG SET maxmemory-policy noeviction, and in redis.conf), or give the limiter a Redis of its own", ErrEvictingPolicy, p)
		}
	}
	return nil
}

func maxDelayArg(us int64) int64 {
	if us == algo.Never {
		return -1
	}
	return us
}

// The codes of a decision the script could not make (guard.lua).
const (
	codeForeignType int64 = iota + 1
	codeForeignData
	codeNoMemory
	codeNoPermission
	codeNoTime
	codeNotWritable
	codeOther
)

// decisionOf reads a script's reply of one decision on key, or the error
// the script reports for it (allowed -1, then a code: see guard.lua).
func decisionOf(r []int64, key string) (algo.Decision, error) {
	if r[0] < 0 {
		return algo.Decision{}, failure(r[1], key)
	}
	d := algo.Decision{Allowed: r[0] == 1, Remaining: r[1], RetryAfter: r[2], ResetAfter: r[3], Delay: r[4]}
	if d.RetryAfter < 0 {
		d.RetryAfter = algo.Never
	}
	return d, nil
}

// failure is the error of a decision on key that the script reports with
// code.
func failure(code int64, key string) error {
	switch code {
	case codeForeignType:
		return fmt.Errorf("%w: %q holds another type than a string (WRONGTYPE): delete it, or give the store a prefix of its own (WithPrefix)", ErrForeignKey, key)
	case codeForeignData:
		return fmt.Errorf("%w: %q holds a string that is not a sluice state: delete it, or give the store a prefix of its own (WithPrefix)", ErrForeignKey, key)
	case codeNoMemory:
		return fmt.Errorf("%w: the write of %q was refused; raise maxmemory, or give the limiter a Redis of its own", ErrOutOfMemory, key)
	case codeNoPermission:
		return fmt.Errorf("%w: on %q (grant the user read and write on the store's keys, ~prefix*)", ErrNoPermission, key)
	case codeNoTime:
		return fmt.Errorf("%w: TIME, in the script for %q: give the store the caller's time (WithCallerTime), or grant +time", ErrNoPermission, key)
	case codeNotWritable:
		return fmt.Errorf("%w: Redis refused the write of %q (a replica, loading, or failing to persist)", sluice.ErrStoreUnavailable, key)
	}
	return fmt.Errorf("redisstore: the script failed on %q (code %d)", key, code)
}
