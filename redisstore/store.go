package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/memstore"
)

// Store is a sluice.Store in Redis or Valkey.
type Store struct {
	client  redisrun.Client
	prefix  string
	timeout time.Duration
	margin  int64 // µs
	policy  FailurePolicy
	local   storelink.Engine // FailLocal's fallback: a memstore's
	clk     sluice.Clock     // WithClock's, or nil
	now     func() int64     // clk's time in µs; nil: the server's TIME
	run     *redisrun.Runner[decision]
	batchN  int
	// group is the client's redisrun.Router.Group: the keys that one script
	// may name together.
	group  func(key string) (uint64, bool)
	closed atomic.Bool
	// optErr collects the options that cannot work, for New.
	optErr []error
	// leaseLife is WithLeases's, and leases its table (nil without).
	leaseLife time.Duration
	leases    *leases
	// gb gives back the holds failed acquires may have left (giveback.go);
	// log is WithLogger's.
	gb  *givebacks
	log *slog.Logger
}

var _ sluice.Store = (*Store)(nil)

// New returns a Store over a go-redis client: a single node, a Sentinel
// failover client, a Cluster or a Ring (see the package's Routing). It does
// not contact the server (see CheckConfig). It returns an error wrapping
// ErrInvalidOption when c is nil or an option cannot work.
func New(c redis.UniversalClient, opts ...Option) (*Store, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: no client", ErrInvalidOption)
	}
	return newStore(redisrun.GoRedis(c), opts...)
}

// newStore returns a Store over client (tests plug in clients of their own).
func newStore(client redisrun.Client, opts ...Option) (*Store, error) {
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
		// when WithClock gave it, else this process's clock.
		s.local = memstore.New(memstore.WithClock(s.clk)).Engine()
	}
	s.gb = newGivebacks()
	s.group = redisrun.GroupOf(client)
	s.run = redisrun.NewRunner[decision](client, s.batchN, s.timeout, scripts, ErrClosed)
	if s.leaseLife > 0 {
		s.leases = newLeases(s)
	}
	return s, nil
}

// Close stops the store's batching goroutines; every call made after it
// returns ErrClosed at once, and so do the calls still waiting to be sent.
// It waits for the pipelines already on their way (at most the store's
// timeout). With WithLeases it first gives back what its slices hold, and
// it ends the give-backs of failed acquires' holds (which then come back by
// themselves at the end of their lifetime). It does not close the client.
func (s *Store) Close() error {
	if s.leases != nil {
		s.leases.close()
	}
	s.gb.close()
	s.closed.Store(true)
	s.run.Close()
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
	r, err := storelink.Checked(&req)
	if err != nil {
		return sluice.Result{}, err
	}
	res, err := s.take(ctx, r)
	return sluice.Result(res), err
}

// take is Take on a checked request (by Take, or by the Limiter before it
// calls the engine). FailLocal's fallback decides the same request. With
// WithLeases a leasable request of cost > 0 goes through the leases.
func (s *Store) take(ctx context.Context, req storelink.Request) (storelink.Result, error) {
	if s.leases != nil && req.Cost > 0 && algo.Leasable(req.Params.Kind) {
		return s.leases.take(ctx, req)
	}
	return s.takeInStore(ctx, req)
}

// takeInStore is take in Redis, without leases.
func (s *Store) takeInStore(ctx context.Context, req storelink.Request) (storelink.Result, error) {
	now, err := s.clock()
	if err != nil {
		return storelink.Result{}, err
	}
	d, err := s.decide(ctx, req, now)
	return s.settle(&d, err, func() (storelink.Result, error) { return s.local.Take(ctx, req) })
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

// ready returns why no call may be sent now: the store is closed, or the
// caller's context has ended (then nothing is sent, nothing spent).
func (s *Store) ready(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	return ctx.Err()
}

// decide makes one decision at now (-1: the server's TIME), applying no
// failure policy.
func (s *Store) decide(ctx context.Context, req storelink.Request, now int64) (algo.Decision, error) {
	if err := s.ready(ctx); err != nil {
		return algo.Decision{}, err
	}
	d := decision{one: single{
		key:    s.prefix + req.Key,
		lim:    limitOf(&req.Params, req.MaxDelay),
		cost:   req.Cost,
		now:    now,
		margin: s.margin,
	}}
	err := s.run.Decide(ctx, &d)
	if err == nil {
		err = d.err
	}
	if err != nil {
		return algo.Decision{}, s.failed(ctx, err)
	}
	return decisionOf(d.reply[:], d.one.key)
}

// composite sends c, a composite call (scriptSet.compositeCall), within the
// store's timeout and sorts its error (failed): c's reply is then in
// c.Reply.
func (s *Store) composite(ctx context.Context, c *redisrun.Call) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	err := s.run.Decide(ctx, &decision{comp: c})
	if err == nil {
		err = c.Err
	}
	if err != nil {
		return s.failed(ctx, err)
	}
	return nil
}

// call sends c within the store's timeout (see redisrun.Runner) and sorts
// its error (failed).
func (s *Store) call(ctx context.Context, c *redisrun.Call) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	if err := s.run.Run(ctx, c); err != nil {
		return s.failed(ctx, err)
	}
	return nil
}
