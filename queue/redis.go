package queue

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/redisrun"
)

//go:embed scripts/*.lua
var scriptFiles embed.FS

// Each operation is one script, sent as EVALSHA with EVAL on NOSCRIPT (after
// SCRIPT FLUSH, a restart or a failover). push and pop are the helpers every
// sluice script starts with, the prelude (the schedule, mirroring
// schedule.go) and their main.
var (
	pushScript = redisrun.NewScript(redisrun.LuaHelpers + mustRead("prelude.lua") + mustRead("push.lua"))
	popScript  = redisrun.NewScript(redisrun.LuaHelpers + mustRead("prelude.lua") + mustRead("pop.lua"))
	ackScript  = redisrun.NewScript(mustRead("ack.lua"))
	lenScript  = redisrun.NewScript(mustRead("len.lua"))
)

// mustRead returns one of the package's embedded scripts.
func mustRead(name string) string { return redisrun.MustRead(scriptFiles, name) }

const (
	// stateMargin is how long the schedule's key outlives the moment it is
	// equivalent to fresh: it covers the distance between the clock
	// decisions use and the server's expiry clock.
	stateMargin = time.Second
	// requeueBatch bounds the expired jobs one pop puts back, so that one
	// script never runs long; the next pops put back the rest.
	requeueBatch = 256
	// pipelines is how many pipelines of a Redis queue's calls may be in
	// flight at once, as for redisstore's default.
	pipelines = 4
)

// ErrClosed is returned by the calls made on a Redis queue after Close.
var ErrClosed = errors.New("queue: closed")

// Redis is a Queue in Redis or Valkey, shared by every process that opens it
// with the same name: they all release jobs at one rate. Each operation is
// one atomic Lua script, at the server's TIME unless WithClock gives the
// caller's. Its keys share the hash tag {name}, so it works on a cluster.
// Concurrent operations share pipelines, as redisstore's decisions do.
//
// The keys, all the prefix (WithPrefix, default "sluice:queue:"), "{name}:"
// and then: due (ZSET of waiting job ids by slot), inflight (ZSET of
// delivered ids by visibility deadline), data (HASH of payloads), meta (HASH
// of delivery counts) and state (the schedule, packed). The job keys have
// no TTL, so waiting jobs survive any outage of the workers; Redis deletes
// each when it empties. The state key expires once it is equivalent to
// fresh, so an empty queue leaves no key.
//
// The limit travels with every call, as for sluice's limiters: processes
// that open the queue with another limit use theirs for their own pushes
// and pops; the schedule carries over.
type Redis struct {
	runner *redisrun.Runner[struct{}]
	p      algo.Params
	vis    int64        // µs
	clock  sluice.Clock // nil: the server's TIME
	keys   []string
	w      *waiter
}

var _ Queue = (*Redis)(nil)

// NewRedis returns the queue name in the Redis or Valkey that c reaches (a
// single node, Sentinel, Cluster or Ring client), releasing jobs at limit,
// which must be a valid LeakyBucket limit. name must be non-empty and hold
// no brace. It does not contact the server. Close stops the goroutines that
// send its calls.
//
// Set c up with [github.com/sluice-go/sluice/redisstore.SendOnce] (or its
// cluster, ring or Sentinel form): go-redis otherwise sends a push or a pop
// again when its connection breaks before the reply, though the script may
// have run, so a job could be pushed twice or a slot spent twice.
func NewRedis(c redis.UniversalClient, name string, limit sluice.Limit, opts ...Option) (*Redis, error) {
	p, cfg, err := newConfig(limit, opts)
	if err != nil {
		return nil, err
	}
	if name == "" || strings.ContainsAny(name, "{}") {
		return nil, fmt.Errorf("queue: name %q is empty or holds a brace", name)
	}
	if c == nil {
		return nil, errors.New("queue: no Redis client")
	}
	prefix := cfg.prefix + "{" + name + "}:"
	return &Redis{
		runner: redisrun.NewRunner[struct{}](redisrun.GoRedis(c), pipelines, cfg.timeout, nil, ErrClosed),
		p:      p,
		vis:    cfg.visibility.Microseconds(),
		clock:  cfg.clock,
		keys:   []string{prefix + "due", prefix + "inflight", prefix + "data", prefix + "meta", prefix + "state"},
		w:      newWaiter(cfg),
	}, nil
}

// Close stops the goroutines that send the queue's calls; every call made
// after it returns ErrClosed. It leaves the queue's jobs in Redis and does
// not close the client.
func (q *Redis) Close() error {
	q.runner.Close()
	return nil
}

// Keys returns the queue's Redis keys: due, inflight, data, meta and state.
func (q *Redis) Keys() []string { return append([]string(nil), q.keys...) }

// args are the first arguments of push and pop: the limit, the time and the
// state's TTL margin.
func (q *Redis) args(extra ...any) ([]any, error) {
	now := int64(-1)
	if q.clock != nil {
		var err error
		if now, err = checkTime(q.clock.Now().UnixMicro()); err != nil {
			return nil, err
		}
	}
	return append([]any{q.p.Rate, q.p.Period, q.p.Burst, now, stateMargin.Microseconds()}, extra...), nil
}

// Push schedules payload at the queue's next free slot, or refuses it when
// that slot is more than Burst intervals away.
func (q *Redis) Push(ctx context.Context, payload []byte) (PushResult, error) {
	args, err := q.args(payload)
	if err != nil {
		return PushResult{}, err
	}
	r, err := q.run(ctx, pushScript, args...)
	if err != nil {
		return PushResult{}, err
	}
	if flag(r) != 1 {
		if len(r) != 2 {
			return PushResult{}, badReply(r)
		}
		return PushResult{RetryAfter: time.Duration(num(r[1])) * time.Microsecond}, nil
	}
	if len(r) != 3 {
		return PushResult{}, badReply(r)
	}
	q.w.ring()
	return PushResult{Accepted: true, ID: str(r[1]), ReleaseAt: micros(num(r[2]))}, nil
}

// Pop blocks until a job may be released and returns it; see Queue.
func (q *Redis) Pop(ctx context.Context) (*Job, error) { return q.w.pop(ctx, q.claim) }

// TryPop returns a job whose release time has come, or nil and the wait
// after which one may be; see Queue.
func (q *Redis) TryPop(ctx context.Context) (*Job, time.Duration, error) {
	return q.claim(ctx, 0)
}

func (q *Redis) claim(ctx context.Context, lead time.Duration) (*Job, time.Duration, error) {
	args, err := q.args(lead.Microseconds(), q.vis, requeueBatch)
	if err != nil {
		return nil, 0, err
	}
	r, err := q.run(ctx, popScript, args...)
	if err != nil {
		return nil, 0, err
	}
	if flag(r) != 1 {
		if len(r) != 2 {
			return nil, 0, badReply(r)
		}
		return nil, time.Duration(num(r[1])) * time.Microsecond, nil
	}
	if len(r) != 8 {
		return nil, 0, badReply(r)
	}
	released, now := num(r[4]), num(r[7])
	job := &Job{
		ID:          str(r[1]),
		ReleaseAt:   micros(num(r[3])),
		DeliveredAt: micros(released),
		Attempt:     int(num(r[5])),
		Deadline:    micros(num(r[6])),
	}
	payload, ok := r[2].(string)
	if !ok {
		// HGET found no data (Lua false, nil here): the job stays in
		// flight, so it comes back after its visibility timeout unless
		// the caller acknowledges it.
		return nil, 0, &DataMissingError{Job: job}
	}
	job.Payload = []byte(payload)
	return job, time.Duration(released-now) * time.Microsecond, nil
}

// Ack removes job for good, whether it is still in flight or already back
// in the queue for redelivery.
func (q *Redis) Ack(ctx context.Context, job *Job) error {
	if err := checkAck(job); err != nil {
		return err
	}
	r, err := q.call(ctx, ackScript, false, job.ID)
	if err != nil {
		return err
	}
	if len(r.Reply) != 1 {
		return badReply(r.Reply)
	}
	if r.Reply[0] == 0 {
		return ErrUnknownJob
	}
	return nil
}

// Len returns the number of jobs held: waiting, and delivered but not
// acknowledged.
func (q *Redis) Len(ctx context.Context) (int, error) {
	r, err := q.call(ctx, lenScript, false)
	if err != nil {
		return 0, err
	}
	if len(r.Reply) != 1 {
		return 0, badReply(r.Reply)
	}
	return int(r.Reply[0]), nil
}

// run runs s, whose reply is an array of any values, on the queue's keys.
func (q *Redis) run(ctx context.Context, s *redisrun.Script, args ...any) ([]any, error) {
	c, err := q.call(ctx, s, true, args...)
	if err != nil {
		return nil, err
	}
	return c.Values, nil
}

// call runs s on the queue's keys, within the timeout (WithTimeout); mixed:
// its reply holds other values than integers.
func (q *Redis) call(ctx context.Context, s *redisrun.Script, mixed bool, args ...any) (*redisrun.Call, error) {
	c := &redisrun.Call{Script: s, Keys: q.keys, Args: args, Mixed: mixed}
	if err := q.runner.Run(ctx, c); err != nil {
		return nil, failed(err)
	}
	return c, nil
}

// failed sorts the error of a call as the store does: an outage (Redis
// cannot be reached, does not answer in time, or cannot serve now) wraps
// sluice.ErrStoreUnavailable; an error that waiting will not cure (ErrClosed,
// an ACL refusal, a queue key holding foreign data, Redis out of memory, a
// closed client) is returned as itself.
func failed(err error) error {
	if errors.Is(err, ErrClosed) {
		return err
	}
	switch redisrun.Classify(err) {
	case redisrun.Outage:
		return fmt.Errorf("%w: %w", sluice.ErrStoreUnavailable, err)
	case redisrun.ForeignKey:
		return fmt.Errorf("queue: a key of the queue holds data the queue did not write (delete it, or use another prefix: WithPrefix): %w", err)
	}
	return fmt.Errorf("queue: Redis refused the call: %w", err)
}

func badReply[T any](r []T) error {
	return fmt.Errorf("%w: queue script replied %v", sluice.ErrStoreUnavailable, r)
}

// flag, num and str read a script's reply: Lua numbers come back as int64,
// strings as string, false as nil.
func flag(r []any) int64 {
	if len(r) == 0 {
		return -1
	}
	return num(r[0])
}

func num(v any) int64 {
	n, _ := v.(int64)
	return n
}

func str(v any) string {
	s, _ := v.(string)
	return s
}
