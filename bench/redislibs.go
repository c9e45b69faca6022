package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/redisstore"
)

// NoBatch is the name of sluice's Redis store with WithoutBatching() in the
// Redis groups.
const NoBatch = "sluice-nobatch"

// Peer is the library the Redis table's ratios are taken to.
const Peer = "redis_rate"

// RedisLibs lists the libraries of the Redis groups (BenchmarkRedisOneKey,
// BenchmarkRedisKeys10k64), in the order the benchmarks run them. All are
// given a client built from RedisOptions and the limit Rate, Burst.
var RedisLibs = []Lib{
	{Ref, "github.com/sluice-go/sluice",
		fmt.Sprintf("redisstore.New(client) (batching, the default); Take(ctx, key, PerSecond(%d).WithBurst(%d), 1) (token bucket, one EVALSHA)", Rate, Burst)},
	{Peer, "github.com/go-redis/redis_rate/v10",
		fmt.Sprintf("NewLimiter(client); Allow(ctx, key, Limit{Rate: %d, Burst: %d, Period: time.Second}) (GCRA, one EVALSHA)", Rate, Burst)},
	{"ulule", "github.com/ulule/limiter/v3",
		fmt.Sprintf("limiter.New(drivers/store/redis.NewStore(client), Rate{Limit: %d, Period: %v}); Get(ctx, key) (fixed window, one EVALSHA)", Burst, Window)},
	{NoBatch, "github.com/sluice-go/sluice",
		"as sluice, with redisstore.WithoutBatching(): every decision its own round trip"},
}

// The composite workload (BenchmarkComposite): a request passes under a
// per-chat limit, the usual Rate and Burst on one of Keys chat keys, and a
// global one on a single key, wide enough that it refuses nothing even in
// memory. All keys share the hash tag "{tg}", so on a cluster they would lie
// in one slot: the Redis store decides the pair in one script.
const (
	GlobalRate  = 1_000_000_000
	GlobalBurst = 1_000_000
	GlobalKey   = "{tg}:global"
)

// ChatKey returns the i-th chat key of the composite workload.
func ChatKey(i int) string { return "{tg}:chat:" + strconv.Itoa(i) }

// ChatLimit and GlobalLimit are the two parts' limits of the composite
// workload.
var (
	ChatLimit   = sluice.PerSecond(Rate).WithBurst(Burst)
	GlobalLimit = sluice.PerSecond(GlobalRate).WithBurst(GlobalBurst)
)

// CompositeString describes the composite workload, for cmd/compare.
func CompositeString() string {
	return fmt.Sprintf("single: Take(%s, chat key); composite: TakeAll of that and %s on %q (token buckets); %d chat keys %q… round-robin",
		ChatLimit, GlobalLimit, GlobalKey, Keys, ChatKey(0))
}

// SluiceScriptCommand returns the EVALSHA command line, as redis-benchmark
// takes it, that sluice's Redis store sends for one token-bucket decision
// under Rate and Burst at the server's time, on a key
// "sluice:rb:__rand_int__" (redis-benchmark -r N replaces __rand_int__ with a
// random number below N), and the reply the store got to it. It does not
// write the layout out: it makes that decision through the store
// (redisstore.New over a client to addr, without batching) and records the
// script call the store sends and its reply, loading the script on the
// server on the way. cmd/compare checks that the command, sent again on a
// fresh key, replies as the store's call did before benchmarking with it.
func SluiceScriptCommand(ctx context.Context, addr string) (args []string, reply []any, err error) {
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	defer c.Close()
	rec := &scriptRecorder{}
	c.AddHook(rec)
	st, err := redisstore.New(c, redisstore.WithoutBatching())
	if err != nil {
		return nil, nil, err
	}
	defer st.Close()
	if _, err := sluice.New(st).Take(ctx, "rb:__rand_int__", sluice.PerSecond(Rate).WithBurst(Burst), 1); err != nil {
		return nil, nil, err
	}
	sent, reply := rec.last()
	if len(sent) < 4 {
		return nil, nil, fmt.Errorf("the store sent no script call (%v)", sent)
	}
	out := make([]string, len(sent))
	for i, a := range sent {
		out[i] = fmt.Sprint(a)
	}
	if strings.EqualFold(out[0], "eval") {
		// EVALSHA was refused (NOSCRIPT, or a digest not computed here):
		// load the script, which the store sent as EVAL, to run it by
		// digest.
		sha, err := c.ScriptLoad(ctx, out[1]).Result()
		if err != nil {
			return nil, nil, err
		}
		out[1] = sha
	}
	out[0] = "EVALSHA"
	return out, reply, nil
}

// scriptRecorder is a go-redis hook that keeps the arguments of the last
// script call (EVALSHA or EVAL) sent and its reply (nil when it failed:
// NOSCRIPT, before the store sends EVAL).
type scriptRecorder struct {
	mu    sync.Mutex
	args  []any
	reply []any
}

func (h *scriptRecorder) last() (args, reply []any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.args, h.reply
}

func (h *scriptRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			var reply []any
			if err == nil {
				switch c := cmd.(type) {
				case *redis.IntSliceCmd: // how redisstore reads a decision
					for _, v := range c.Val() {
						reply = append(reply, v)
					}
				case *redis.SliceCmd:
					reply = c.Val()
				case *redis.Cmd:
					reply, _ = c.Slice()
				}
			}
			h.mu.Lock()
			h.args, h.reply = slices.Clone(cmd.Args()), reply
			h.mu.Unlock()
		}
		return err
	}
}

func (h *scriptRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// RoundTrips is what the server saw for Decisions sluice decisions made in
// one Mode: the script calls from INFO commandstats after CONFIG RESETSTAT,
// every command attributed to a client connection or to a script by MONITOR
// (INFO commandstats counts the commands a script runs with redis.call as
// well, so only MONITOR tells them from commands a client sent), and the
// client's round trips (single commands and pipelines, counted by a go-redis
// hook).
type RoundTrips struct {
	Mode      string
	Decisions int
	EvalSha   int64 // INFO commandstats
	Eval      int64 // INFO commandstats
	// ClientOther holds the commands clients sent other than EVALSHA and
	// EVAL, by name (MONITOR; the measurement's own INFO left out).
	ClientOther map[string]int64
	// InScript holds the commands the scripts ran, by name (MONITOR; INFO
	// commandstats agrees).
	InScript   map[string]int64
	RoundTrips int64
}

// ScriptCalls returns the script calls (EVALSHA and EVAL) per decision.
func (r RoundTrips) ScriptCalls() float64 { return float64(r.EvalSha+r.Eval) / float64(r.Decisions) }

// OtherCalls returns how many commands other than EVALSHA and EVAL clients
// sent.
func (r RoundTrips) OtherCalls() int64 {
	n := int64(0)
	for _, c := range r.ClientOther {
		n += c
	}
	return n
}

// OK reports whether the decisions took at most one script call each (a
// batch shares one) and clients sent nothing else.
func (r RoundTrips) OK() bool {
	calls := r.EvalSha + r.Eval
	return calls >= 1 && calls <= int64(r.Decisions) && r.OtherCalls() == 0
}

// OtherString lists the other commands clients sent, "none" without any.
func (r RoundTrips) OtherString() string { return countsString(r.ClientOther, 1) }

// InScriptString lists the commands the scripts ran, per decision.
func (r RoundTrips) InScriptString() string { return countsString(r.InScript, r.Decisions) }

func countsString(m map[string]int64, per int) string {
	if len(m) == 0 {
		return "none"
	}
	names := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(names))
	for i, name := range names {
		if per == 1 {
			parts[i] = fmt.Sprintf("%s ×%d", strings.ToUpper(name), m[name])
		} else {
			parts[i] = fmt.Sprintf("%s ×%.3g", strings.ToUpper(name), float64(m[name])/float64(per))
		}
	}
	return strings.Join(parts, ", ")
}

// A roundTripMode is one way of making decisions in MeasureRoundTrips.
type roundTripMode struct {
	name      string
	callers   int
	batching  bool
	composite bool
}

var roundTripModes = []roundTripMode{
	{"Take, serial, WithoutBatching()", 1, false, false},
	{"Take, serial, batching (default)", 1, true, false},
	{fmt.Sprintf("Take, %d goroutines, WithoutBatching()", Callers), Callers, false, false},
	{fmt.Sprintf("Take, %d goroutines, batching (default)", Callers), Callers, true, false},
	{"TakeAll of 2 parts ({hash tag}), serial, batching (default)", 1, true, true},
	{fmt.Sprintf("TakeAll of 2 parts ({hash tag}), %d goroutines, batching (default)", Callers), Callers, true, true},
}

// MeasureRoundTrips makes n sluice decisions (Take under Rate and Burst, or
// TakeAll of the composite workload) in each mode, serially or from Callers
// goroutines, with and without batching, and returns what the server at addr
// saw. Before each measurement the client's pool is filled and the script
// loaded, so that no connection set-up (HELLO) or NOSCRIPT fallback is
// counted: what remains is the steady state. The server must serve nothing
// else meanwhile.
func MeasureRoundTrips(ctx context.Context, addr string, n int) ([]RoundTrips, error) {
	admin := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, PoolSize: 1})
	defer admin.Close()
	if err := admin.Ping(ctx).Err(); err != nil { // its own HELLO, before any count
		return nil, err
	}
	var out []RoundTrips
	for _, m := range roundTripModes {
		r, err := measureRoundTrips(ctx, admin, addr, n, m)
		if err != nil {
			return out, fmt.Errorf("%s: %w", m.name, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func measureRoundTrips(ctx context.Context, admin *redis.Client, addr string, n int, m roundTripMode) (RoundTrips, error) {
	c := redis.NewClient(RedisOptions(addr))
	defer c.Close()
	var trips atomic.Int64
	c.AddHook(countHook{&trips})
	var opts []redisstore.Option
	if !m.batching {
		opts = append(opts, redisstore.WithoutBatching())
	}
	st, err := redisstore.New(c, opts...)
	if err != nil {
		return RoundTrips{}, err
	}
	defer st.Close()
	lim := sluice.New(st)
	decide := func(i int) error {
		var r sluice.Result
		var err error
		if m.composite {
			r, err = lim.TakeAll(ctx, []sluice.Part{{Key: ChatKey(i % Keys), Limit: ChatLimit, Cost: 1}, {Key: GlobalKey, Limit: GlobalLimit, Cost: 1}}, nil)
		} else {
			r, err = lim.Take(ctx, "rt:"+strconv.Itoa(i%Keys), ChatLimit, 1)
		}
		if err == nil && !r.Allowed {
			err = fmt.Errorf("decision %d refused", i)
		}
		return err
	}
	run := func(n int) error {
		return Spread(n, m.callers, func(_, i int) error { return decide(i) })
	}
	// Fill the pool (each connection's HELLO) and load the script.
	if err := Spread(Callers, Callers, func(_, _ int) error { return c.Ping(ctx).Err() }); err != nil {
		return RoundTrips{}, err
	}
	if err := run(m.callers * 4); err != nil {
		return RoundTrips{}, err
	}

	mon, err := startMonitor(addr)
	if err != nil {
		return RoundTrips{}, err
	}
	defer mon.close()
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		return RoundTrips{}, err
	}
	trips.Store(0)
	if err := run(n); err != nil {
		return RoundTrips{}, err
	}
	r := RoundTrips{Mode: m.name, Decisions: n, RoundTrips: trips.Load()}
	// MONITOR shows commands in the order they run: the INFO comes after
	// every decision's.
	info, err := admin.Info(ctx, "commandstats").Result()
	if err != nil {
		return r, err
	}
	if r.ClientOther, r.InScript, err = mon.wait(); err != nil {
		return r, err
	}
	for name, st := range ParseCommandStats(info) {
		calls := st.Calls
		switch name {
		case "evalsha":
			r.EvalSha = calls
		case "eval":
			r.Eval = calls
		case "config|resetstat", "info": // the measurement's own
		default:
			if seen := r.ClientOther[name] + r.InScript[name]; seen != calls {
				return r, fmt.Errorf("INFO commandstats counts %d %s, MONITOR saw %d", calls, name, seen)
			}
		}
	}
	if got := r.ClientOther["evalsha"] + r.ClientOther["eval"]; got != r.EvalSha+r.Eval {
		return r, fmt.Errorf("INFO commandstats counts %d script calls, MONITOR saw %d", r.EvalSha+r.Eval, got)
	}
	delete(r.ClientOther, "evalsha")
	delete(r.ClientOther, "eval")
	return r, nil
}

// monitor reads a MONITOR connection and counts the commands it shows, by
// name, sent by clients and run by scripts, until it shows an INFO.
type monitor struct {
	conn        net.Conn
	done        chan struct{}
	client, lua map[string]int64
	err         error
}

func startMonitor(addr string) (*monitor, error) {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	rd := bufio.NewReader(conn)
	if _, err := conn.Write([]byte("*1\r\n$7\r\nMONITOR\r\n")); err != nil {
		conn.Close()
		return nil, err
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := rd.ReadString('\n'); err != nil || line != "+OK\r\n" {
		conn.Close()
		return nil, fmt.Errorf("MONITOR: %q %v", line, err)
	}
	conn.SetReadDeadline(time.Time{})
	m := &monitor{conn: conn, done: make(chan struct{}), client: map[string]int64{}, lua: map[string]int64{}}
	go func() {
		defer close(m.done)
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				m.err = fmt.Errorf("MONITOR: %w", err)
				return
			}
			// +1796206870.025917 [0 lua] "set" "a" "1"
			_, rest, ok := strings.Cut(line, " [")
			src, rest, ok2 := strings.Cut(rest, "] \"")
			name, _, ok3 := strings.Cut(rest, "\"")
			if !ok || !ok2 || !ok3 {
				m.err = fmt.Errorf("MONITOR: unexpected line %q", line)
				return
			}
			name = strings.ToLower(name)
			if strings.HasSuffix(src, " lua") {
				m.lua[name]++
				continue
			}
			if name == "info" {
				return
			}
			m.client[name]++
		}
	}()
	return m, nil
}

// wait returns the counts once the monitor has seen an INFO.
func (m *monitor) wait() (client, lua map[string]int64, err error) {
	select {
	case <-m.done:
	case <-time.After(30 * time.Second):
		m.conn.Close()
		<-m.done
		return nil, nil, errors.New("MONITOR: no INFO within 30s")
	}
	return m.client, m.lua, m.err
}

func (m *monitor) close() { m.conn.Close() }

// CmdStat is one line of INFO commandstats.
type CmdStat struct {
	Calls int64
	Usec  int64 // time spent in the command, µs (a script's includes the commands it runs)
}

// ParseCommandStats reads INFO commandstats: command name → its stats.
func ParseCommandStats(info string) map[string]CmdStat {
	out := map[string]CmdStat{}
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, found := strings.CutPrefix(name, "cmdstat_")
		if !ok || !found {
			continue
		}
		var st CmdStat
		for field := range strings.SplitSeq(rest, ",") {
			k, v, _ := strings.Cut(field, "=")
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue
			}
			switch k {
			case "calls":
				st.Calls = n
			case "usec":
				st.Usec = n
			}
		}
		out[name] = st
	}
	return out
}

// ScriptMicros returns the time the server at c has spent in EVALSHA and
// EVAL since its stats were last reset, in µs, from INFO commandstats.
func ScriptMicros(ctx context.Context, c redis.UniversalClient) (int64, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	st := ParseCommandStats(info)
	return st["evalsha"].Usec + st["eval"].Usec, nil
}

// countHook counts a client's round trips: each command sent alone, and each
// pipeline.
type countHook struct{ n *atomic.Int64 }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// Spread calls fn(g, i) for i from 0 to n-1 from callers goroutines
// (g is the goroutine's number), each taking the next i as it is free, and
// returns the first error.
func Spread(n, callers int, fn func(g, i int) error) error {
	var next atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(g, i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}
