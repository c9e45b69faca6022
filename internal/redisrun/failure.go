package redisrun

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// A Failure is what the error of a call says about Redis: an outage, which
// waiting may cure (the failure policy's business), or an error it will
// not.
type Failure uint8

const (
	// Outage: Redis cannot be reached or does not answer in time (the
	// network, a timeout), or cannot serve now but will (transientReplies).
	Outage Failure = iota
	// ClientClosed: the go-redis client was closed.
	ClientClosed
	// NoPermission: the ACL user may not run a command (NOPERM).
	NoPermission
	// ForeignKey: a key holds another type (WRONGTYPE) or a value sluice did
	// not write (a script's "sluice: foreign data").
	ForeignKey
	// OutOfMemory: Redis refused a write for memory (OOM).
	OutOfMemory
	// Refused: any other error reply.
	Refused
)

// transientReplies are the error replies of a server that cannot serve now
// but will (loading, failing over, a slot moving, a script running too
// long, too many clients): outages.
var transientReplies = []string{
	"LOADING", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "TRYAGAIN", "BUSY",
	"MISCONF", "NOREPLICAS", "MOVED", "ASK", "NOSCRIPT", "ERR max number of clients",
}

// Classify returns what err, the error of a call, says about Redis.
func Classify(err error) Failure {
	if errors.Is(err, redis.ErrClosed) {
		return ClientClosed
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return Outage
	}
	msg := re.Error()
	for _, p := range transientReplies {
		if strings.HasPrefix(msg, p) {
			return Outage
		}
	}
	switch {
	case strings.HasPrefix(msg, "NOPERM"), strings.Contains(msg, "can't run this command"):
		return NoPermission
	case strings.HasPrefix(msg, "WRONGTYPE"), strings.Contains(msg, "sluice: foreign data"):
		return ForeignKey
	case strings.HasPrefix(msg, "OOM"):
		return OutOfMemory
	}
	return Refused
}
