package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/bench"
)

// The groups of the Redis section: their rows are left out of the in-memory
// tables and printed by writeRedis instead.
const (
	redisOneKey    = "RedisOneKey"
	redisConc      = "RedisKeys10k64"
	compositeGroup = "Composite"
)

func isRedisGroup(g string) bool {
	return g == redisOneKey || g == redisConc || g == compositeGroup
}

// redisTarget is the smallest acceptable ratio of sluice's decisions/s to
// redis_rate's in the RedisKeys10k64 group.
const redisTarget = 2.0

// A Ceiling is one redis-benchmark configuration and its requests/s, one per
// run.
type Ceiling struct {
	Name    string // what it runs, for the table
	Group   string // the group whose table it is printed in
	Callers int    // -c
	Args    []string
	Cmdline string
	RPS     []float64
}

// RedisRun is what the live part of the Redis section measured beyond go
// test: the redis-benchmark ceilings and the command counts.
type RedisRun struct {
	Server     string // "redis-server 7.0.15 at 127.0.0.1:P (started for this run)"
	Ceilings   []*Ceiling
	RoundTrips []bench.RoundTrips
	RTErr      error
}

// ceilings returns the redis-benchmark runs against srv: a trivial script
// (return 1, loaded as sha1) and sluice's token-bucket script (sluiceArgs,
// keys spread over bench.Keys), each from 64 connections without and with
// pipelining, plus the trivial script from one connection.
func ceilings(srv *bench.RedisServer, n int, sha1 string, sluiceArgs []string) []*Ceiling {
	base := []string{"-h", srv.Host(), "-p", srv.Port(), "-q"}
	c64 := strconv.Itoa(bench.Callers)
	trivial := []string{"EVALSHA", sha1, "0"}
	mk := func(name, group string, callers int, opts []string, n int, cmd []string) *Ceiling {
		args := slices.Concat(base, []string{"-c", strconv.Itoa(callers), "-n", strconv.Itoa(n)}, opts, cmd)
		return &Ceiling{Name: name, Group: group, Callers: callers, Args: args, Cmdline: "redis-benchmark " + shellJoin(args)}
	}
	return []*Ceiling{
		mk("redis-benchmark: EVALSHA of `return 1`, 1 connection", redisOneKey, 1, nil, max(n/10, 1000), trivial),
		mk("redis-benchmark: EVALSHA of `return 1`, "+c64+" connections", redisConc, bench.Callers, nil, n, trivial),
		mk("redis-benchmark: EVALSHA of `return 1`, "+c64+" connections, -P 16", redisConc, bench.Callers, []string{"-P", "16"}, n, trivial),
		mk("redis-benchmark: EVALSHA of sluice's token-bucket script, "+c64+" connections", redisConc, bench.Callers, []string{"-r", strconv.Itoa(bench.Keys)}, n, sluiceArgs),
		mk("redis-benchmark: EVALSHA of sluice's token-bucket script, "+c64+" connections, -P 16", redisConc, bench.Callers, []string{"-r", strconv.Itoa(bench.Keys), "-P", "16"}, n, sluiceArgs),
	}
}

func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " `'\"$*?{}[]|&;<>()") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}

var rpsRe = regexp.MustCompile(`([0-9]+(?:\.[0-9]+)?) requests per second`)

// ParseRPS returns the requests per second of redis-benchmark -q output: the
// last "N requests per second" (progress lines, separated by \r, come before).
func ParseRPS(out string) (float64, error) {
	m := rpsRe.FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		return 0, fmt.Errorf("no \"requests per second\" in redis-benchmark output %q", out)
	}
	return strconv.ParseFloat(m[len(m)-1][1], 64)
}

// prepareRedis loads the scripts redis-benchmark runs and checks that
// sluice's script, called as redis-benchmark will call it, decides.
func prepareRedis(ctx context.Context, addr string) (trivialSHA string, sluiceArgs []string, version string, err error) {
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	defer c.Close()
	if trivialSHA, err = c.ScriptLoad(ctx, "return 1").Result(); err != nil {
		return
	}
	args, want, err := bench.SluiceScriptCommand(ctx, addr)
	if err != nil {
		return
	}
	check := make([]any, len(args))
	for i, a := range args {
		check[i] = strings.ReplaceAll(a, "__rand_int__", "check")
	}
	reply, err := c.Do(ctx, check...).Slice()
	if err != nil {
		return "", nil, "", fmt.Errorf("sluice's script as redis-benchmark calls it: %w", err)
	}
	// The reply's layout is the scripts' own (it grew a sixth value once,
	// and a check that counted five failed): it must be the store's, and
	// allowed.
	if len(reply) != len(want) || len(reply) == 0 || reply[0] != int64(1) || reply[0] != want[0] {
		return "", nil, "", fmt.Errorf("sluice's script as redis-benchmark calls it replied %v, where the store's own call replied %v: want the same allowed decision", reply, want)
	}
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			version = v
		}
	}
	return trivialSHA, args, version, nil
}

// runCeiling runs c once and records its requests/s.
func runCeiling(c *Ceiling) error {
	fmt.Fprintf(os.Stderr, "running %s\n", c.Cmdline)
	out, err := exec.Command("redis-benchmark", c.Args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", c.Cmdline, err, out)
	}
	rps, err := ParseRPS(string(out))
	if err != nil {
		return fmt.Errorf("%s: %w", c.Cmdline, err)
	}
	fmt.Fprintf(os.Stderr, "  %.0f requests per second\n", rps)
	c.RPS = append(c.RPS, rps)
	return nil
}

// startRedisRun starts (or, with bench.RedisEnv, finds) the server and
// prepares the ceilings; the caller stops the server.
func startRedisRun(ctx context.Context, rbN int) (*bench.RedisServer, *RedisRun, error) {
	if _, err := exec.LookPath("redis-benchmark"); err != nil {
		return nil, nil, errors.New("-redis: redis-benchmark not found on PATH")
	}
	srv, err := bench.StartRedis()
	if err != nil {
		return nil, nil, fmt.Errorf("-redis: %w", err)
	}
	sha, sluiceArgs, version, err := prepareRedis(ctx, srv.Addr)
	if err != nil {
		srv.Stop()
		return nil, nil, err
	}
	how := "started for this run: --save '' --appendonly no"
	if srv.External {
		how = "from " + bench.RedisEnv
	}
	run := &RedisRun{
		Server:   fmt.Sprintf("redis-server %s at %s (%s)", version, srv.Addr, how),
		Ceilings: ceilings(srv, rbN, sha, sluiceArgs),
	}
	return srv, run, nil
}

// measureRoundTrips counts the commands of rtN decisions per mode.
func (r *RedisRun) measureRoundTrips(ctx context.Context, addr string, rtN int) {
	fmt.Fprintf(os.Stderr, "counting the commands of %d decisions per mode (INFO commandstats, MONITOR)\n", rtN)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	r.RoundTrips, r.RTErr = bench.MeasureRoundTrips(ctx, addr, rtN)
}

// writeRedis writes the Redis section: per Redis group a table of decisions/s
// with ratios to redis_rate and the ceilings, the 2× target, the round trips
// and the composite table. live is nil when the output was parsed from a
// file.
func writeRedis(w io.Writer, out *Output, live *RedisRun, dir, cmdline, load string) {
	fmt.Fprintf(w, "## Redis: %s vs peers over one redis-server\n\n", bench.Ref)
	fmt.Fprintf(w, "- limit, identical for every library: %d per second, burst %d (ulule: %d per %v)\n", bench.Rate, bench.Burst, bench.Burst, bench.Window)
	if live != nil {
		fmt.Fprintf(w, "- server: %s, on the same machine as the client (loopback)\n", live.Server)
	}
	fmt.Fprintf(w, "- client, the same for every library: go-redis v9 `redis.NewClient(&redis.Options{Addr, PoolSize: %d, DisableIdentity: true, ContextTimeoutEnabled: true})`, a fresh one per library\n", bench.Callers)
	fmt.Fprintf(w, "- %s\n", cmdline)
	fmt.Fprintf(w, "- %s/%s, cpu: %s, GOMAXPROCS %d\n", out.Header["goos"], out.Header["goarch"], out.Header["cpu"], out.Procs)
	if load != "" {
		fmt.Fprintf(w, "- load average (1 min): %s; client and server share the CPUs\n", load)
	}
	fmt.Fprintf(w, "- medians over the runs; decisions/s = 1e9 / median ns/op (wall time over all %d goroutines in %s); "+
		"srv-µs/op = the server's time inside EVALSHA/EVAL per decision (INFO commandstats); "+
		"× %s = decisions/s over %s's\n\n", bench.Callers, redisConc, bench.Peer, bench.Peer)

	rows := Rows(out, bench.Ref)
	for _, g := range []string{redisOneKey, redisConc} {
		var grows []Row
		for _, r := range rows {
			if r.Group == g {
				grows = append(grows, r)
			}
		}
		if len(grows) == 0 {
			continue
		}
		desc := "one key, serial"
		if g == redisConc {
			desc = fmt.Sprintf("%d keys round-robin, %d goroutines", bench.Keys, bench.Callers)
		}
		fmt.Fprintf(w, "### %s (%s)\n\n", g, desc)
		var cs []*Ceiling
		if live != nil {
			for _, c := range live.Ceilings {
				if c.Group == g {
					cs = append(cs, c)
				}
			}
		}
		writeRedisTable(w, grows, cs)
		fmt.Fprintln(w)
	}
	if live != nil {
		fmt.Fprintf(w, "redis-benchmark runs a script on the server with no Go client in the way: the ceiling of this server on this machine. ")
		fmt.Fprintf(w, "The commands:\n\n```sh\n")
		for _, c := range live.Ceilings {
			fmt.Fprintln(w, c.Cmdline)
		}
		fmt.Fprintf(w, "```\n\n")
	}

	fmt.Fprintf(w, "### Target\n\n")
	writeRedisTarget(w, rows)

	if live != nil {
		fmt.Fprintf(w, "\n### One round trip per decision\n\n")
		writeRoundTrips(w, live.RoundTrips, live.RTErr)
	}

	var crows []Row
	for _, r := range rows {
		if r.Group == compositeGroup {
			crows = append(crows, r)
		}
	}
	if len(crows) > 0 {
		fmt.Fprintf(w, "\n### Composite: TakeAll of 2 parts vs Take\n\n")
		fmt.Fprintf(w, "- %s\n", bench.CompositeString())
		fmt.Fprintf(w, "- mem: memstore; redis: redisstore.New(client) with batching (the default), one script per decision; -%dg: %d goroutines, else serial\n\n", bench.Callers, bench.Callers)
		writeComposite(w, crows)
	}

	fmt.Fprintf(w, "\n### Redis libraries\n\n")
	writeLibs(w, dir, bench.RedisLibs)
}

// decisionsPerSec converts a median ns/op to decisions per second.
func decisionsPerSec(ns float64) float64 {
	if ns <= 0 || math.IsNaN(ns) {
		return math.NaN()
	}
	return 1e9 / ns
}

func rate(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	return strconv.FormatFloat(math.Round(v), 'f', 0, 64)
}

func ratio(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "—"
	}
	return fmt.Sprintf("%.2f", v)
}

func cell(r Row, unit string) string {
	v, ok := r.Median[unit]
	switch {
	case !ok:
		return "—"
	case unit == "srv-µs/op":
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return num(unit, v)
}

// writeRedisTable writes one Redis group's rows and the ceilings measured
// for it.
func writeRedisTable(w io.Writer, rows []Row, cs []*Ceiling) {
	peer := math.NaN()
	for _, r := range rows {
		if r.Lib == bench.Peer {
			peer = decisionsPerSec(r.Median["ns/op"])
		}
	}
	writeRow(w, []string{"library", "runs", "decisions/s", "ns/op", "B/op", "allocs/op", "allowed/op", "srv-µs/op", "× " + bench.Peer})
	writeRow(w, []string{"---", "--:", "--:", "--:", "--:", "--:", "--:", "--:", "--:"})
	for _, r := range rows {
		ns, ok := r.Median["ns/op"]
		if !ok {
			ns = math.NaN()
		}
		d := decisionsPerSec(ns)
		writeRow(w, []string{r.Lib, strconv.Itoa(r.Runs), rate(d), num("ns/op", ns), cell(r, "B/op"), cell(r, "allocs/op"),
			cell(r, "allowed/op"), cell(r, "srv-µs/op"), ratio(d / peer)})
	}
	for _, c := range cs {
		rps, ok := median(c.RPS)
		if !ok {
			continue
		}
		writeRow(w, []string{"*" + c.Name + "*", strconv.Itoa(len(c.RPS)), rate(rps), num("ns/op", 1e9/rps), "—", "—", "—", "—", ratio(rps / peer)})
	}
}

// RedisVerdict is sluice's decisions/s over redis_rate's in RedisKeys10k64
// and whether it meets redisTarget.
func RedisVerdict(rows []Row) (ref, peer, ratio float64, verdict string) {
	ref, peer = math.NaN(), math.NaN()
	for _, r := range rows {
		if r.Group != redisConc {
			continue
		}
		switch r.Lib {
		case bench.Ref:
			ref = decisionsPerSec(r.Median["ns/op"])
		case bench.Peer:
			peer = decisionsPerSec(r.Median["ns/op"])
		}
	}
	ratio = ref / peer
	switch {
	case math.IsNaN(ratio):
		verdict = "n/a"
	case ratio >= redisTarget:
		verdict = "PASS"
	default:
		verdict = "MISS"
	}
	return ref, peer, ratio, verdict
}

func writeRedisTarget(w io.Writer, rows []Row) {
	ref, peer, ratio, verdict := RedisVerdict(rows)
	writeRow(w, []string{"target", bench.Ref + " decisions/s", bench.Peer + " decisions/s", "ratio", "verdict"})
	writeRow(w, []string{"---", "--:", "--:", "--:", "---"})
	writeRow(w, []string{fmt.Sprintf("%s ≥ %.0f× %s decisions/s at %d goroutines (%s)", bench.Ref, redisTarget, bench.Peer, bench.Callers, redisConc),
		rate(ref), rate(peer), ratioCell(ratio), verdict})
}

func ratioCell(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	return fmt.Sprintf("%.2f×", v)
}

// writeRoundTrips writes what the server saw for each mode's decisions.
func writeRoundTrips(w io.Writer, rts []bench.RoundTrips, err error) {
	fmt.Fprintf(w, "CONFIG RESETSTAT, then N sluice decisions, then INFO commandstats (script calls) and MONITOR (which tells the commands a client sent from those a script ran; both agree on the totals). "+
		"Pool filled and script loaded beforehand. Client round trips: a go-redis hook, one per command sent alone or per pipeline.\n\n")
	writeRow(w, []string{"mode", "decisions", "EVALSHA", "EVAL", "script calls / decision", "other commands sent", "client round trips", "decisions / round trip", "inside the script, per decision", "verdict"})
	writeRow(w, []string{"---", "--:", "--:", "--:", "--:", "---", "--:", "--:", "---", "---"})
	for _, r := range rts {
		verdict := "PASS"
		if !r.OK() {
			verdict = "FAIL"
		}
		writeRow(w, []string{r.Mode, strconv.Itoa(r.Decisions), strconv.FormatInt(r.EvalSha, 10), strconv.FormatInt(r.Eval, 10),
			fmt.Sprintf("%.3f", r.ScriptCalls()), r.OtherString(), strconv.FormatInt(r.RoundTrips, 10),
			fmt.Sprintf("%.1f", float64(r.Decisions)/float64(r.RoundTrips)), r.InScriptString(), verdict})
	}
	if err != nil {
		fmt.Fprintf(w, "\nerror: %v\n", err)
	}
}

// writeComposite writes the composite group with each composite variant's
// ns/op over the single variant of the same store and concurrency.
func writeComposite(w io.Writer, rows []Row) {
	ns := map[string]float64{}
	for _, r := range rows {
		ns[r.Lib] = r.Median["ns/op"]
	}
	writeRow(w, []string{"variant", "runs", "decisions/s", "ns/op", "B/op", "allocs/op", "allowed/op", "srv-µs/op", "composite/single ns/op"})
	writeRow(w, []string{"---", "--:", "--:", "--:", "--:", "--:", "--:", "--:", "--:"})
	for _, r := range rows {
		n, ok := r.Median["ns/op"]
		if !ok {
			n = math.NaN()
		}
		rel := "—"
		if single := strings.Replace(r.Lib, "-composite", "-single", 1); single != r.Lib {
			if s, ok := ns[single]; ok && s > 0 {
				rel = ratio(n / s)
			}
		}
		writeRow(w, []string{r.Lib, strconv.Itoa(r.Runs), rate(decisionsPerSec(n)), num("ns/op", n), cell(r, "B/op"), cell(r, "allocs/op"),
			cell(r, "allowed/op"), cell(r, "srv-µs/op"), rel})
	}
}
