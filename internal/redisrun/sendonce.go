package redisrun

import (
	"context"
	"errors"
	"net"
	"syscall"
)

// ErrReplyLost matches the error of a connection to Redis that broke (or
// timed out) while a command was on it: the command may have run, and
// Redis's reply is lost.
var ErrReplyLost = errors.New("the connection to Redis broke with a command on it (it may have run)")

// A replyLost is the error a connection of SendOnceDialer reports when a read
// or a write fails. It matches ErrReplyLost and nothing else: it unwraps to
// nothing and has no Timeout method, so go-redis, which sends a command
// again after an EOF, a reset or a timeout (errors.Is, errors.As on
// net.Error), does not send it again after this one; it drops the
// connection, as for any error that is not a reply.
type replyLost struct{ cause string }

func (e *replyLost) Error() string        { return ErrReplyLost.Error() + ": " + e.cause }
func (e *replyLost) Is(target error) bool { return target == ErrReplyLost }

// lost returns err, if any, as a replyLost.
func lost(err error) error {
	if err == nil {
		return nil
	}
	var l *replyLost
	if errors.As(err, &l) {
		return l
	}
	return &replyLost{cause: err.Error()}
}

// A Dialer is go-redis's Options.Dialer.
type Dialer = func(ctx context.Context, network, addr string) (net.Conn, error)

// SendOnceDialer returns dial with its connections' read and write errors
// reported as ErrReplyLost. Once bytes of a command may have reached Redis,
// only its reply tells whether it ran, so such an error is not one to
// retry: go-redis then gives up the command rather than run it twice. What
// it retries still, and safely, is what never reached Redis (a dial, a wait
// for a pooled connection) or what Redis refused unrun (MOVED, ASK,
// READONLY, LOADING, TRYAGAIN, CLUSTERDOWN, MASTERDOWN). Dial errors pass
// as they are.
func SendOnceDialer(dial Dialer) Dialer {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if _, ok := c.(syscall.Conn); ok {
			// go-redis checks a pooled connection's health on its socket
			// (a non-blocking peek) before it hands it out.
			return onceSysConn{onceConn{c}}, nil
		}
		return onceConn{c}, nil
	}
}

type onceConn struct{ net.Conn }

func (c onceConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	return n, lost(err)
}

func (c onceConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	return n, lost(err)
}

type onceSysConn struct{ onceConn }

func (c onceSysConn) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}
