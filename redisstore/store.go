// Package redisstore keeps sluice's limiter state in Redis or Valkey, so that
// every process of a service spends one budget.
//
// Each decision is one atomic Lua script (scripts/*.lua, one per algorithm,
// each a line-by-line mirror of its step in package algo, so this store and
// memstore give identical decisions), sent as EVALSHA with EVAL on NOSCRIPT:
// one round trip. The key's state is one string value whose TTL ends when the
// state is equivalent to fresh, plus a margin; the script sets value and TTL
// together, so no key is left without one, and gives a TTL to any key it finds
// without.
//
// Time is the server's TIME by default, so application servers with skewed
// clocks agree; WithCallerTime supplies it from the caller instead (managed
// services that refuse TIME in scripts, replays).
//
// Concurrent decisions are batched into pipelines (one round trip for many
// decisions), and the single decisions of a batch that share a slot into one
// multi-decision script (scripts/multi.lua) that makes them in turn: it
// multiplies throughput under load. WithoutBatching sends each decision on
// its own for strict per-call latency.
//
// When Redis is unavailable the failure policy decides: FailClosed returns
// ErrStoreUnavailable, FailOpen allows, FailLocal decides with an in-process
// memstore until Redis is back; a decision made by the policy is flagged
// Result.Degraded. WithTimeout bounds how long a hung Redis can hold a call.
// A go-redis client with ContextTimeoutEnabled ends its calls by their
// deadline, and the store then sends a lone caller's decision on the caller's
// goroutine; without it go-redis waits out its ReadTimeout on a Redis that
// hangs, and the store keeps its timeout by handing each call to another
// goroutine.
package redisstore

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/memstore"
)

//go:embed scripts/*.lua
var scriptFiles embed.FS

// scripts holds each algorithm's script by algo.Kind: the prelude, the
// algorithm's step and the single-decision main; multis the same with the
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
	// limits wrote (convert.lua).
	prelude := mustRead("prelude.lua") + mustRead("convert.lua")
	timestamp := mustRead("timestamp.lua")
	stepOf := func(k algo.Kind) string {
		if k == algo.GCRA || k == algo.LeakyBucket {
			return timestamp + mustRead(stepFiles[k])
		}
		return mustRead(stepFiles[k])
	}
	all := prelude + timestamp
	for _, k := range algo.Kinds() {
		scripts[k] = NewScript(prelude + stepOf(k) + mustRead("single.lua"))
		multis[k] = NewScript(prelude + stepOf(k) + mustRead("multi.lua"))
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

// FailurePolicy says what a decision does when Redis cannot make it.
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
	// clustered: keys of one decision may live on different nodes.
	clustered bool
	// inline: the client ends each call by its context's deadline, so a
	// call may run on the caller's goroutine.
	inline bool
}

var _ sluice.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*Store)

// WithPrefix puts prefix in front of every key (default "sluice:").
func WithPrefix(prefix string) Option { return func(s *Store) { s.prefix = prefix } }

// WithTimeout bounds each decision: a Redis that does not answer within d is
// unavailable for that call (default 1s).
func WithTimeout(d time.Duration) Option { return func(s *Store) { s.timeout = d } }

// WithTTLMargin sets how long past the moment its state is equivalent to
// fresh a key is kept (default 1s). It covers the distance between the
// clock decisions use and the server's expiry clock.
func WithTTLMargin(d time.Duration) Option {
	return func(s *Store) { s.margin = d.Microseconds() }
}

// WithFailurePolicy sets what happens when Redis is unavailable (default
// FailClosed).
func WithFailurePolicy(p FailurePolicy) Option { return func(s *Store) { s.policy = p } }

// WithCallerTime makes decisions at the caller's time instead of the server's
// TIME; the FailLocal fallback then decides at the caller's time too.
func WithCallerTime(now func() time.Time) Option {
	return func(s *Store) { s.now = func() int64 { return now().UnixMicro() } }
}

// WithoutBatching sends every decision in its own round trip, for callers
// who want strict per-call latency over throughput.
func WithoutBatching() Option { return func(s *Store) { s.batchN = 0 } }

// WithBatching sets how many pipelines may be in flight at once (default 4).
func WithBatching(pipelines int) Option { return func(s *Store) { s.batchN = pipelines } }

// New returns a Store over client.
func New(client Client, opts ...Option) *Store {
	s := &Store{client: client, prefix: "sluice:", timeout: time.Second, margin: 1_000_000, batchN: 4}
	for _, o := range opts {
		o(s)
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
	if s.batchN > 0 {
		s.batch = newBatcher(client, s.batchN, s.timeout, s.clustered)
	}
	return s
}

// NewGoRedis returns a Store over a go-redis client (single node, Sentinel,
// Cluster or Ring).
func NewGoRedis(c redis.UniversalClient, opts ...Option) *Store {
	_, cluster := c.(*redis.ClusterClient)
	return New(GoRedis(c), append([]Option{WithCluster(cluster)}, opts...)...)
}

// WithCluster tells the store whether its client is a Redis Cluster client,
// where the keys of a composite may live on different nodes (NewGoRedis sets
// it from the client's type).
func WithCluster(cluster bool) Option { return func(s *Store) { s.clustered = cluster } }

// Close stops the store's batching goroutines. It does not close the client.
func (s *Store) Close() error {
	if s.batch != nil {
		s.batch.close()
	}
	return nil
}

// Key returns the Redis key that holds key's state.
func (s *Store) Key(key string) string { return s.prefix + key }

// Take makes one decision for req, at the server's time unless the store was
// given the caller's.
func (s *Store) Take(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	now, err := s.clock()
	if err != nil {
		return sluice.Result{}, err
	}
	d, err := s.decide(ctx, req, now)
	return s.settle(&d, err, func() (sluice.Result, error) { return s.local.Take(ctx, req) })
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
// the caller's answer under the failure policy; local decides in process.
func (s *Store) settle(d *algo.Decision, err error, local func() (sluice.Result, error)) (sluice.Result, error) {
	if err == nil {
		return sluice.FromDecision(d), nil
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
	return s.decide(ctx, req, now)
}

func (s *Store) decide(ctx context.Context, req sluice.Request, now int64) (algo.Decision, error) {
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
			return algo.Decision{}, unavailable(err)
		}
		return decisionOf(r[:]), nil
	}
	c := singleCall(&one)
	if err := s.direct(ctx, c); err != nil {
		return algo.Decision{}, unavailable(err)
	}
	if len(c.Reply) != 5 {
		return algo.Decision{}, fmt.Errorf("%w: script replied %v", sluice.ErrStoreUnavailable, c.Reply)
	}
	return decisionOf(c.Reply), nil
}

// run sends one call and waits at most the store's timeout for it: in its
// own round trip (alone) or through the batcher.
func (s *Store) run(ctx context.Context, c *Call) error {
	var err error
	if s.alone() {
		err = s.direct(ctx, c)
	} else if err = s.batch.run(ctx, c); err == nil {
		err = c.Err
	}
	if err != nil {
		return unavailable(err)
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

func unavailable(err error) error {
	if errors.Is(err, sluice.ErrStoreUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", sluice.ErrStoreUnavailable, err)
}

// TakeAll makes one decision for a composite request (see sluice.Store).
//
// When every key lies in one cluster slot (always on a single node; on a
// cluster, keys that share a {hash tag}) it is one atomic script: every part
// is stepped and all are written only if all grant. On a cluster whose keys
// span slots no script can see them all, so the parts are taken one at a
// time and when one refuses the parts already taken are given back (Refund).
// That never admits over any limit. Its weakness: between a part's take and
// its give-back a concurrent request on that key may be refused that would
// have passed; a process dying in between (or a give-back that fails) leaves
// those units spent; and only token-bucket and gcra parts can be given back.
// So the parts that can be given back go first, in the order given (put the
// narrowest first: it refuses most, and a refusal there costs nothing), and the
// others after them; with two or more window or leaky parts, all but the last
// can lose units to a later refusal. (Measured under 8 processes × 32
// goroutines: a per-chat fixed window taken before a global token bucket
// wasted its windows on the global's refusals and the global reached 37% of
// its bound; taken after it, 100%.)
func (s *Store) TakeAll(ctx context.Context, reqs []sluice.Request) (sluice.Result, error) {
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
	return s.takeAll(ctx, reqs, now)
}

func (s *Store) takeAll(ctx context.Context, reqs []sluice.Request, now int64) (algo.Decision, error) {
	if s.clustered && !s.oneSlot(reqs) {
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
		return algo.Decision{}, fmt.Errorf("%w: composite script replied %v", sluice.ErrStoreUnavailable, c.Reply)
	}
	var acc algo.Decision
	looks := make([]algo.Decision, len(reqs))
	for i := range reqs {
		looks[i] = decisionOf(c.Reply[5*i : 5*i+5])
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
	for i, r := range reqs {
		d, err := s.decide(ctx, r, now)
		if err != nil || !d.Allowed {
			for _, t := range reqs[:i] {
				if t.Cost > 0 && (t.Params.Kind == algo.TokenBucket || t.Params.Kind == algo.GCRA) {
					s.refund(context.WithoutCancel(ctx), t, now)
				}
			}
			if err != nil {
				return algo.Decision{}, err
			}
			if i > 0 {
				algo.Combine(&acc, d)
				return acc, nil
			}
			return d, nil
		}
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

// oneSlot reports whether every request's key lies in one cluster slot.
func (s *Store) oneSlot(reqs []sluice.Request) bool {
	slot := Slot(s.prefix + reqs[0].Key)
	for _, r := range reqs[1:] {
		if Slot(s.prefix+r.Key) != slot {
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
		return algo.Decision{}, fmt.Errorf("%w: refund script replied %v", sluice.ErrStoreUnavailable, c.Reply)
	}
	return decisionOf(c.Reply), nil
}

// Reset forgets key.
func (s *Store) Reset(ctx context.Context, key string) error {
	c := Call{Script: resetScript, Keys: []string{s.prefix + key}}
	return s.run(ctx, &c)
}

func maxDelayArg(us int64) int64 {
	if us == algo.Never {
		return -1
	}
	return us
}

// decisionOf reads a script's reply of one decision.
func decisionOf(r []int64) algo.Decision {
	d := algo.Decision{Allowed: r[0] == 1, Remaining: r[1], RetryAfter: r[2], ResetAfter: r[3], Delay: r[4]}
	if d.RetryAfter < 0 {
		d.RetryAfter = algo.Never
	}
	return d
}
