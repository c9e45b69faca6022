package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
)

// replyErr is an error reply as go-redis reports it (a redis.Error).
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// Outages go to the failure policy; everything else is returned as an
// error that says what it is.
func TestClassify(t *testing.T) {
	s := &Store{}
	ctx := context.Background()
	outages := []error{
		io.EOF,
		syscall.ECONNREFUSED,
		syscall.ECONNRESET,
		&net.OpError{Op: "read", Err: syscall.ETIMEDOUT},
		context.DeadlineExceeded, // the store's own timeout
		replyErr("LOADING Redis is loading the dataset in memory"),
		replyErr("CLUSTERDOWN The cluster is down"),
		replyErr("MASTERDOWN Link with MASTER is down"),
		replyErr("READONLY You can't write against a read only replica."),
		replyErr("TRYAGAIN Multiple keys request during rehashing of slot"),
		replyErr("BUSY Redis is busy running a script."),
		replyErr("ERR max number of clients reached"),
	}
	for _, e := range outages {
		if err := s.failed(ctx, e); !errors.Is(err, sluice.ErrStoreUnavailable) {
			t.Errorf("%v: %v, want an outage", e, err)
		}
	}
	permanent := map[error]error{
		replyErr("NOPERM this user has no permissions to run the 'evalsha' command"):                 ErrNoPermission,
		replyErr("ERR The user executing the script can't run this command or subcommand script: x"): ErrNoPermission,
		replyErr("WRONGTYPE Operation against a key holding the wrong kind of value"):                ErrForeignKey,
		replyErr("ERR user_script:1: sluice: foreign data: k script: x"):                             ErrForeignKey,
		replyErr("OOM command not allowed when used memory > 'maxmemory'."):                          ErrOutOfMemory,
		redis.ErrClosed: redis.ErrClosed,
		ErrClosed:       ErrClosed,
		replyErr("ERR unknown command 'evalsha'"): nil,
	}
	for e, want := range permanent {
		err := s.failed(ctx, e)
		if errors.Is(err, sluice.ErrStoreUnavailable) || want != nil && !errors.Is(err, want) {
			t.Errorf("%v: %v, want %v and no outage", e, err, want)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.failed(cancelled, fmt.Errorf("wrapped: %w", context.Canceled)); !errors.Is(err, context.Canceled) || errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Errorf("the caller's cancelled context: %v", err)
	}
}
