package cli

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cmd/sluice/internal/runat"
	"github.com/sluice-go/sluice/cmd/sluice/internal/trace"
	"github.com/sluice-go/sluice/internal/algo"
	"github.com/sluice-go/sluice/internal/storelink"
	"github.com/sluice-go/sluice/redisstore"
	"github.com/sluice-go/sluice/store"
)

func init() {
	commands["replay"] = command{
		summary: "run a trace of requests (JSON lines on stdin) through one limit and print every decision",
		run:     replay,
	}
}

// openStore returns the store a --store flag names, where a replay decides
// at the trace's times (runat), and how to close it: memory, or a Redis
// URL (redis://HOST:PORT/DB, rediss://..., redis-cluster://HOST:PORT,HOST:PORT,
// redis-sentinel://HOST:PORT,HOST:PORT/MASTER, their rediss forms over TLS
// as st says).
func openStore(spec, prefix string, st storeTLS) (store.Store, func() error, error) {
	if spec == "memory" {
		return runat.Memory(), func() error { return nil }, nil
	}
	c, err := redisClient(spec, st)
	if err != nil {
		return nil, nil, err
	}
	if prefix == "" {
		prefix = fmt.Sprintf("sluice:replay:%d:%d:", time.Now().UnixNano(), os.Getpid())
	}
	// The trace's time drives every decision; the long margin keeps a key
	// alive in real time however slowly the replay runs.
	rs, err := redisstore.New(c, redisstore.WithPrefix(prefix), redisstore.WithTTLMargin(replayTTLMargin), redisstore.WithTimeout(10*time.Second))
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	return rs, func() error { return errors.Join(rs.Close(), c.Close()) }, nil
}

// replayTTLMargin is how long past its trace-time TTL a replay's key lives.
const replayTTLMargin = time.Hour

// redisClient opens the Redis of a --store spec, over TLS as st says for
// the rediss schemes: calls end by their deadline, and go-redis never sends
// a command again once it may have reached Redis (redisstore.SendOnce): a
// decision whose reply is lost fails, and the failure policy answers,
// rather than running twice and spending twice; what never reached Redis or
// that Redis refused unrun (a dial, READONLY after a failover, MOVED)
// go-redis still retries.
func redisClient(spec string, st storeTLS) (redis.UniversalClient, error) {
	scheme, rest, _ := strings.Cut(spec, "://")
	useTLS := scheme == "rediss" || scheme == "rediss-cluster" || scheme == "rediss-sentinel"
	if st.given() && !useTLS {
		return nil, fmt.Errorf("--store-tls-… flags want a TLS store (rediss://, rediss-cluster:// or rediss-sentinel://), not %q", redactStore(spec))
	}
	tlsConfig := func(base *tls.Config) (*tls.Config, error) {
		if !useTLS {
			return nil, nil
		}
		return st.config(base)
	}
	switch scheme {
	case "redis-cluster", "rediss-cluster":
		o := &redis.ClusterOptions{ContextTimeoutEnabled: true}
		var err error
		if o.Username, o.Password, o.Addrs, err = hostList(spec, rest); err != nil {
			return nil, err
		}
		if o.TLSConfig, err = tlsConfig(nil); err != nil {
			return nil, err
		}
		redisstore.SendOnce(o)
		return redis.NewClusterClient(o), nil
	case "redis-sentinel", "rediss-sentinel":
		tc, err := tlsConfig(nil)
		if err != nil {
			return nil, err
		}
		o, err := failoverOptions(spec, rest, tc)
		if err != nil {
			return nil, err
		}
		return redis.NewFailoverClient(o), nil
	case "redis", "rediss", "unix":
		o, err := redis.ParseURL(spec)
		if err != nil {
			return nil, fmt.Errorf("store %q: %v", redactStore(spec), err)
		}
		if o.TLSConfig, err = tlsConfig(o.TLSConfig); err != nil {
			return nil, err
		}
		o.ContextTimeoutEnabled = true // calls end by their deadline (redisstore's doc)
		redisstore.SendOnce(o)
		return redis.NewClient(o), nil
	}
	return nil, fmt.Errorf("unknown store %q (want memory, redis://HOST:PORT/DB, rediss://..., unix:///PATH, redis-cluster://HOST:PORT,HOST:PORT, redis-sentinel://HOST:PORT,HOST:PORT/MASTER, or rediss-cluster://, rediss-sentinel:// for TLS)", redactStore(spec))
}

// failoverOptions are the options of a redis-sentinel:// spec, rest what
// follows the scheme: [USER:PASSWORD@]HOST:PORT,…/MASTER (the master's
// credentials, the Sentinels' addresses, the master's name), then
// optionally ?sentinel_username=U&sentinel_password=P; tc, when not nil,
// is the TLS of every connection (to the Sentinels and to the servers).
func failoverOptions(spec, rest string, tc *tls.Config) (*redis.FailoverOptions, error) {
	rest, query, _ := strings.Cut(rest, "?")
	rest, master, _ := strings.Cut(rest, "/")
	master, err := url.PathUnescape(master)
	if err != nil || master == "" || strings.Contains(master, "/") {
		return nil, fmt.Errorf("store %q: want redis-sentinel://[USER:PASSWORD@]HOST:PORT,…/MASTER (rediss-sentinel:// for TLS)", redactStore(spec))
	}
	o := &redis.FailoverOptions{MasterName: master, ContextTimeoutEnabled: true, TLSConfig: tc}
	if o.Username, o.Password, o.SentinelAddrs, err = hostList(spec, rest); err != nil {
		return nil, err
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("store %q: %v", redactStore(spec), err)
	}
	for k, v := range q {
		switch k {
		case "sentinel_username":
			o.SentinelUsername = v[len(v)-1]
		case "sentinel_password":
			o.SentinelPassword = v[len(v)-1]
		default:
			return nil, fmt.Errorf("store %q: unknown parameter %q (want sentinel_username, sentinel_password)", redactStore(spec), k)
		}
	}
	redisstore.SendOnce(o)
	return o, nil
}

// hostList reads the USER:PASSWORD@HOST:PORT,HOST:PORT part of spec, rest
// (the credentials, escaped as in a URL, are optional).
func hostList(spec, rest string) (user, password string, addrs []string, err error) {
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		u, err := url.Parse("redis://" + rest[:i+1] + "x")
		if err != nil || u.User == nil {
			return "", "", nil, fmt.Errorf("store %q: the credentials before @ are not USER:PASSWORD", redactStore(spec))
		}
		user = u.User.Username()
		password, _ = u.User.Password()
		rest = rest[i+1:]
	}
	addrs = strings.Split(rest, ",")
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return "", "", nil, fmt.Errorf("store %q: %q is not HOST:PORT", redactStore(spec), a)
		}
	}
	return user, password, addrs, nil
}

// redactStore is a store's spec with its passwords, if any (in the
// credentials before @, in a query's …password parameter), replaced by
// "xxxxx", for messages.
func redactStore(spec string) string {
	spec, query, hasQuery := strings.Cut(spec, "?")
	if i := strings.Index(spec, "://"); i >= 0 {
		rest := spec[i+3:]
		if j := strings.LastIndexByte(rest, '@'); j >= 0 {
			if user, _, hasPass := strings.Cut(rest[:j], ":"); hasPass {
				spec = spec[:i+3] + user + ":xxxxx" + rest[j:]
			}
		}
	}
	if !hasQuery {
		return spec
	}
	parts := strings.Split(query, "&")
	for i, p := range parts {
		if k, _, ok := strings.Cut(p, "="); ok && strings.Contains(strings.ToLower(k), "password") {
			parts[i] = k + "=xxxxx"
		}
	}
	return spec + "?" + strings.Join(parts, "&")
}

// limitFlags are the flags that define one limit, shared by the subcommands.
type limitFlags struct {
	algorithm, limit string
	burst            int64
	burstGiven       bool // else the rate (ParseLimit's default)
}

func (f *limitFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.algorithm, "algorithm", "token-bucket", "token-bucket, gcra, leaky-bucket, fixed-window, aligned-window, sliding-window or sliding-log")
	fs.StringVar(&f.limit, "limit", "", "the limit as RATE/PERIOD, PERIOD in Go duration syntax: 10/1s, 20/100ms, 1/1m, 5/250us")
	fs.Int64Var(&f.burst, "burst", 0, "the burst, 0 or more: bucket capacity (token-bucket, gcra), units that may wait (leaky-bucket); default the rate")
}

// partLimit is the limit of one part of a composite line: the part's own
// limit, algorithm and burst, each defaulting to the flags'.
func (f *limitFlags) partLimit(pt trace.Part) (sluice.Limit, error) {
	g := *f
	if pt.Limit != "" {
		g.limit = pt.Limit
	}
	if pt.Algorithm != "" {
		g.algorithm = pt.Algorithm
	}
	if pt.Burst >= 0 {
		g.burst, g.burstGiven = pt.Burst, true
	}
	if g.limit == "" {
		return sluice.Limit{}, fmt.Errorf("part %q has no \"limit\" and no --limit was given", pt.Key)
	}
	l, err := g.parse()
	if err != nil {
		return l, fmt.Errorf("part %q: %w", pt.Key, err)
	}
	return l, nil
}

func (f *limitFlags) parse() (sluice.Limit, error) {
	if f.limit == "" {
		return sluice.Limit{}, errors.New("--limit RATE/PERIOD is required")
	}
	if f.burstGiven && f.burst < 0 {
		return sluice.Limit{}, fmt.Errorf("--burst %d is negative: want 0 or more (or leave it out for the rate)", f.burst)
	}
	l, err := sluice.ParseLimit(f.limit)
	if err != nil {
		return l, fmt.Errorf("--limit %s: %w", f.limit, err)
	}
	a, err := sluice.ParseAlgorithm(f.algorithm)
	if err != nil {
		return l, fmt.Errorf("--algorithm %s: %w", f.algorithm, err)
	}
	l = l.WithAlgorithm(a)
	given := "--limit " + f.limit
	if a != sluice.TokenBucket {
		given += " --algorithm " + f.algorithm
	}
	if f.burstGiven {
		l = l.WithBurst(f.burst)
		given += fmt.Sprintf(" --burst %d", f.burst)
	}
	if err := l.Validate(); err != nil {
		return l, fmt.Errorf("%s: %w", given, err)
	}
	return l, nil
}

func replay(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var f replayFlags
	fs := f.define()
	if err := parseFlags(fs, replayUsage(fs), args, stdout, stderr); err != nil {
		return err
	}
	f.lf.burstGiven = flagGiven(fs, "burst")
	rp := replayer{lf: &f.lf, limits: map[trace.Part]sluice.Limit{}}
	if f.lf.limit != "" { // checked before anything is read
		lim, err := f.lf.parse()
		if err != nil {
			return err
		}
		if rp.p, err = storelink.Params(lim); err != nil {
			return err
		}
	}
	st, closeStore, err := openStore(f.store, f.prefix, f.st)
	if err != nil {
		return err
	}
	defer closeStore()
	rp.store = st
	rp.tally = newTally(rp.p.Period)

	out := bufio.NewWriterSize(stdout, 64*1024)
	defer out.Flush()
	if err := rp.run(ctx, trace.NewReader(stdin), out); err != nil {
		out.Flush()
		return err
	}
	if f.summary {
		rp.tally.print(stderr)
	}
	return out.Flush()
}

// replayFlags are sluice replay's flags.
type replayFlags struct {
	lf            limitFlags
	store, prefix string
	st            storeTLS
	summary       bool
}

// define defines replay's flags on a new flag set, into f.
func (f *replayFlags) define() *flag.FlagSet {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	f.lf.register(fs)
	fs.StringVar(&f.store, "store", "memory", "where decisions are made: memory, redis://HOST:PORT/DB, rediss://HOST:PORT/DB, redis-cluster://HOST:PORT,HOST:PORT, redis-sentinel://HOST:PORT,HOST:PORT/MASTER (rediss-cluster://, rediss-sentinel:// over TLS)")
	f.st.flags(fs)
	fs.StringVar(&f.prefix, "prefix", "", "Redis key prefix (default: a fresh namespace per run, so replays never see each other's state)")
	fs.BoolVar(&f.summary, "summary", false, "print totals per key and overall to stderr")
	return fs
}

// replayUsage is replay's --help.
func replayUsage(fs *flag.FlagSet) func(io.Writer) {
	return func(w io.Writer) {
		fs.SetOutput(w)
		fmt.Fprint(w, `Usage: sluice replay --limit RATE/PERIOD [--algorithm ALGO] [--burst B] [--store memory|redis://HOST:PORT/DB] [--prefix P] [--summary] < trace.jsonl > decisions.jsonl

Reads one request a line, {"t_us": 1764000000000000, "key": "user:1", "cost": 1}
(cost defaults to 1; "charge": N in place of cost charges N units whatever the
key has, never refused, leaving it in debt up to the limit's allowance:
--limit "1000/1m debt 5000"), decides each at its t_us, and writes one line per request:
its fields plus allowed, remaining, retry_after_us, reset_after_us, delay_us, or
plus "error" for a request that could never pass. Time comes from the trace only,
also in Redis, where each decision runs at the trace's time. t_us and cost are
JSON integers; lines may be of any length; a line that already holds the
decision's fields (an earlier replay's output) has them replaced.

A composite request (all parts must grant; a refusal spends nothing) gives
"parts" in place of key and cost:
  {"t_us": 1764000000000000, "parts": [
    {"key": "chat:7", "algorithm": "token-bucket", "limit": "1/1s", "burst": 1, "cost": 1},
    {"key": "global", "limit": "30/1s", "burst": 30, "cost": 1}]}
A part's algorithm, limit and burst default to the flags' (--limit is then
needed only for lines with a key); its cost to 1. The output is the composite's
decision, in the same fields. --summary counts a composite under its keys
joined by +, one unit per admitted request.

`)
		fs.PrintDefaults()
	}
}

// replayer decides a trace's requests, one line at a time.
type replayer struct {
	store  store.Store
	lf     *limitFlags
	p      algo.Params                 // --limit's, when given
	limits map[trace.Part]sluice.Limit // a part's limit by its text
	tally  *tally
	parts  []store.Part // a composite line's, reused
}

// run decides every line r reads and writes each decision to out. Its
// error is the trace's, or the store's; a request that could never pass
// is a line of output, not an error.
func (rp *replayer) run(ctx context.Context, r *trace.Reader, out io.Writer) error {
	var buf []byte
	for {
		req, err := r.Read()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		buf = buf[:0]
		if req.Parts == nil {
			buf, err = rp.key(ctx, buf, req)
		} else {
			buf, err = rp.composite(ctx, buf, req)
		}
		if err != nil {
			return err
		}
		if _, err := out.Write(buf); err != nil {
			return err
		}
	}
}

// key decides a line with a key under --limit, appending its output to
// buf.
func (rp *replayer) key(ctx context.Context, buf []byte, req trace.Request) ([]byte, error) {
	if rp.lf.limit == "" {
		return buf, fmt.Errorf("line %d: a line with a key needs --limit RATE/PERIOD (or give it \"parts\", each with its limit)", req.Line)
	}
	p := rp.p
	op := store.Op{Kind: store.Take, Key: req.Key, Limit: storelink.LimitOf(&p), Cost: req.Cost, MaxDelay: store.Never}
	check := storelink.Check
	if req.Charge {
		op.Kind, check = store.Charge, storelink.CheckCharge
	}
	if err := check(req.Key, &p, req.Cost); err != nil {
		rp.tally.fail(req.Key)
		return trace.AppendError(buf, req, err), nil
	}
	d, err := runat.Run(ctx, rp.store, op, req.T)
	if errors.Is(err, sluice.ErrInvalidTime) { // t_us 0 on Redis: a line's error
		rp.tally.fail(req.Key)
		return trace.AppendError(buf, req, err), nil
	}
	if err != nil {
		return buf, fmt.Errorf("line %d: %w", req.Line, err)
	}
	if req.Charge {
		rp.tally.charge(req.Key, req.Cost)
	} else {
		rp.tally.add(req.Key, req.T, req.Cost, d)
	}
	return trace.AppendDecision(buf, req, d), nil
}

// composite decides a line with parts, all or nothing, appending its
// output to buf.
func (rp *replayer) composite(ctx context.Context, buf []byte, req trace.Request) ([]byte, error) {
	parts := rp.parts[:0]
	names := make([]string, 0, len(req.Parts))
	var bad error // the first part that could never pass
	for i, pt := range req.Parts {
		key := pt
		key.Key, key.Cost = "", 0
		l, ok := rp.limits[key]
		if !ok {
			var err error
			if l, err = rp.lf.partLimit(pt); err != nil {
				return buf, fmt.Errorf("line %d: %w", req.Line, err)
			}
			rp.limits[key] = l
		}
		p, err := storelink.Params(l) // l was validated
		if err == nil {
			err = storelink.Check(pt.Key, &p, pt.Cost)
		}
		if err != nil && bad == nil {
			bad = storelink.PartError(i, pt.Key, err)
		}
		parts = append(parts, store.Part{Key: pt.Key, Limit: storelink.LimitOf(&p), Cost: pt.Cost})
		names = append(names, pt.Key)
		rp.tally.period(l.Period.Microseconds())
	}
	rp.parts = parts
	defer clear(parts)
	name := strings.Join(names, "+")
	if bad == nil {
		bad = storelink.CheckComposite(parts, func(p *store.Part) string { return p.Key })
	}
	if bad != nil {
		rp.tally.fail(name)
		return trace.AppendError(buf, req, bad), nil
	}
	d, err := runat.Run(ctx, rp.store, store.Op{Kind: store.Take, Parts: parts, MaxDelay: store.Never}, req.T)
	if errors.Is(err, sluice.ErrInvalidTime) { // t_us 0 on Redis: a line's error
		rp.tally.fail(name)
		return trace.AppendError(buf, req, err), nil
	}
	if err != nil {
		return buf, fmt.Errorf("line %d: %w", req.Line, err)
	}
	rp.tally.add(name, req.T, 1, d)
	return trace.AppendDecision(buf, req, d), nil
}

// tally counts a replay's decisions per key (a composite's: its keys joined
// by +) for --summary; peaks are over the period of the first limit seen.
type tally struct {
	periodUS int64
	keys     map[string]*keyTally
}

type keyTally struct {
	allowed, denied, errors, units int64
	charged                        int64   // units of the charges (charge lines), never refused
	admitted                       []event // when admitted units proceed
}

type event struct{ t, n int64 }

func newTally(periodUS int64) *tally { return &tally{periodUS: periodUS, keys: map[string]*keyTally{}} }

// period sets the peaks' period, if none was set.
func (t *tally) period(us int64) {
	if t.periodUS == 0 {
		t.periodUS = us
	}
}

func (t *tally) key(k string) *keyTally {
	kt := t.keys[k]
	if kt == nil {
		kt = &keyTally{}
		t.keys[k] = kt
	}
	return kt
}

func (t *tally) fail(k string) { t.key(k).errors++ }

// charge counts a charge line's units: it neither passes nor is refused.
func (t *tally) charge(k string, units int64) { t.key(k).charged += units }

func (t *tally) add(k string, now, cost int64, d store.Decision) {
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

func (t *tally) print(w io.Writer) {
	names := make([]string, 0, len(t.keys))
	for k := range t.keys {
		names = append(names, k)
	}
	slices.Sort(names)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	var all keyTally
	for _, k := range names {
		all.charged += t.keys[k].charged
	}
	// A trace with charge lines has a column of the units they charged.
	row := func(name string, kt *keyTally) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t", name, kt.allowed, kt.denied, kt.errors, kt.units)
		if all.charged > 0 {
			fmt.Fprintf(tw, "%d\t", kt.charged)
		}
		fmt.Fprintf(tw, "%d\t\n", peak(kt.admitted, t.periodUS))
	}
	header := "key\tallowed\tdenied\terrors\tunits\t"
	if all.charged > 0 {
		header += "charged\t"
	}
	fmt.Fprintf(tw, "%speak/%s\t\n", header, time.Duration(t.periodUS)*time.Microsecond)
	for _, k := range names {
		kt := t.keys[k]
		row(strings.ReplaceAll(k, "\t", " "), kt)
		all.allowed += kt.allowed
		all.denied += kt.denied
		all.errors += kt.errors
		all.units += kt.units
		all.admitted = append(all.admitted, kt.admitted...)
	}
	row(fmt.Sprintf("all %d keys", len(names)), &all)
	tw.Flush()
}
