package redisstore

import (
	"cmp"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/internal/redisrun"
)

// SendOnce sets o up so that go-redis never sends a command again once it
// may have reached Redis; call it before the client is made from o. By
// default go-redis sends a command again when its connection breaks or
// times out before the reply comes (an EOF, a reset, a read timeout),
// though the command may have run: a decision would then run twice and
// spend twice. With SendOnce such a failure is reported as ErrReplyLost,
// which go-redis does not retry; it still retries what is safe to retry (a
// dial that failed, a wait for a pooled connection, MOVED and ASK,
// READONLY, LOADING, TRYAGAIN and the like, where nothing ran).
//
// o is the options of a client (redis.NewClient; its Dialer is wrapped,
// go-redis's own dialer, TLS included, when nil), a cluster or a ring (each
// node's, through NewClient, which is wrapped), or a Sentinel client
// (NewFailoverClient, NewFailoverClusterClient: the Dialer of the master,
// the replicas and the sentinels; when nil, one like go-redis's own with
// DialTimeout, 5s when 0, and TLSConfig as they are when SendOnce is
// called). MaxRetries -1 also keeps a redis.Client from sending anything
// twice but gives up the safe retries; a cluster client sends a command
// again after a broken connection whatever its MaxRetries.
func SendOnce[O *redis.Options | *redis.ClusterOptions | *redis.RingOptions | *redis.FailoverOptions](o O) {
	switch o := any(o).(type) {
	case *redis.Options:
		sendOnce(o)
	case *redis.ClusterOptions:
		o.NewClient = sendOnceNodes(o.NewClient)
	case *redis.RingOptions:
		o.NewClient = sendOnceNodes(o.NewClient)
	case *redis.FailoverOptions:
		dial := o.Dialer
		if dial == nil {
			dial = redis.NewDialer(&redis.Options{DialTimeout: cmp.Or(o.DialTimeout, 5*time.Second), TLSConfig: o.TLSConfig})
		}
		o.Dialer = redisrun.SendOnceDialer(dial)
	}
}

// sendOnce is SendOnce for one client's options.
func sendOnce(o *redis.Options) {
	dial := o.Dialer
	if dial == nil {
		dial = redis.NewDialer(o)
	}
	o.Dialer = redisrun.SendOnceDialer(dial)
}

// sendOnceNodes returns a node constructor that applies SendOnce to the
// node's options and then builds it with next (redis.NewClient when nil).
func sendOnceNodes(next func(*redis.Options) *redis.Client) func(*redis.Options) *redis.Client {
	if next == nil {
		next = redis.NewClient
	}
	return func(o *redis.Options) *redis.Client {
		sendOnce(o)
		return next(o)
	}
}
