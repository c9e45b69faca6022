package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Script is a Lua script with its SHA1, run by EVALSHA with EVAL as the
// fallback when the server does not have it (NOSCRIPT: after SCRIPT FLUSH, a
// restart or a failover).
type Script struct {
	Src string
	SHA string
}

// NewScript returns src as a Script.
func NewScript(src string) *Script {
	h := sha1.Sum([]byte(src))
	return &Script{Src: src, SHA: hex.EncodeToString(h[:])}
}

// Call is one script run: its keys and arguments in, its reply or error out.
type Call struct {
	Script *Script
	Keys   []string
	Args   []any
	Reply  []int64
	Err    error
}

// Client runs scripts on Redis or Valkey. Run sends the calls, as one pipeline
// where it can, each as EVALSHA with EVAL on NOSCRIPT, and sets each call's
// Reply or Err. GoRedis adapts go-redis; another client is plugged in by
// implementing Run.
type Client interface {
	Run(ctx context.Context, calls []*Call)
}

// GoRedis adapts a go-redis client: *redis.Client, *redis.ClusterClient,
// *redis.Ring, a Sentinel failover client, or any UniversalClient. On a cluster
// a pipeline is split by node, each call going to the node of its first key.
func GoRedis(c redis.UniversalClient) Client { return goRedis{c} }

type goRedis struct{ c redis.UniversalClient }

func (g goRedis) Run(ctx context.Context, calls []*Call) {
	if len(calls) == 1 {
		c := calls[0]
		c.Reply, c.Err = g.eval(ctx, c, false)
		if isNoScript(c.Err) {
			c.Reply, c.Err = g.eval(ctx, c, true)
		}
		return
	}
	cmds := make([]*redis.IntSliceCmd, len(calls))
	g.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range calls {
			cmds[i] = scriptCmd(ctx, c, false)
			_ = p.Process(ctx, cmds[i])
		}
		return nil
	})
	var missing []int
	for i, cmd := range cmds {
		calls[i].Reply, calls[i].Err = cmd.Result()
		if isNoScript(calls[i].Err) {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return
	}
	g.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, i := range missing {
			cmds[i] = scriptCmd(ctx, calls[i], true)
			_ = p.Process(ctx, cmds[i])
		}
		return nil
	})
	for _, i := range missing {
		calls[i].Reply, calls[i].Err = cmds[i].Result()
	}
}

func (g goRedis) eval(ctx context.Context, c *Call, src bool) ([]int64, error) {
	cmd := scriptCmd(ctx, c, src)
	_ = g.c.Process(ctx, cmd)
	return cmd.Result()
}

// scriptCmd is c as EVALSHA (EVAL with src) whose reply, an array of
// integers, is read straight into []int64.
func scriptCmd(ctx context.Context, c *Call, src bool) *redis.IntSliceCmd {
	args := make([]any, 0, 3+len(c.Keys)+len(c.Args))
	if src {
		args = append(args, "eval", c.Script.Src)
	} else {
		args = append(args, "evalsha", c.Script.SHA)
	}
	args = append(args, len(c.Keys))
	for _, k := range c.Keys {
		args = append(args, k)
	}
	return redis.NewIntSliceCmd(ctx, append(args, c.Args...)...)
}

// boundByContext reports whether the go-redis client ends every call by its
// context's deadline (ContextTimeoutEnabled): dialing, waiting for a pooled
// connection, reading and writing. Without it go-redis waits out its own
// ReadTimeout (3s by default) on a Redis that does not answer.
func (g goRedis) boundByContext() bool {
	switch c := g.c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// A contextBound Client ends every Run by its context's deadline.
type contextBound interface{ boundByContext() bool }

func isNoScript(err error) bool {
	var re redis.Error
	return err != nil && errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOSCRIPT")
}
