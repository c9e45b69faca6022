package redisrun

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Client runs scripts on Redis or Valkey. Run sends the calls, as one pipeline
// where it can, each as EVALSHA with EVAL on NOSCRIPT (EVAL when
// Script.SHA is ""), and sets each call's Reply or Err.
// Each call must go to the server of its first key. GoRedis
// adapts go-redis; another client is plugged in by implementing Run, and
// Router when it can say where keys live (without it the store never names
// two keys in one script; see Router).
type Client interface {
	Run(ctx context.Context, calls []*Call)
}

// A Router is a Client that knows where keys live. The store names several
// keys in one script (the single decisions it merges under load, the parts
// of a composite) only when Group puts them all in one group: keys that one
// server holds and that the server lets one script touch. On one server
// every key may share a group; on a Redis Cluster, keys of one hash slot
// (Slot); on a client that shards by key (a go-redis Ring), keys of one
// shard.
//
// A Client that is not a Router is taken to keep each key where no other
// key may be: its decisions are never merged (they still share pipelines)
// and a composite of several keys is taken part by part (see
// Store.TakeAll). OneNode and BySlot say where keys live for a Client that
// does not.
type Router interface {
	Client
	// Group returns key's group. ok is false when the client does not know
	// where key lives now (a shard that is down): the store then names key
	// alone in its script.
	Group(key string) (group uint64, ok bool)
}

// OneNode returns c as a Router that keeps every key on one server (a
// single Redis, or a primary with replicas behind Sentinel): any keys may
// share a script.
func OneNode(c Client) Client {
	return routed{c, func(string) (uint64, bool) { return 0, true }}
}

// GroupOf returns c's Router.Group, or, for a Client that is not a Router,
// a Group that keeps every key apart.
func GroupOf(c Client) func(key string) (uint64, bool) {
	if r, ok := c.(Router); ok {
		return r.Group
	}
	return func(string) (uint64, bool) { return 0, false }
}

// BySlot returns c as a Router for a Redis Cluster client: keys share a
// script when they share a hash slot (Slot).
func BySlot(c Client) Client {
	return routed{c, func(key string) (uint64, bool) { return uint64(Slot(key)), true }}
}

type routed struct {
	Client
	group func(string) (uint64, bool)
}

// Group returns key's group, as the wrapper says.
func (r routed) Group(key string) (uint64, bool) { return r.group(key) }

func (r routed) boundByContext() bool { return BoundByContext(r.Client) }

func (r routed) maxmemoryPolicies(ctx context.Context) ([]string, error) {
	return MaxmemoryPolicies(ctx, r.Client)
}

// GoRedis adapts a go-redis client: *redis.Client (a single node, or the
// Sentinel failover client), *redis.ClusterClient or *redis.Ring; it is a
// Router for each (one node: every key together; a cluster: keys of one hash
// slot; a Ring: keys of one shard, as the Ring places them). Another
// UniversalClient is taken to keep each key apart (see Router). A pipeline
// is split by node (cluster) or shard (Ring), each call going to the node of
// its first key. When the ACL user may not run EVALSHA the adapter sends
// EVAL from then on.
func GoRedis(c redis.UniversalClient) Client {
	g := &goRedis{c: c}
	switch c := c.(type) {
	case *redis.Client:
		g.group = func(string) (uint64, bool) { return 0, true }
	case *redis.ClusterClient:
		g.group = func(key string) (uint64, bool) { return uint64(Slot(key)), true }
	case *redis.Ring:
		g.group = func(key string) (uint64, bool) { return g.shard(c, key) }
	default:
		g.group = func(string) (uint64, bool) { return 0, false }
	}
	return g
}

type goRedis struct {
	c     redis.UniversalClient
	group func(key string) (uint64, bool)
	// evalOnly: the server refused EVALSHA (NOPERM), so every call is an
	// EVAL from then on.
	evalOnly atomic.Bool
	// shas holds, when SHA-1 may not be used here (Script.SHA is ""), the
	// digest SCRIPT LOAD returned for each script.
	shas sync.Map // *Script → string
	// shards numbers a Ring's shard clients, for Group.
	shards    sync.Map // *redis.Client → uint64
	numShards atomic.Uint64
}

// Group returns key's group: see GoRedis.
func (g *goRedis) Group(key string) (uint64, bool) { return g.group(key) }

// shard returns the number of the Ring shard that holds key now: the Ring's
// own choice (GetShardClientForKey hashes the key's {hash tag}, or the key,
// over the live shards), the one its pipelines send the key's calls to.
func (g *goRedis) shard(r *redis.Ring, key string) (uint64, bool) {
	c, err := r.GetShardClientForKey(key)
	if err != nil || c == nil {
		return 0, false
	}
	if n, ok := g.shards.Load(c); ok {
		return n.(uint64), true
	}
	n, _ := g.shards.LoadOrStore(c, g.numShards.Add(1))
	return n.(uint64), true
}

// Run sends the calls, one pipeline when there are several, and EVAL for
// those EVALSHA could not run (NOSCRIPT; NOPERM on EVALSHA).
func (g *goRedis) Run(ctx context.Context, calls []*Call) {
	evalOnly := g.evalOnly.Load()
	if len(calls) == 1 {
		c := calls[0]
		g.eval(ctx, c, g.digest(ctx, c.Script, evalOnly))
		if g.retry(c.Err) {
			g.eval(ctx, c, "")
		}
		return
	}
	cmds := make([]redis.Cmder, len(calls))
	_, err := g.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range calls {
			cmds[i] = scriptCmd(ctx, c, g.digest(ctx, c.Script, evalOnly))
			_ = p.Process(ctx, cmds[i])
		}
		return nil
	})
	var missing []int
	for i, cmd := range cmds {
		readPiped(calls[i], cmd, err)
		if g.retry(calls[i].Err) {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return
	}
	_, err = g.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, i := range missing {
			cmds[i] = scriptCmd(ctx, calls[i], "")
			_ = p.Process(ctx, cmds[i])
		}
		return nil
	})
	for _, i := range missing {
		readPiped(calls[i], cmds[i], err)
	}
}

// readPiped is read for a command of a pipeline that failed with err (nil:
// none): a command left with neither a reply nor an error of its own (a
// dial that failed on go-redis's last try leaves the pipeline's commands
// so) has err. Every script replies an array, so a command that ran has a
// reply.
func readPiped(c *Call, cmd redis.Cmder, err error) {
	read(c, cmd)
	if err != nil && c.Err == nil && c.Reply == nil && c.Values == nil {
		c.Err = err
	}
}

// digest returns the name to run s by with EVALSHA, or "" for EVAL.
func (g *goRedis) digest(ctx context.Context, s *Script, evalOnly bool) string {
	if evalOnly {
		return ""
	}
	if sha := s.SHA(); sha != "" {
		return sha
	}
	if sha, ok := g.shas.Load(s); ok {
		return sha.(string)
	}
	// SHA-1 may not be used in this process: the server names the script.
	sha, err := g.c.ScriptLoad(ctx, s.Src).Result()
	if err != nil {
		return ""
	}
	g.shas.Store(s, sha)
	return sha
}

// retry reports whether an EVALSHA that failed with err is to be sent again
// as EVAL: the server does not have the script (NOSCRIPT), or the ACL user
// may not run EVALSHA (then no call is sent as EVALSHA again).
func (g *goRedis) retry(err error) bool {
	var re redis.Error
	if err == nil || !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	if strings.HasPrefix(msg, "NOSCRIPT") {
		return true
	}
	if strings.HasPrefix(msg, "NOPERM") && strings.Contains(strings.ToLower(msg), "evalsha") {
		g.evalOnly.Store(true)
		return true
	}
	return false
}

func (g *goRedis) eval(ctx context.Context, c *Call, sha string) {
	cmd := scriptCmd(ctx, c, sha)
	_ = g.c.Process(ctx, cmd)
	read(c, cmd)
}

// scriptCmd is c as EVALSHA sha (EVAL when sha is ""), whose reply, an array
// of integers, is read straight into []int64 (an array of any values for a
// Mixed call).
func scriptCmd(ctx context.Context, c *Call, sha string) redis.Cmder {
	args := make([]any, 0, 3+len(c.Keys)+len(c.Args))
	if sha == "" {
		args = append(args, "eval", c.Script.Src)
	} else {
		args = append(args, "evalsha", sha)
	}
	args = append(args, len(c.Keys))
	for _, k := range c.Keys {
		args = append(args, k)
	}
	args = append(args, c.Args...)
	if c.Mixed {
		return redis.NewSliceCmd(ctx, args...)
	}
	return redis.NewIntSliceCmd(ctx, args...)
}

// read sets c's reply, or its error, from cmd (made by scriptCmd).
func read(c *Call, cmd redis.Cmder) {
	switch cmd := cmd.(type) {
	case *redis.IntSliceCmd:
		c.Reply, c.Err = cmd.Result()
	case *redis.SliceCmd:
		c.Values, c.Err = cmd.Result()
	}
}

// boundByContext reports whether the go-redis client ends every call by its
// context's deadline (ContextTimeoutEnabled): dialing, waiting for a pooled
// connection, reading and writing. Without it go-redis waits out its own
// ReadTimeout (3s by default) on a Redis that does not answer.
func (g *goRedis) boundByContext() bool {
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

// BoundByContext reports whether c ends every Run by its context's deadline
// (a go-redis client with ContextTimeoutEnabled, through GoRedis): then a
// call may run on its caller's goroutine.
func BoundByContext(c Client) bool {
	cb, ok := c.(contextBound)
	return ok && cb.boundByContext()
}

// A configReader Client reads the maxmemory-policy of each of its servers.
type configReader interface {
	maxmemoryPolicies(ctx context.Context) ([]string, error)
}

// ErrNoConfigReader is the error of a Client that cannot read its servers'
// configuration (it does not come from GoRedis).
var ErrNoConfigReader = errors.New("the client cannot read the server's configuration")

// MaxmemoryPolicies returns the maxmemory-policy of every server c sends to
// (every master of a cluster, every shard of a Ring), or an error wrapping
// ErrNoConfigReader when c cannot read them.
func MaxmemoryPolicies(ctx context.Context, c Client) ([]string, error) {
	cr, ok := c.(configReader)
	if !ok {
		return nil, ErrNoConfigReader
	}
	return cr.maxmemoryPolicies(ctx)
}

// maxmemoryPolicies returns the maxmemory-policy of every server the client
// sends to (every master of a cluster, every shard of a Ring).
func (g *goRedis) maxmemoryPolicies(ctx context.Context) ([]string, error) {
	var mu sync.Mutex
	var out []string
	get := func(ctx context.Context, c *redis.Client) error {
		m, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		if err != nil {
			return err
		}
		mu.Lock()
		out = append(out, m["maxmemory-policy"])
		mu.Unlock()
		return nil
	}
	var err error
	switch c := g.c.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, get)
	case *redis.Ring:
		err = c.ForEachShard(ctx, get)
	case *redis.Client:
		err = get(ctx, c)
	default:
		var m map[string]string
		if m, err = g.c.ConfigGet(ctx, "maxmemory-policy").Result(); err == nil {
			out = append(out, m["maxmemory-policy"])
		}
	}
	return out, err
}
