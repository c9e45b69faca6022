package redisrun

import (
	"context"
	"errors"
)

// ErrBadReply is the error of a script that replied something else than its layout says.
var ErrBadReply = errors.New("redis: unexpected script reply")

// RunAlone sends c in its own round trip and waits for its reply or for ctx,
// whichever comes first. A Client need not stop at ctx's deadline: go-redis
// applies it to reads and writes only with ContextTimeoutEnabled, and
// otherwise waits up to its ReadTimeout (3s by default) on a Redis that does
// not answer. After ctx is done the round trip finishes in the background
// and c is not read again.
func RunAlone(ctx context.Context, cl Client, c *Call) error {
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
