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
// decisions): it multiplies throughput under load. WithoutBatching sends each
// decision on its own for strict per-call latency.
//
// When Redis is unavailable the failure policy decides: FailClosed returns
// ErrStoreUnavailable, FailOpen allows, FailLocal decides with an in-process
// memstore until Redis is back; a decision made by the policy is flagged
// Result.Degraded. WithTimeout bounds how long a hung Redis can hold a call.
package redisstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/memstore"
)

//go:embed scripts/*.lua
var scriptFiles embed.FS

// scripts holds each algorithm's script by algo.Kind: the prelude, the
// algorithm's step and the single-decision main. composite holds every step
// and the composite main.
var (
	scripts     [algo.SlidingLog + 1]*Script
	composite   *Script
	resetScript *Script
)

var stepFiles = [...]string{
	algo.TokenBucket:   "token_bucket.lua",
	algo.GCRA:          "gcra.lua",
	algo.LeakyBucket:   "leaky_bucket.lua",
	algo.FixedWindow:   "fixed_window.lua",
	algo.SlidingWindow: "sliding_window.lua",
	algo.SlidingLog:    "sliding_log.lua",
}

func init() {
	prelude := mustRead("prelude.lua")
	all := prelude
	for _, k := range algo.Kinds() {
		step := mustRead(stepFiles[k])
		scripts[k] = NewScript(prelude + step + mustRead("single.lua"))
		all += step
	}
	composite = NewScript(all + mustRead("composite.lua"))
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
// TIME.
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
		s.local = memstore.New()
	}
	if s.batchN > 0 {
		s.batch = newBatcher(client, s.batchN, s.timeout)
	}
	return s
}

// NewGoRedis returns a Store over a go-redis client (single node, Sentinel,
// Cluster or Ring).
func NewGoRedis(c redis.UniversalClient, opts ...Option) *Store {
	return New(GoRedis(c), opts...)
}

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
	now := int64(-1)
	if s.now != nil {
		now = s.now()
	}
	d, err := s.decide(ctx, req, now)
	if err == nil {
		return sluice.FromDecision(d), nil
	}
	switch s.policy {
	case FailOpen:
		return sluice.Result{Allowed: true, Degraded: true}, nil
	case FailLocal:
		r, lerr := s.local.Take(ctx, req)
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
	maxDelay := req.MaxDelay
	if maxDelay == algo.Never {
		maxDelay = -1
	}
	c := Call{
		Script: scripts[p.Kind],
		Keys:   []string{s.prefix + req.Key},
		Args:   []any{int64(p.Kind), p.Rate, p.Period, p.Burst, req.Cost, maxDelay, now, s.margin},
	}
	if err := s.run(ctx, &c); err != nil {
		return algo.Decision{}, err
	}
	r := c.Reply
	if len(r) != 5 {
		return algo.Decision{}, fmt.Errorf("%w: script replied %v", sluice.ErrStoreUnavailable, r)
	}
	d := algo.Decision{Allowed: r[0] == 1, Remaining: r[1], RetryAfter: r[2], ResetAfter: r[3], Delay: r[4]}
	if d.RetryAfter < 0 {
		d.RetryAfter = algo.Never
	}
	return d, nil
}

// run sends one call, through the batcher unless batching is off, and waits
// at most the store's timeout for it.
func (s *Store) run(ctx context.Context, c *Call) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if s.batch != nil {
		if err := s.batch.run(ctx, c); err != nil {
			return unavailable(err)
		}
	} else {
		s.client.Run(ctx, []*Call{c})
	}
	if c.Err != nil {
		return unavailable(c.Err)
	}
	return nil
}

func unavailable(err error) error {
	if errors.Is(err, sluice.ErrStoreUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", sluice.ErrStoreUnavailable, err)
}

// Reset forgets key.
func (s *Store) Reset(ctx context.Context, key string) error {
	c := Call{Script: resetScript, Keys: []string{s.prefix + key}}
	return s.run(ctx, &c)
}
