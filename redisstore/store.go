package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/store"
)

// Store is a store.Store in Redis or Valkey: pass it to sluice.New.
type Store struct {
	client  redisrun.Client
	prefix  string
	timeout time.Duration
	margin  int64 // µs
	policy  FailurePolicy
	local   *memstore.Store // FailLocal's fallback
	clk     store.Clock     // WithClock's, or nil
	now     func() int64    // clk's time in µs; nil: the server's TIME
	runner  *redisrun.Runner[decision]
	batchN  int
	// group is the client's redisrun.Router.Group: the keys that one script
	// may name together.
	group  func(key string) (uint64, bool)
	closed atomic.Bool
	// optErr collects the options that cannot work, for New.
	optErr []error
	// sliceLife is WithSlices's, and slices its table (nil without).
	sliceLife time.Duration
	slices    *sliceTable
	// gb gives back the holds failed acquires may have left (giveback.go);
	// log is WithLogger's.
	gb  *givebacks
	log *slog.Logger
}

var _ store.Store = (*Store)(nil)

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
		// The fallback decides at the same time as the store: the op's, else
		// the caller's clock when WithClock gave it, else this process's.
		s.local = memstore.New(memstore.WithClock(s.clk))
	}
	s.gb = newGivebacks()
	s.group = redisrun.GroupOf(client)
	s.runner = redisrun.NewRunner[decision](client, s.batchN, s.timeout, scripts, ErrClosed)
	if s.sliceLife > 0 {
		s.slices = newSliceTable(s)
	}
	return s, nil
}

// Close stops the store's batching goroutines; every call made after it
// returns ErrClosed at once, and so do the calls still waiting to be sent.
// It waits for the pipelines already on their way (at most the store's
// timeout). With WithSlices it first gives back what its slices hold, and
// it ends the give-backs of failed acquires' holds (which then come back by
// themselves at the end of their lifetime). It does not close the client.
func (s *Store) Close() error {
	if s.slices != nil {
		s.slices.close()
	}
	s.gb.close()
	s.closed.Store(true)
	s.runner.Close()
	return nil
}

// Clock returns the clock WithClock gave, or nil (the store decides at the
// server's TIME, which a Limiter cannot sleep by): a sluice.Limiter over
// the store reads deadlines and sleeps by it.
func (s *Store) Clock() store.Clock {
	if s.clk == nil {
		return nil // not a non-nil interface holding a nil one
	}
	return s.clk
}

// rateKey is the Redis key that holds key's rate state.
func (s *Store) rateKey(key string) string { return s.prefix + key }

// clock is the time a decision is made at when its op names none: the
// caller's, or -1 for the server's TIME. A caller's time a step does not
// accept is an error wrapping store.ErrInvalidTime, which no failure policy
// turns into a decision (a negative one would otherwise read as "use TIME"
// in the scripts).
func (s *Store) clock() (int64, error) {
	if s.now == nil {
		return -1, nil
	}
	now := s.now()
	if err := algo.CheckTime(now); err != nil {
		return 0, fmt.Errorf("caller time: %w", err) // wraps store.ErrInvalidTime
	}
	return now, nil
}

// at is the time op is decided at: its At, else the store's (clock).
func (s *Store) at(op *store.Op) (int64, error) {
	if op.At == 0 {
		return s.clock()
	}
	if err := algo.CheckTime(op.At); err != nil {
		return 0, err // wraps store.ErrInvalidTime; a negative At would read as TIME
	}
	return op.At, nil
}

// ready returns why no call may be sent now: the store is closed, or the
// caller's context has ended (then nothing is sent, nothing spent).
func (s *Store) ready(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	return ctx.Err()
}

// decide makes one decision on key under l (a take of cost units, or a
// charge) at now (-1: the server's TIME), batched with the decisions around
// it, applying no failure policy.
func (s *Store) decide(ctx context.Context, key string, l limit, cost, now int64) (algo.Decision, error) {
	if err := s.ready(ctx); err != nil {
		return algo.Decision{}, err
	}
	d := decision{one: single{
		key:    s.rateKey(key),
		lim:    l,
		cost:   cost,
		now:    now,
		margin: s.margin,
	}}
	err := s.runner.Decide(ctx, &d)
	if err == nil {
		err = d.err
	}
	if err != nil {
		return algo.Decision{}, s.failed(ctx, err)
	}
	return decisionOf(d.reply[:], d.one.key)
}

// decideNow is decide at the store's time, under p.
func (s *Store) decideNow(ctx context.Context, key string, p *algo.Params, cost int64) (algo.Decision, error) {
	now, err := s.clock()
	if err != nil {
		return algo.Decision{}, err
	}
	lim := storelink.LimitOf(p)
	return s.decide(ctx, key, limitOf(&lim, store.Never), cost, now)
}

// composite sends c, a composite call (scriptSet.compositeCall), within the
// store's timeout and sorts its error (failed): c's reply is then in
// c.Reply.
func (s *Store) composite(ctx context.Context, c *redisrun.Call) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	err := s.runner.Decide(ctx, &decision{comp: c})
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
	if err := s.runner.Run(ctx, c); err != nil {
		return s.failed(ctx, err)
	}
	return nil
}
