// Package redisstore keeps sluice's limiter state in Redis or Valkey, so that
// every process of a service spends one budget.
//
// Each decision is one atomic Lua script (scripts/*.lua, one per algorithm,
// each a line-by-line mirror of its step in package algo, so this store and
// memstore give identical decisions), sent as EVALSHA with EVAL on NOSCRIPT
// (and for good when the ACL user may not run EVALSHA): one round trip. The
// key's state is one string value whose TTL ends when the state is
// equivalent to fresh, plus a margin; the script sets value and TTL
// together, so no key is left without one, and gives a TTL to any key it
// finds without.
//
// A Store is a store.Store: pass it to sluice.New. Time is the server's
// TIME by default, so application servers with skewed clocks agree;
// WithClock decides at the caller's clock instead (managed services that
// refuse TIME in scripts, replays, tests), and a sluice.Limiter over the
// store then waits by that clock too. An op that carries its own time
// (store.Op.At, as replays set it) is decided at that time.
//
// Concurrent decisions are batched into pipelines (one round trip for many
// decisions), and the single decisions of a batch that may share a script
// (takes, and charges of one key) into one multi-decision script
// (scripts/multi.lua) that makes them in turn: it multiplies throughput
// under load. WithoutBatching sends each decision on its own for strict
// per-call latency.
//
// A charge (store.Charge: work whose cost is known afterwards, never
// refused, leaving the key in debt up to the limit's Debt) is one script
// like a take (scripts/charge.lua, or a decision of multi.lua), and a
// composite charge one script where its keys share a slot; the steps read
// a key in debt as package algo does (SEMANTICS.md, "Charges and debt").
//
// # Routing
//
// New takes any go-redis client, and the store names several keys in one
// script only where they may share one: on one server (a Client, a Sentinel
// failover client), any; on a Redis Cluster (ClusterClient), keys of one
// hash slot; on a Ring, keys the Ring puts on one shard. Another
// UniversalClient is taken to keep each key apart: its decisions are never
// merged, and a composite of several keys is taken part by part and given
// back on a refusal (docs/stores.md, "Composites across slots"), as is a
// composite whose keys are not in one slot or shard, with or without a hold
// (an Acquire with parts: the hold first).
// A Ring moves keys when a shard goes down or comes back; limits then
// restart on the keys that moved.
//
// # Errors and the failure policy
//
// When Redis cannot be reached or does not answer in time (connection
// refused or reset, a timeout, the store's own WithTimeout, LOADING,
// CLUSTERDOWN, MASTERDOWN, READONLY after a failover, TRYAGAIN, BUSY) the
// failure policy decides: FailClosed returns ErrStoreUnavailable, FailOpen
// allows, FailLocal decides with an in-process memstore until Redis is back;
// a decision made by the policy is flagged Degraded. Everything else
// is returned as an error, never turned into an admission: the caller's own
// context that ended (its error, context.Canceled or
// context.DeadlineExceeded; a context ended before the call sends nothing),
// a key holding foreign data
// (ErrForeignKey), Redis out of memory (ErrOutOfMemory), an ACL refusal
// (ErrNoPermission; for TIME, use WithClock), a closed store
// (ErrClosed), an invalid request. A decision's error is its own: merged
// with others in one script, it fails alone and writes nothing.
//
// WithTimeout bounds how long a hung Redis can hold a call. A go-redis
// client with ContextTimeoutEnabled ends its calls by their deadline, and
// the store then sends a lone caller's decision on the caller's goroutine,
// and a batched caller waits for its pipeline alone (no timer, no watch on
// its context: the pipeline ends by its calls' deadlines, and a call whose
// context ended before it was sent is answered that error, unsent; one
// whose context ends on the way gets the decision, or its context's error
// if the call failed); without it go-redis waits out its ReadTimeout on a
// Redis that hangs, and the store keeps its timeout by handing each call to
// another goroutine.
//
// A decision whose reply is lost (the connection breaks or times out after
// the script ran) is one the store cannot know the outcome of. go-redis sends
// such a command again (after an EOF, a reset or a timeout: MaxRetries 3 by
// default; a cluster client whatever its MaxRetries, a pipeline whole), so
// the script may run twice and spend twice. SendOnce sets a client's
// options up (a Client's, a cluster's, a Ring's, a Sentinel client's) so
// that such a failure is reported as ErrReplyLost, which go-redis does not
// retry: the decision fails (the failure policy applies), and what its one
// run spent stays spent. go-redis
// still retries what never reached Redis (a dial, a wait for a pooled
// connection) and what Redis refused unrun (MOVED, ASK, READONLY, LOADING,
// TRYAGAIN). MaxRetries -1 alone keeps a redis.Client from sending anything
// twice but gives up those retries, and is not enough for a cluster client.
// sluice serve and sluice replay set their clients up with SendOnce.
//
// # Eviction
//
// A limiter key is state, not a cache entry: a Redis that evicts it forgets
// what was spent, and the key's next decision admits as on a fresh key. The
// store needs maxmemory-policy noeviction (the default), or a Redis of its
// own; every key it writes has a TTL, so the volatile-* policies evict them
// too. Store.CheckConfig checks it at start-up. Under noeviction a full
// Redis refuses writes, and the decisions that would write return
// ErrOutOfMemory.
package redisstore
