package redisrun

import (
	"context"
	"sync/atomic"
	"time"
)

// A Runner sends a caller's calls within a timeout: in their own round trip
// when it has nothing to share them with, else through its Batcher. Both
// redisstore and queue send every call through one. D is the type of the
// decisions its Merger merges (see Decide); a Runner that sends Calls only
// has none (queue's: D struct{}, no Merger).
type Runner[D any] struct {
	client  Client
	timeout time.Duration
	merger  Merger[D]
	pool    *pool[D]
	batch   *Batcher[D] // nil: every call alone
	// inline: the client ends each call by its context's deadline, so a
	// call may run on the caller's goroutine.
	inline bool
	// closed is the error of the calls made after Close; shut is set by it.
	closed error
	shut   atomic.Bool
}

// NewRunner returns a Runner over c whose calls wait at most timeout, with
// a Batcher of loops pipelines in flight (none when loops is 0: every call
// in its own round trip). m merges the decisions of one class and group
// (nil when Decide is not used). closed is the error of a call made or still
// waiting after Close.
func NewRunner[D any](c Client, loops int, timeout time.Duration, m Merger[D], closed error) *Runner[D] {
	r := &Runner[D]{client: c, timeout: timeout, merger: m, pool: newPool[D](), inline: BoundByContext(c), closed: closed}
	if loops > 0 {
		r.batch = newBatcher(c, loops, timeout, m, r.pool, closed)
	}
	return r
}

// Close stops the Runner's Batcher (see Batcher.Close); every call made
// after it returns the closed error at once.
func (r *Runner[D]) Close() {
	r.shut.Store(true)
	if r.batch != nil {
		r.batch.Close()
	}
}

// Decide makes the decision d, in a call of its own or merged with others
// (see Merger), and writes the Merger's answer (its reply, or its call's
// error) into d. It returns the error of a decision that was not answered:
// the caller gave up (ctx, or the timeout), or the Runner was closed.
func (r *Runner[D]) Decide(ctx context.Context, d *D) error {
	if r.shut.Load() {
		return r.closed
	}
	if !r.alone() {
		return r.batch.Decide(ctx, d)
	}
	p := r.pool.get(d) // d itself would escape through the Merger
	c := r.merger.Merge(p.self[:])
	if err := r.direct(ctx, c); err != nil {
		return err
	}
	r.merger.Split(c, p.self[:])
	*d = p.d
	r.pool.put(p)
	return nil
}

// Run sends c and returns the error of its round trip or c's.
func (r *Runner[D]) Run(ctx context.Context, c *Call) error {
	if r.shut.Load() {
		return r.closed
	}
	if r.alone() {
		if err := r.direct(ctx, c); err != nil {
			return err
		}
	} else if err := r.batch.Run(ctx, c); err != nil {
		return err
	}
	return c.Err
}

// alone reports whether a call goes in its own round trip now, sent with
// direct: batching is off, or the batcher is idle and the client ends calls
// by their deadline. Then the caller holds the batcher's inline slot
// (Batcher.Claim), which direct gives back: a lone caller is spared two
// hand-offs between goroutines.
func (r *Runner[D]) alone() bool {
	return r.batch == nil || r.inline && r.batch.Claim()
}

// direct sends c, which alone let go in its own round trip, within the
// timeout: on this goroutine when the client ends calls by their deadline,
// else on another (RunAlone). It returns the round trip's error; c's own
// is in c.Err.
func (r *Runner[D]) direct(ctx context.Context, c *Call) error {
	if r.batch != nil {
		defer r.batch.Release()
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	if !r.inline {
		return RunAlone(ctx, r.client, c)
	}
	r.client.Run(ctx, []*Call{c})
	return nil
}
