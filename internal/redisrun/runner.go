package redisrun

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// A Runner sends a caller's calls within a timeout: in their own round trip
// when it has nothing to share them with, else through its Batcher. Both
// redisstore and queue send every call through one.
type Runner struct {
	client  Client
	timeout time.Duration
	scripts *Scripts
	batch   *Batcher // nil: every call alone
	// inline: the client ends each call by its context's deadline, so a
	// call may run on the caller's goroutine.
	inline bool
	// closed is the error of the calls made after Close; shut is set by it.
	closed error
	shut   atomic.Bool
}

// NewRunner returns a Runner over c whose calls wait at most timeout, with
// a Batcher of loops pipelines in flight (none when loops is 0: every call
// in its own round trip). scripts and closed are the Batcher's (see
// NewBatcher).
func NewRunner(c Client, loops int, timeout time.Duration, scripts *Scripts, closed error) *Runner {
	r := &Runner{client: c, timeout: timeout, scripts: scripts, inline: BoundByContext(c), closed: closed}
	if loops > 0 {
		r.batch = NewBatcher(c, loops, timeout, scripts, closed)
	}
	return r
}

// Close stops the Runner's Batcher (see Batcher.Close); every call made
// after it returns the closed error at once.
func (r *Runner) Close() {
	r.shut.Store(true)
	if r.batch != nil {
		r.batch.Close()
	}
}

// Decide makes one decision (a Single) and returns the script's reply.
func (r *Runner) Decide(ctx context.Context, one *Single) (Reply, error) {
	if r.shut.Load() {
		return Reply{}, r.closed
	}
	if !r.alone() {
		return r.batch.Decide(ctx, one)
	}
	c := r.scripts.SingleCall(one)
	if err := r.direct(ctx, c); err != nil {
		return Reply{}, err
	}
	if len(c.Reply) != Width {
		return Reply{}, fmt.Errorf("%w: script replied %v", ErrBadReply, c.Reply)
	}
	return Reply(c.Reply), nil
}

// Run sends c and returns the error of its round trip or c's.
func (r *Runner) Run(ctx context.Context, c *Call) error {
	if r.shut.Load() {
		return r.closed
	}
	if r.alone() {
		return r.direct(ctx, c)
	}
	if err := r.batch.Run(ctx, c); err != nil {
		return err
	}
	return c.Err
}

// alone reports whether a call goes in its own round trip now, sent with
// direct: batching is off, or the batcher is idle and the client ends calls
// by their deadline. Then the caller holds the batcher's inline slot
// (Batcher.Claim), which direct gives back: a lone caller is spared two
// hand-offs between goroutines.
func (r *Runner) alone() bool {
	return r.batch == nil || r.inline && r.batch.Claim()
}

// direct sends c, which alone let go in its own round trip, within the
// timeout: on this goroutine when the client ends calls by their deadline,
// else on another (RunAlone). It returns the round trip's error or c's.
func (r *Runner) direct(ctx context.Context, c *Call) error {
	if r.batch != nil {
		defer r.batch.Release()
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	if !r.inline {
		if err := RunAlone(ctx, r.client, c); err != nil {
			return err
		}
	} else {
		r.client.Run(ctx, []*Call{c})
	}
	return c.Err
}
