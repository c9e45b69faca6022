package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-go/sluice/internal/redisrun"
	"github.com/sluice-go/sluice/store"
)

// Errors that callers can test for with errors.Is. But for ErrReplyLost,
// none of them is an outage: the failure policy does not apply to them, and
// the decision they report spent nothing.
var (
	// ErrClosed: the store was closed (Close).
	ErrClosed = errors.New("redisstore: store closed")
	// ErrForeignKey: the decision's key holds data that is not a limiter
	// state of sluice's (another type, or a string of another program).
	// The error names the key; delete it, or give the store a prefix of
	// its own (WithPrefix).
	ErrForeignKey = errors.New("redisstore: key holds foreign data")
	// ErrOutOfMemory: Redis refused the decision's write (OOM, used memory
	// above maxmemory under maxmemory-policy noeviction). Give Redis more
	// memory, or the limiter a Redis of its own.
	ErrOutOfMemory = errors.New("redisstore: Redis is out of memory (OOM)")
	// ErrNoPermission: the ACL user may not run a command the store needs
	// (NOPERM): TIME in scripts (use WithClock, or grant +time), EVAL,
	// or GET/SET on the store's keys (grant ~prefix*).
	ErrNoPermission = errors.New("redisstore: the Redis user may not run a command the store needs (NOPERM)")
	// ErrInvalidOption: New was given an option that cannot work.
	ErrInvalidOption = errors.New("redisstore: invalid option")
	// ErrEvictingPolicy: CheckConfig found a server whose maxmemory-policy
	// may evict limiter keys.
	ErrEvictingPolicy = errors.New("redisstore: Redis may evict limiter keys")
	// ErrConfigUnreadable: CheckConfig could not read the servers'
	// maxmemory-policy (CONFIG refused, as on managed services, or a
	// Client that cannot send CONFIG GET).
	ErrConfigUnreadable = errors.New("redisstore: cannot read Redis's maxmemory-policy")
	// ErrReplyLost: the decision's connection broke or timed out after the
	// decision was sent, so it may have run and spent, and its reply is
	// lost. It comes wrapped in store.ErrStoreUnavailable (the failure
	// policy applies), from a client set up by SendOnce.
	ErrReplyLost = redisrun.ErrReplyLost
)

// failed sorts the error of a call made for a caller whose context is ctx:
// the caller's context that ended is returned as its own error, an error
// that waiting will not cure as itself (with what to do), and an outage
// wrapped in store.ErrStoreUnavailable, for the failure policy.
func (s *Store) failed(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, ErrClosed), errors.Is(err, redisrun.ErrBadReply), errors.Is(err, store.ErrStoreUnavailable):
		return err
	case ctx.Err() != nil:
		return fmt.Errorf("redisstore: the caller's context ended: %w", ctx.Err())
	}
	if perm := permanent(err, s.now == nil); perm != nil {
		return perm
	}
	return unavailable(err)
}

// permanent returns err as an error that says what to do when it is not an
// outage (an error waiting will not cure), else nil. serverTime: the store
// reads Redis's TIME.
func permanent(err error, serverTime bool) error {
	switch redisrun.Classify(err) {
	case redisrun.Outage:
		return nil
	case redisrun.ClientClosed:
		return fmt.Errorf("redisstore: the go-redis client is closed: %w", err)
	case redisrun.NoPermission:
		if serverTime {
			return fmt.Errorf("%w: %v (if TIME is refused, give the store the caller's time: WithClock)", ErrNoPermission, err)
		}
		return fmt.Errorf("%w: %v", ErrNoPermission, err)
	case redisrun.ForeignKey:
		return fmt.Errorf("%w: %v (delete the key, or give the store a prefix of its own: WithPrefix)", ErrForeignKey, err)
	case redisrun.OutOfMemory:
		return fmt.Errorf("%w: %v", ErrOutOfMemory, err)
	}
	return fmt.Errorf("redisstore: Redis refused the call: %w", err)
}

func unavailable(err error) error {
	if errors.Is(err, store.ErrStoreUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", store.ErrStoreUnavailable, err)
}
