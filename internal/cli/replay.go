package cli

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/internal/trace"
	"github.com/sluice-go/sluice/memstore"
	"github.com/sluice-go/sluice/redisstore"
)

func init() {
	commands["replay"] = command{
		summary: "run a trace of requests (JSON lines on stdin) through one limit and print every decision",
		run:     replay,
	}
}

// decider makes one decision at a time the caller gives: the trace's.
type decider interface {
	TakeAt(ctx context.Context, req sluice.Request, now int64) (algo.Decision, error)
	Close() error
}

type memDecider struct{ s *memstore.Store }

func (m memDecider) TakeAt(_ context.Context, req sluice.Request, now int64) (algo.Decision, error) {
	return m.s.TakeAt(req, now)
}

func (memDecider) Close() error { return nil }

// openStore returns the decider a --store flag names: memory, or a Redis URL
// (redis://HOST:PORT/DB, rediss://..., redis-cluster://HOST:PORT,HOST:PORT).
func openStore(spec, prefix string) (decider, error) {
	if spec == "memory" {
		return memDecider{memstore.New()}, nil
	}
	c, err := redisClient(spec)
	if err != nil {
		return nil, err
	}
	if prefix == "" {
		prefix = fmt.Sprintf("sluice:replay:%d:%d:", time.Now().UnixNano(), os.Getpid())
	}
	// The trace's time drives every decision; the long margin keeps a key
	// alive in real time however slowly the replay runs.
	rs, err := redisstore.NewGoRedis(c, redisstore.WithPrefix(prefix), redisstore.WithTTLMargin(replayTTLMargin), redisstore.WithTimeout(10*time.Second))
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return redisDecider{rs, c}, nil
}

// replayTTLMargin is how long past its trace-time TTL a replay's key lives.
const replayTTLMargin = time.Hour

func redisClient(spec string) (redis.UniversalClient, error) {
	if rest, ok := strings.CutPrefix(spec, "redis-cluster://"); ok {
		addrs := strings.Split(rest, ",")
		for _, a := range addrs {
			if _, _, err := net.SplitHostPort(a); err != nil {
				return nil, fmt.Errorf("store %q: %q is not HOST:PORT", spec, a)
			}
		}
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs}), nil
	}
	if strings.HasPrefix(spec, "redis://") || strings.HasPrefix(spec, "rediss://") {
		o, err := redis.ParseURL(spec)
		if err != nil {
			return nil, fmt.Errorf("store %q: %v", spec, err)
		}
		return redis.NewClient(o), nil
	}
	return nil, fmt.Errorf("unknown store %q (want memory, redis://HOST:PORT/DB, rediss://..., or redis-cluster://HOST:PORT,HOST:PORT)", spec)
}

type redisDecider struct {
	s *redisstore.Store
	c redis.UniversalClient
}

func (r redisDecider) TakeAt(ctx context.Context, req sluice.Request, now int64) (algo.Decision, error) {
	return r.s.TakeAt(ctx, req, now)
}

func (r redisDecider) Close() error {
	r.s.Close()
	return r.c.Close()
}

// limitFlags are the flags that define one limit, shared by the subcommands.
type limitFlags struct {
	algorithm, limit string
	burst            int64
}

func (f *limitFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.algorithm, "algorithm", "token-bucket", "token-bucket, gcra, leaky-bucket, fixed-window, sliding-window or sliding-log")
	fs.StringVar(&f.limit, "limit", "", "the limit as RATE/PERIOD, PERIOD in Go duration syntax: 10/1s, 20/100ms, 1/1m, 5/250us")
	fs.Int64Var(&f.burst, "burst", -1, "the burst: bucket capacity (token-bucket, gcra), units that may wait (leaky-bucket); default the rate")
}

func (f *limitFlags) parse() (sluice.Limit, error) {
	if f.limit == "" {
		return sluice.Limit{}, errors.New("--limit RATE/PERIOD is required")
	}
	l, err := sluice.ParseLimit(f.limit)
	if err != nil {
		return l, err
	}
	a, err := sluice.ParseAlgorithm(f.algorithm)
	if err != nil {
		return l, err
	}
	l = l.Using(a)
	if f.burst >= 0 {
		l = l.WithBurst(f.burst)
	}
	return l, l.Validate()
}

func replay(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var lf limitFlags
	lf.register(fs)
	storeSpec := fs.String("store", "memory", "where decisions are made: memory, redis://HOST:PORT/DB, rediss://HOST:PORT/DB, redis-cluster://HOST:PORT,HOST:PORT")
	prefix := fs.String("prefix", "", "Redis key prefix (default: a fresh namespace per run, so replays never see each other's state)")
	summary := fs.Bool("summary", false, "print totals per key and overall to stderr")
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: sluice replay --limit RATE/PERIOD [--algorithm ALGO] [--burst B] [--store memory|redis://HOST:PORT/DB] [--prefix P] [--summary] < trace.jsonl > decisions.jsonl

Reads one request a line, {"t_us": 1764000000000000, "key": "user:1", "cost": 1}
(cost defaults to 1), decides each at its t_us, and writes one line per request:
its fields plus allowed, remaining, retry_after_us, reset_after_us, delay_us, or
plus "error" for a request that could never pass. Time comes from the trace only,
also in Redis, where each decision runs at the trace's time.

`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	lim, err := lf.parse()
	if err != nil {
		return err
	}
	p, err := lim.Params()
	if err != nil {
		return err
	}
	store, err := openStore(*storeSpec, *prefix)
	if err != nil {
		return err
	}
	defer store.Close()

	out := bufio.NewWriterSize(stdout, 64*1024)
	defer out.Flush()
	tally := newTally(p)
	r := trace.NewReader(stdin)
	var buf []byte
	for {
		req, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			out.Flush()
			return err
		}
		buf = buf[:0]
		if err := sluice.CheckParams(req.Key, p, req.Cost); err != nil {
			buf = trace.AppendError(buf, req, err)
			tally.fail(req.Key)
		} else {
			d, err := store.TakeAt(ctx, sluice.Request{Key: req.Key, Params: p, Cost: req.Cost, MaxDelay: algo.Never}, req.T)
			if err != nil {
				out.Flush()
				return fmt.Errorf("line %d: %w", req.Line, err)
			}
			buf = trace.AppendDecision(buf, req, d)
			tally.add(req.Key, req.T, req.Cost, d)
		}
		if _, err := out.Write(buf); err != nil {
			return err
		}
	}
	if *summary {
		tally.print(stderr, lim)
	}
	return out.Flush()
}

// tally counts a replay's decisions per key for --summary.
type tally struct {
	p    algo.Params
	keys map[string]*keyTally
}

type keyTally struct {
	allowed, denied, errors, units int64
	admitted                       []event // when admitted units proceed
}

type event struct{ t, n int64 }

func newTally(p algo.Params) *tally { return &tally{p: p, keys: map[string]*keyTally{}} }

func (t *tally) key(k string) *keyTally {
	kt := t.keys[k]
	if kt == nil {
		kt = &keyTally{}
		t.keys[k] = kt
	}
	return kt
}

func (t *tally) fail(k string) { t.key(k).errors++ }

func (t *tally) add(k string, now, cost int64, d algo.Decision) {
	kt := t.key(k)
	if !d.Allowed {
		kt.denied++
		return
	}
	kt.allowed++
	kt.units += cost
	if cost > 0 {
		kt.admitted = append(kt.admitted, event{now + d.Delay, cost})
	}
}

// peak is the most units in any span (t−period, t] of the events.
func peak(ev []event, period int64) int64 {
	slices.SortFunc(ev, func(a, b event) int { return int(min(max(a.t-b.t, -1), 1)) })
	var best, sum int64
	lo := 0
	for _, e := range ev {
		sum += e.n
		for ev[lo].t <= e.t-period {
			sum -= ev[lo].n
			lo++
		}
		best = max(best, sum)
	}
	return best
}

func (t *tally) print(w io.Writer, lim sluice.Limit) {
	names := make([]string, 0, len(t.keys))
	for k := range t.keys {
		names = append(names, k)
	}
	slices.Sort(names)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "key\tallowed\tdenied\terrors\tunits\tpeak/%s\t\n", lim.Period)
	var all keyTally
	for _, k := range names {
		kt := t.keys[k]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t\n", strings.ReplaceAll(k, "\t", " "), kt.allowed, kt.denied, kt.errors, kt.units, peak(kt.admitted, t.p.Period))
		all.allowed += kt.allowed
		all.denied += kt.denied
		all.errors += kt.errors
		all.units += kt.units
		all.admitted = append(all.admitted, kt.admitted...)
	}
	fmt.Fprintf(tw, "all %d keys\t%d\t%d\t%d\t%d\t%d\t\n", len(names), all.allowed, all.denied, all.errors, all.units, peak(all.admitted, t.p.Period))
	tw.Flush()
}
