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
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/storeapi"
	"github.com/sluice-go/sluice/memstore"
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
			lopts = append(lopts, memstore.WithClock(storeapi.Clock(s.now)))
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
	r, err := storeapi.Request(&req)
	if err != nil {
		return sluice.Result{}, err
	}
	return s.take(ctx, r)
}

// take is Take on a request in core's form.
func (s *Store) take(ctx context.Context, req core.Request) (sluice.Result, error) {
	if err := checkRequest(&req); err != nil {
		return sluice.Result{}, err
	}
	now, err := s.clock()
	if err != nil {
		return sluice.Result{}, err
	}
	d, err := s.decide(ctx, req, now)
	return s.settle(&d, err, func() (sluice.Result, error) { return s.local.Take(ctx, storeapi.Public(&req)) })
}

// checkRequest reports why req cannot be decided (core.Check, and a
// limit that Validate refuses), or nil.
func checkRequest(req *core.Request) error {
	if err := req.Params.Validate(); err != nil {
		return err // wraps sluice.ErrInvalidLimit
	}
	if err := core.Check(req.Key, req.Params, req.Cost); err != nil {
		return err
	}
	if req.MaxDelay < 0 {
		return fmt.Errorf("%w: max delay %dµs is negative", sluice.ErrInvalidLimit, req.MaxDelay)
	}
	return nil
}

// checkRequests is checkRequest for every part of a composite, which must
// name distinct keys.
func checkRequests(reqs []core.Request) error {
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
		return 0, fmt.Errorf("caller time: %w", err) // wraps sluice.ErrInvalidTime
	}
	return now, nil
}

// TakeAt makes one decision for req at time now (µs since the epoch) and
// applies no failure policy: replays use it.
func (s *Store) TakeAt(ctx context.Context, req core.Request, now int64) (algo.Decision, error) {
	if err := algo.CheckTime(now); err != nil {
		return algo.Decision{}, err // wraps sluice.ErrInvalidTime
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

func (s *Store) decide(ctx context.Context, req core.Request, now int64) (algo.Decision, error) {
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

// Refund gives req.Cost units back to req.Key (see algo.Refund). It applies
// no failure policy: a refund that cannot reach Redis is an error.
func (s *Store) Refund(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	r, err := storeapi.RefundRequest(&req)
	if err != nil {
		return sluice.Result{}, err
	}
	return s.refundNow(ctx, r)
}

// refundNow is Refund on a request in core's form.
func (s *Store) refundNow(ctx context.Context, req core.Request) (sluice.Result, error) {
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
	return storeapi.Result(&d), err
}

func (s *Store) refund(ctx context.Context, req core.Request, now int64) (algo.Decision, error) {
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
