package rls

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
)

// Verify checks that a server applies Config: a user value passes, and of
// 2.5×HotLimit calls of the hot value in a row (within at most two of its
// one-second windows) some are over the limit, with the status of the hot
// rule (OVER_LIMIT, current_limit HotLimit per second).
func Verify(ctx context.Context, c *Client) error {
	resp, err := c.Check(ctx, "u1")
	if err != nil {
		return fmt.Errorf("user value: %w", err)
	}
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		return fmt.Errorf("user value: overall_code %v, want OK", resp.GetOverallCode())
	}
	over := 0
	for range HotLimit * 5 / 2 {
		resp, err := c.Check(ctx, HotValue)
		if err != nil {
			return fmt.Errorf("hot value: %w", err)
		}
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			continue
		}
		over++
		st := resp.GetStatuses()
		if len(st) != 1 || st[0].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			return fmt.Errorf("hot value over the limit: statuses %v, want one OVER_LIMIT", st)
		}
		if l := st[0].GetCurrentLimit(); l.GetRequestsPerUnit() != HotLimit || l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND {
			return fmt.Errorf("hot value over the limit: current_limit %v, want %d per SECOND", l, HotLimit)
		}
	}
	if over == 0 {
		return fmt.Errorf("hot value: none of %d calls in a row over its limit of %d per second", HotLimit*5/2, HotLimit)
	}
	return nil
}

// Measurement is one server's run: the load generator's Result and the CPU
// time each process spent over it.
type Measurement struct {
	Name, Store string
	Generator   Generator // the load generator that ran
	Result
	ServerCPU, RedisCPU, ClientCPU time.Duration
	// RedisCalls is the commands the redis-server ran over the run
	// (RedisCommands), when the caller counted them (cmd/rls -hot).
	RedisCalls int64
	// CPUErr is why the CPU times are missing (off Linux, or no redis-server pid).
	CPUErr error
}

// PerCall returns d divided by the answered calls.
func (m *Measurement) PerCall(d time.Duration) time.Duration {
	if m.Calls == 0 {
		return 0
	}
	return d / time.Duration(m.Calls)
}

// Measure runs the load generator o.Generator against s: warmup (if > 0)
// unmeasured, then o, with the CPU time of s, of the redis-server redisPid
// (0: none) and of this process read before and after.
func Measure(ctx context.Context, s *Server, redisPid int, o Options, warmup time.Duration) (*Measurement, error) {
	if o.Generator == "" {
		o.Generator = H2
	}
	c, err := DialLoaderValues(o.Generator, s.Addr, o.Conns, o.Values)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if warmup > 0 {
		w := o
		w.Duration, w.Calls = warmup, 0
		if _, err := c.Run(ctx, w); err != nil {
			return nil, err
		}
	}
	before, cpuErr := cpus(s.Pid(), redisPid)
	r, err := c.Run(ctx, o)
	if err != nil {
		return nil, err
	}
	after, err := cpus(s.Pid(), redisPid)
	if cpuErr == nil {
		cpuErr = err
	}
	m := &Measurement{Name: s.Name, Store: s.Store, Generator: o.Generator, Result: *r, CPUErr: cpuErr}
	if cpuErr == nil {
		m.ServerCPU, m.RedisCPU, m.ClientCPU = after[0]-before[0], after[1]-before[1], after[2]-before[2]
	}
	return m, nil
}

// cpus reads the CPU time of the server, the redis-server (0 if redisPid is
// 0) and this process.
func cpus(server, redisPid int) ([3]time.Duration, error) {
	var t [3]time.Duration
	var err error
	if t[0], err = ProcessCPU(server); err != nil {
		return t, err
	}
	if redisPid != 0 {
		if t[1], err = ProcessCPU(redisPid); err != nil {
			return t, err
		}
	}
	t[2], err = ProcessCPU(0)
	return t, err
}

// FlushRedis empties the redis-server at addr (FLUSHALL), so each server
// starts from the same empty Redis.
func FlushRedis(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, PoolSize: 1})
	defer c.Close()
	return c.FlushAll(ctx).Err()
}

// ResetRedisStats zeroes the counters of the redis-server at addr (CONFIG
// RESETSTAT), so that RedisCommands then counts from that instant.
func ResetRedisStats(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, PoolSize: 1})
	defer c.Close()
	return c.ConfigResetStat(ctx).Err()
}

// RedisCommands returns the commands the redis-server at addr has run
// since its counters were reset (INFO commandstats), leaving out those a
// harness sends to it (INFO, CONFIG, FLUSHALL): every other command counts
// once, a script call (EVALSHA) as one whatever it does, a pipeline as its
// commands.
func RedisCommands(ctx context.Context, addr string) (int64, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, PoolSize: 1})
	defer c.Close()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	return countCommands(info), nil
}

// countCommands adds up the calls= of INFO commandstats' lines but the
// harness's own commands'.
func countCommands(info string) int64 {
	var n int64
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd || name == "info" || name == "flushall" || strings.HasPrefix(name, "config") {
			continue
		}
		_, v, _ := strings.Cut(rest, "calls=")
		v, _, _ = strings.Cut(v, ",")
		x, _ := strconv.ParseInt(v, 10, 64)
		n += x
	}
	return n
}

// Targets are issue 12's targets for `sluice serve` over Redis against
// envoyproxy/ratelimit, in the same run.
const (
	TargetCPU   = 0.25 // server CPU per call at most this share of envoy's
	TargetRate  = 2.5  // calls/s at least this multiple of envoy's
	TargetP99   = 0.5  // p99 at most this share of envoy's
	targetStore = "redis"
)

// Table writes the measurements as a Markdown table, with ratios to the
// envoy row measured with the same load generator if there is one, then
// the targets' verdict for sluice over Redis.
func Table(w io.Writer, ms []*Measurement) {
	refs := map[Generator]*Measurement{}
	for _, m := range ms {
		if m.Name == "envoy" && refs[m.Generator] == nil {
			refs[m.Generator] = m
		}
	}
	fmt.Fprintln(w, "| server | store | load generator | calls/s | over-limit | errors | p50 | p99 | p999 | server CPU µs/call | redis CPU µs/call | client CPU µs/call | calls/s × envoy | CPU/call ÷ envoy | p99 ÷ envoy |")
	fmt.Fprintln(w, "| --- | --- | --- | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: |")
	for _, m := range ms {
		cells := []string{m.Name, m.Store, string(m.Generator),
			fmt.Sprintf("%.0f", m.Rate()),
			fmt.Sprintf("%.2f%%", pct(m.Over, m.Calls)),
			fmt.Sprint(m.Errors),
			ms3(m.Hist.Quantile(0.50)), ms3(m.Hist.Quantile(0.99)), ms3(m.Hist.Quantile(0.999)),
			m.cpu(m.ServerCPU), m.cpu(m.RedisCPU), m.cpu(m.ClientCPU),
		}
		if ref := refs[m.Generator]; ref != nil && ref.Calls > 0 && m.Calls > 0 {
			cells = append(cells,
				fmt.Sprintf("%.2f", m.Rate()/ref.Rate()),
				ratio(m.PerCall(m.ServerCPU), ref.PerCall(ref.ServerCPU), m.CPUErr == nil && ref.CPUErr == nil),
				ratio(m.Hist.Quantile(0.99), ref.Hist.Quantile(0.99), true))
		} else {
			cells = append(cells, "", "", "")
		}
		fmt.Fprintln(w, "| "+strings.Join(cells, " | ")+" |")
	}
	for _, m := range ms {
		ref := refs[m.Generator]
		if ref == nil || m.Name != "sluice" || m.Store != targetStore || m.Calls == 0 || ref.Calls == 0 {
			continue
		}
		fmt.Fprintln(w)
		rate := m.Rate() / ref.Rate()
		p99 := float64(m.Hist.Quantile(0.99)) / float64(ref.Hist.Quantile(0.99))
		fmt.Fprintf(w, "Targets, sluice over Redis against envoy (load generator %s): calls/s × %.2f (≥ %.1f: %s), p99 ÷ %.2f (≤ %.2f: %s)",
			m.Generator, rate, TargetRate, verdict(rate >= TargetRate), p99, TargetP99, verdict(p99 <= TargetP99))
		if m.CPUErr == nil && ref.CPUErr == nil && ref.ServerCPU > 0 {
			cpu := float64(m.PerCall(m.ServerCPU)) / float64(ref.PerCall(ref.ServerCPU))
			fmt.Fprintf(w, ", server CPU/call ÷ %.2f (≤ %.2f: %s)", cpu, TargetCPU, verdict(cpu <= TargetCPU))
		}
		fmt.Fprintln(w, ".")
	}
}

func (m *Measurement) cpu(d time.Duration) string {
	if m.CPUErr != nil {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Microsecond)/float64(max(m.Calls, 1)))
}

func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// ms3 formats a latency in milliseconds with three decimals.
func ms3(d time.Duration) string {
	return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond))
}

func ratio(a, b time.Duration, ok bool) string {
	if !ok || b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", float64(a)/float64(b))
}

func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}
