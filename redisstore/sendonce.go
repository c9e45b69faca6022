package redisstore

import (
	"cmp"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/internal/redisrun"
)

// ErrReplyLost matches (errors.Is) the error of a decision whose connection
// broke or timed out after the decision was sent: it may have run and spent,
// and its reply is lost. It comes wrapped in sluice.ErrStoreUnavailable (the
// failure policy applies), from a client set up by SendOnce,
// SendOnceCluster, SendOnceRing or SendOnceFailover.
var ErrReplyLost = redisrun.ErrReplyLost

// SendOnce sets o up so that go-redis never sends a command again once it
// may have reached Redis. By default go-redis sends a command again when its
// connection breaks or times out before the reply comes (an EOF, a reset,
// a read timeout), though the command may have run: a decision would then
// run twice and spend twice. With SendOnce such a failure is reported as
// ErrReplyLost, which go-redis does not retry; it still retries what is safe
// to retry (a dial that failed, a wait for a pooled connection, MOVED and
// ASK, READONLY, LOADING, TRYAGAIN and the like, where nothing ran).
//
// SendOnce wraps o.Dialer (go-redis's own dialer, TLS included, when
// nil); call it before redis.NewClient. MaxRetries -1 also keeps a
// redis.Client from sending anything twice, but gives up the safe retries;
// for a cluster it is not enough (see SendOnceCluster).
func SendOnce(o *redis.Options) {
	dial := o.Dialer
	if dial == nil {
		dial = redis.NewDialer(o)
	}
	o.Dialer = redisrun.SendOnceDialer(dial)
}

// SendOnceCluster is SendOnce for every node client of a cluster client
// (through o.NewClient, which it wraps). A cluster client sends a command
// again after a broken connection whatever its MaxRetries (its own loop
// follows MaxRedirects), so without it a decision whose reply is lost runs
// twice on a cluster.
func SendOnceCluster(o *redis.ClusterOptions) {
	o.NewClient = sendOnceNodes(o.NewClient)
}

// SendOnceFailover is SendOnce for a Sentinel client
// (redis.NewFailoverClient, NewFailoverClusterClient): it wraps o.Dialer
// (when nil, a dialer like go-redis's own, with o.DialTimeout, 5s when 0, and
// o.TLSConfig as they are when it is called), which dials the master, the
// replicas and the sentinels.
func SendOnceFailover(o *redis.FailoverOptions) {
	dial := o.Dialer
	if dial == nil {
		dial = redis.NewDialer(&redis.Options{DialTimeout: cmp.Or(o.DialTimeout, 5*time.Second), TLSConfig: o.TLSConfig})
	}
	o.Dialer = redisrun.SendOnceDialer(dial)
}

// SendOnceRing is SendOnce for every shard client of a ring client (through
// o.NewClient, which it wraps).
func SendOnceRing(o *redis.RingOptions) {
	o.NewClient = sendOnceNodes(o.NewClient)
}

// sendOnceNodes returns a node constructor that applies SendOnce to the
// node's options and then builds it with next (redis.NewClient when nil).
func sendOnceNodes(next func(*redis.Options) *redis.Client) func(*redis.Options) *redis.Client {
	if next == nil {
		next = redis.NewClient
	}
	return func(o *redis.Options) *redis.Client {
		SendOnce(o)
		return next(o)
	}
}
