// Package queue is the leaky bucket as a work queue: jobs pushed in are
// released to workers at a constant rate, one per emission interval
// T = Period/Rate of a leaky-bucket sluice.Limit, however many workers pop and
// however many processes they run in. Reach for it to feed a downstream that
// must never see a burst (a payment provider at 20 calls a second) from a
// fleet of workers.
//
// Push gives a job its slot, the next free one, T after the previous, or
// refuses it when that slot would be more than Burst intervals away, telling
// the caller when the same push would be taken: the leaky bucket of
// SEMANTICS.md, decision for decision (a fresh queue takes Burst+1 jobs at
// once, in slots now, now+T, …, now+Burst·T). Pop blocks until a job may be
// released and hands it to one worker; Ack removes it for good.
//
// Delivery is at least once. A job not acknowledged within the visibility
// timeout (its worker died, or is too slow) is delivered again with Attempt
// one higher; it takes a fresh slot when its timeout is found expired, as if
// pushed again, but is never refused, so nothing is lost. An acknowledged job
// is never delivered again.
//
// Spacing: a delivery is released no sooner than its slot and no sooner than
// T after the previous delivery, in the queue's clock. So releases are at
// least T apart (at least ⌈T⌉ µs) whatever the number of workers, for new jobs
// and redeliveries alike, and workers that fell behind catch up at the rate,
// never in a burst. The Burst limit bounds the schedule, not the jobs that
// workers left waiting past their slots: Len can exceed Burst+1 when workers
// fall behind.
//
// Pop, within one Memory or Redis value, polls one at a time: one Pop holds
// the turn, sleeps until the next release instant (at most the poll
// interval, and a Push through the same value wakes it), claims the job a
// little before that instant (WithClaimAhead) and returns at the instant;
// the other Pops wait their turn. A process thus sends about one script per
// release, not one per worker. The release instants, Job.DeliveredAt, are
// the queue's record and strictly spaced; Pop returns to its caller at that
// instant plus the host's timer lateness (a fraction of a millisecond),
// never before it on a shared clock.
//
// Two implementations share the Queue interface: Memory, for the workers of
// one process, and Redis, whose state lives in Redis or Valkey (a single node
// or a cluster) so that every process shares one rate. Both make the same
// decisions; the Redis one makes each as one Lua script, at the server's time
// unless WithClock gives the caller's. Both are safe for concurrent use.
package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
)

// Queue is a rate-releasing job queue: Memory or Redis.
type Queue interface {
	// Push schedules payload at the queue's next free slot, or refuses it
	// (Accepted false, with RetryAfter) when the queue is full.
	Push(ctx context.Context, payload []byte) (PushResult, error)
	// Pop blocks until a job may be released and returns it, or returns
	// ctx's error once ctx is done. The job must be acknowledged with Ack
	// within the visibility timeout, or it is delivered again. A job whose
	// payload is missing is an error matching ErrJobDataMissing, a
	// *DataMissingError holding the job (see there).
	Pop(ctx context.Context) (*Job, error)
	// TryPop is Pop without waiting: a job whose release time has come, or
	// nil and the wait after which one may be (negative when the queue holds
	// no job at all, neither waiting nor unacknowledged).
	TryPop(ctx context.Context) (*Job, time.Duration, error)
	// Ack removes a delivered job for good: it is never delivered again. It
	// returns ErrUnknownJob when the queue no longer holds the job (it was
	// acknowledged already, by this delivery or another), ErrNilJob for a
	// nil job.
	Ack(ctx context.Context, job *Job) error
	// Len returns the number of jobs the queue holds: waiting for release,
	// and delivered but not yet acknowledged.
	Len(ctx context.Context) (int, error)
}

// PushResult is the answer to one Push.
type PushResult struct {
	// Accepted reports whether the job was queued.
	Accepted bool
	// ID names the accepted job; it is unique within the queue.
	ID string
	// ReleaseAt is the accepted job's slot: the instant, in the queue's
	// clock, from which it may be released (rounded up to the µs).
	ReleaseAt time.Time
	// RetryAfter is, for a refused job, the smallest wait after which the
	// same push would be accepted with no other pushes (the leaky bucket's
	// retry_after); 0 when accepted.
	RetryAfter time.Duration
}

// Job is one delivery of a job.
type Job struct {
	// ID names the job; a redelivery carries the same ID.
	ID string
	// Payload is the job's data, as pushed. It is the caller's to keep or
	// change.
	Payload []byte
	// Attempt counts the job's deliveries: 1 for the first, 2 for the first
	// redelivery, and so on.
	Attempt int
	// ReleaseAt is the slot this delivery was scheduled for: the push's
	// slot, or for a redelivery the fresh slot it took.
	ReleaseAt time.Time
	// DeliveredAt is the instant, in the queue's clock, at which the queue
	// released this delivery: ReleaseAt, or later when workers fell behind
	// or the previous delivery was less than T before. Deliveries are at
	// least T apart in DeliveredAt.
	DeliveredAt time.Time
	// Deadline is the end of the visibility timeout: not acknowledged by
	// then, the job is delivered again.
	Deadline time.Time
}

// ErrUnknownJob is returned by Ack for a job the queue no longer holds.
var ErrUnknownJob = errors.New("queue: unknown job (already acknowledged)")

// ErrNilJob is returned by Ack for a nil job.
var ErrNilJob = errors.New("queue: Ack of a nil job")

// ErrJobDataMissing is matched (errors.Is) by the error Pop and TryPop of a
// Redis queue return for a job whose payload is gone from Redis (deleted, or
// evicted under a maxmemory policy that evicts keys without a TTL) while
// its id was still queued. The error is a *DataMissingError, which holds the
// job.
var ErrJobDataMissing = errors.New("queue: job data missing")

// DataMissingError is the error of a delivery whose payload is missing (see
// ErrJobDataMissing). The delivery counts: the job is in flight, so it is
// delivered again, with the same error, after its visibility timeout. To
// drop it for good, Ack Job.
type DataMissingError struct {
	// Job is the delivery, with every field set but Payload (nil).
	Job *Job
}

// Error names the job and what becomes of it.
func (e *DataMissingError) Error() string {
	return fmt.Sprintf("queue: job %s (attempt %d): its data is missing (deleted or evicted); it is delivered again after its visibility timeout unless acknowledged", e.Job.ID, e.Job.Attempt)
}

// Is reports whether target is ErrJobDataMissing.
func (e *DataMissingError) Is(target error) bool { return target == ErrJobDataMissing }

// checkAck returns the error of an Ack of job, if it is not a job at all.
func checkAck(job *Job) error {
	if job == nil {
		return ErrNilJob
	}
	return nil
}

const (
	defaultVisibility = 30 * time.Second
	defaultPoll       = 50 * time.Millisecond
	defaultClaimAhead = 10 * time.Millisecond
)

// Option configures a queue.
type Option func(*config)

type config struct {
	visibility time.Duration
	poll       time.Duration
	ahead      time.Duration
	clock      sluice.Clock  // nil: the default clock
	prefix     string        // Redis
	timeout    time.Duration // Redis
}

// WithVisibilityTimeout sets how long a worker has to acknowledge a job
// before it is delivered again (default 30s). It must be at least 1µs.
func WithVisibilityTimeout(d time.Duration) Option {
	return func(c *config) { c.visibility = d }
}

// WithPollInterval sets the longest a waiting Pop sleeps before it looks at
// the queue again (default 50ms): it bounds how late a worker sees a job
// pushed into an empty queue by another process. A Push through the same
// Memory or Redis value wakes its waiting Pop at once.
func WithPollInterval(d time.Duration) Option {
	return func(c *config) { c.poll = d }
}

// WithClaimAhead sets how long before a job's release instant Pop may claim
// it (default 10ms); Pop then waits out the rest and returns at that
// instant. A job claimed after its instant is released when claimed, and as
// releases are never closer than T, every later release of a busy queue
// slips as much: the lead should cover a round trip to Redis and the
// lateness of a timer or of the scheduler. Zero claims nothing early, like
// TryPop. Pop waits out a lead even when its context is done meanwhile: the
// job is claimed, and returning it beats leaving it for redelivery.
func WithClaimAhead(d time.Duration) Option {
	return func(c *config) { c.ahead = d }
}

// WithPrefix puts prefix in front of a Redis queue's keys (default
// "sluice:queue:"); a Memory queue has none.
func WithPrefix(prefix string) Option {
	return func(c *config) { c.prefix = prefix }
}

// WithTimeout bounds each call of a Redis queue to Redis (default 1s): a
// Redis that does not answer within d is unavailable for that call, an error
// wrapping sluice.ErrStoreUnavailable. It must be positive. A Memory queue
// makes no calls.
func WithTimeout(d time.Duration) Option {
	return func(c *config) { c.timeout = d }
}

// WithClock sets the clock the queue schedules by and Pop waits by: Pop's
// waits between polls are c.Sleep calls, cut short by a Push or by Pop's
// context, and so is its wait for a job claimed ahead (WithClaimAhead),
// which nothing cuts short. By default a Memory queue reads the monotonic clock,
// anchored to the wall clock at start, and a Redis queue the server's TIME,
// so that the processes of a fleet agree; with this option a Redis queue
// decides at the caller's time (tests, replays, managed services that refuse
// TIME in scripts), and processes whose clocks disagree then disagree on the
// schedule. A fake clock whose Sleep moves its time forward by the duration
// drives Pop without real waiting (and a Pop on an empty queue then polls
// without pause until its context ends). A nil c keeps the default.
func WithClock(c sluice.Clock) Option {
	return func(cfg *config) { cfg.clock = c }
}

// newConfig applies opts and validates the limit; it returns the limit in its
// params form.
func newConfig(limit sluice.Limit, opts []Option) (algo.Params, config, error) {
	c := config{visibility: defaultVisibility, poll: defaultPoll, ahead: defaultClaimAhead, prefix: "sluice:queue:", timeout: time.Second}
	for _, o := range opts {
		o(&c)
	}
	p, err := storelink.Params(limit)
	switch {
	case err != nil:
		return p, c, err
	case p.Kind != algo.LeakyBucket:
		return p, c, fmt.Errorf("%w: a queue needs a leaky-bucket limit, got %s (use limit.WithAlgorithm(sluice.LeakyBucket))", sluice.ErrInvalidLimit, limit.Algorithm)
	case c.visibility < time.Microsecond:
		return p, c, fmt.Errorf("queue: visibility timeout %v is under 1µs", c.visibility)
	case c.poll <= 0:
		return p, c, fmt.Errorf("queue: poll interval %v is not positive", c.poll)
	case c.ahead < 0:
		return p, c, fmt.Errorf("queue: claim-ahead %v is negative", c.ahead)
	case c.timeout <= 0:
		return p, c, fmt.Errorf("queue: timeout %v is not positive", c.timeout)
	}
	return p, c, nil
}

// checkTime returns now if a step accepts it.
func checkTime(now int64) (int64, error) {
	if err := algo.CheckTime(now); err != nil {
		return 0, err // wraps sluice.ErrInvalidTime
	}
	return now, nil
}

// micros converts µs since the epoch to a time.
func micros(us int64) time.Time { return time.UnixMicro(us) }

// claim is one look at the queue: a job released to the caller, with the
// wait until its release instant (at most the lead asked for), or no job and
// the wait until one may be released (negative: the queue holds none).
type claim func(ctx context.Context, lead time.Duration) (*Job, time.Duration, error)

// waiter is the blocking half of Pop, shared by both queues. Only one Pop of
// a queue value polls at a time, the others wait their turn: a process then
// sends one poll per release instead of one per worker, and the queue is not
// stormed by every worker waking at the same instant.
type waiter struct {
	clock  sluice.Clock // nil: the system's, by timers
	poll   time.Duration
	ahead  time.Duration
	turn   chan struct{} // held by the polling Pop
	mu     sync.Mutex
	pushed chan struct{} // closed by a Push, to wake the polling Pop
}

func newWaiter(c config) *waiter {
	return &waiter{clock: c.clock, poll: c.poll, ahead: c.ahead, turn: make(chan struct{}, 1), pushed: make(chan struct{})}
}

// ring wakes the polling Pop: a job was pushed.
func (w *waiter) ring() {
	w.mu.Lock()
	close(w.pushed)
	w.pushed = make(chan struct{})
	w.mu.Unlock()
}

func (w *waiter) bell() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pushed
}

// pop waits for its turn, then polls try until it gets a job, sleeping
// between polls as long as try says (at most the poll interval); it gives
// the turn to the next Pop as soon as it holds a job, then waits out the
// job's lead, without regard to ctx (the lead is at most the claim-ahead):
// the job is claimed, and returning it is better than leaving it for
// redelivery.
func (w *waiter) pop(ctx context.Context, try claim) (*Job, error) {
	select {
	case w.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	job, lead, err := w.poll1(ctx, try)
	<-w.turn
	if job != nil && lead > 0 {
		if w.clock == nil {
			time.Sleep(lead)
		} else {
			_ = w.clock.Sleep(context.Background(), lead) // only a context's end stops it
		}
	}
	return job, err
}

func (w *waiter) poll1(ctx context.Context, try claim) (*Job, time.Duration, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		pushed := w.bell()
		job, wait, err := try(ctx, w.ahead)
		if err != nil || job != nil {
			return job, wait, err
		}
		if wait < 0 || wait > w.poll {
			wait = w.poll
		}
		if w.clock != nil {
			if err := w.sleep(ctx, pushed, wait); err != nil {
				return nil, 0, err
			}
			continue
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-timer.C:
		case <-pushed:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
}

// sleep waits d by the queue's clock, until pushed is closed or ctx ends;
// it returns ctx's error.
func (w *waiter) sleep(ctx context.Context, pushed <-chan struct{}, d time.Duration) error {
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		select {
		case <-pushed:
			cancel()
		case <-done:
		}
	}()
	_ = w.clock.Sleep(sctx, d) // its error is sctx's: a push or ctx's end
	close(done)
	cancel()
	return ctx.Err()
}
