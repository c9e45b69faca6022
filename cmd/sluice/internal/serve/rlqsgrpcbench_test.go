package serve

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
	"github.com/sluice-go/sluice/cmd/sluice/internal/procs"
	"github.com/sluice-go/sluice/cmd/sluice/internal/rlqs"
)

// These benchmarks count what BenchmarkRLQSReport and BenchmarkRLQSRound
// leave out: gRPC on loopback, both ends. The server runs in this process
// (its rounds on their own ticker, on a clock past the warm-up that
// otherwise follows the wall clock); its clients run in a child process (this test binary again, as
// TestRLQSBenchClient), so that each side's CPU time is its own:
// cpu-ms/report is the server process's (getrusage), client-cpu-ms/report
// the child's. Each client is one Envoy: its own connection and one
// stream reporting 100 buckets, 1,000 clients over 10,000 budgets of 10
// clients each, as rlqsFleet.

// rlqsBenchEnv, set in the child's environment, makes TestRLQSBenchClient
// the clients of a server at that address.
const rlqsBenchEnv = "SLUICE_RLQS_BENCH_SERVER"

const rlqsBenchStreams, rlqsBenchBuckets, rlqsBenchBudgets = 1000, 100, 10000

// rlqsBench is a server and its clients in a child process, every client
// past its first report.
type rlqsBench struct {
	ts    *testServer
	child *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Scanner
}

// startRLQSBench starts the server with the allocator's cfg (reports
// uncapped: a closed loop sends them as fast as they are answered) and
// the clients. Its clock follows the wall clock, or with step it stands
// still but for step at each reading (the service reads it once a
// report, and once a stream opened).
func startRLQSBench(b *testing.B, rules string, cfg rlqs.Config, step time.Duration) *rlqsBench {
	b.Helper()
	lt := limits.Defaults()
	lt.RLQSReports = 1 << 30
	var offset atomic.Int64
	t0 := time.Now()
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	if step > 0 {
		now = func() time.Time { return t0.Add(time.Duration(offset.Add(int64(step)))) }
	}
	ts := start(b, Options{Config: writeConfig(b, map[string]string{"r.yaml": rules}), Limits: lt, RLQS: &RLQSOptions{Config: cfg, Now: now}}, nil)
	c := ts.rlqs.alloc.Config()
	offset.Add(int64(c.TTL + c.Slack + time.Minute)) // past the warm-up, a lease
	child := exec.Command(os.Args[0], "-test.run=^TestRLQSBenchClient$")
	child.Env = append(os.Environ(), rlqsBenchEnv+"="+ts.GRPCAddr().String())
	child.Stderr = os.Stderr
	in, err := child.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := child.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := child.Start(); err != nil {
		b.Fatal(err)
	}
	r := &rlqsBench{ts: ts, child: child, in: in, out: bufio.NewScanner(out)}
	b.Cleanup(func() {
		in.Close()
		if err := child.Wait(); err != nil {
			b.Errorf("the clients' process: %v", err)
		}
	})
	r.await(b, "ready")
	return r
}

// await reads the child's lines until one starts with want and returns
// its fields after want.
func (r *rlqsBench) await(b *testing.B, want string) []string {
	b.Helper()
	for r.out.Scan() {
		if f := strings.Fields(r.out.Text()); len(f) > 0 && f[0] == want {
			return f[1:]
		}
	}
	b.Fatalf("the clients' process ended before %q: %v", want, r.out.Err())
	return nil
}

// rlqsRun is what a command cost and brought: the server's CPU time and
// the clients', the messages and the bucket actions they received.
type rlqsRun struct {
	server, client time.Duration
	msgs, actions  int64
}

// do has the clients run cmd and adds what it cost and brought to run.
func (r *rlqsBench) do(b *testing.B, cmd string, run *rlqsRun) {
	b.Helper()
	before := cpuTime()
	if _, err := fmt.Fprintln(r.in, cmd); err != nil {
		b.Fatal(err)
	}
	f := r.await(b, "done")
	run.server += cpuTime() - before
	var n [3]int64
	for i := range n {
		var err error
		if len(f) != len(n) {
			err = fmt.Errorf("%d fields", len(f))
		} else {
			n[i], err = strconv.ParseInt(f[i], 10, 64)
		}
		if err != nil {
			b.Fatalf("the clients' answer %q: %v", f, err)
		}
	}
	run.client += time.Duration(n[0])
	run.msgs += n[1]
	run.actions += n[2]
}

// shares reports run's CPU shares over wall, in cores (1 is one core
// busy), and what the clients received a second.
func (run *rlqsRun) shares(b *testing.B, wall time.Duration) {
	b.ReportMetric(float64(run.server)/float64(wall), "cpu-share")
	b.ReportMetric(float64(run.client)/float64(wall), "client-cpu-share")
	b.ReportMetric(float64(run.msgs)/wall.Seconds(), "msgs/s")
	b.ReportMetric(float64(run.actions)/wall.Seconds(), "actions/s")
}

// cpuTime is this process's CPU time so far, user and system (0 where
// it cannot be read: the benchmarks' CPU figures are then 0).
func cpuTime() time.Duration {
	d, _ := procs.ProcessCPU()
	return d
}

// rlqsNoRounds has rounds an hour apart, and so the TTL and the slack an
// hour or more (leases that long hold back the rises that cuts would
// make room for, and no report shares a budget again at once: nothing is
// pushed).
var rlqsNoRounds = rlqs.Config{Round: time.Hour}

// One Envoy's report of its 100 buckets over gRPC, sent and answered: a
// closed loop, each of the 1,000 streams sending its next report once
// the last is answered, its share of b.N. Per report: ns/op is the wall
// time (the two cores shared by both processes), cpu-ms/report the
// server's CPU time, client-cpu-ms/report the clients', pushes/report the
// messages the clients received beyond one answer a report. As in
// BenchmarkRLQSReport the server's clock moves 5ms a report (each stream
// reports every 5s of it, the time a report measures its demand over);
// unlike it, there are no rounds (rlqsNoRounds: the rounds' ticker would
// run them, its CPU time counted here); BenchmarkRLQSReportNoRounds is
// its counterpart without gRPC.
func BenchmarkRLQSReportGRPC(b *testing.B) {
	r := startRLQSBench(b, simRules, rlqsNoRounds, 5*time.Second/rlqsBenchStreams)
	b.ResetTimer()
	var run rlqsRun
	r.do(b, fmt.Sprintf("report %d", b.N), &run)
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(b.N) }
	b.ReportMetric(ms(run.server), "cpu-ms/report")
	b.ReportMetric(ms(run.client), "client-cpu-ms/report")
	b.ReportMetric(float64(run.msgs-int64(b.N))/float64(b.N), "pushes/report")
}

// BenchmarkRLQSReport's report with rlqsNoRounds, and its CPU time
// (both cores: the collector's too): BenchmarkRLQSReportGRPC without
// gRPC.
func BenchmarkRLQSReportNoRounds(b *testing.B) {
	s, sts, wires := rlqsFleet(b, RLQSOptions{Config: rlqsNoRounds})
	b.ReportAllocs()
	b.ResetTimer()
	before := cpuTime()
	for i := range b.N {
		k := i % len(sts)
		var m rlqspb.RateLimitQuotaUsageReports
		if err := proto.Unmarshal(wires[k], &m); err != nil {
			b.Fatal(err)
		}
		s.now += 5 * simSec / int64(len(sts))
		if _, err := s.q.report(s.now, sts[k], &m); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-before)/float64(time.Millisecond)/float64(b.N), "cpu-ms/report")
}

// The fleet as it runs, in real time: every stream reports its 100
// buckets every 5s (the streams staggered over the 5s), and the rounds
// every second push the grants that change or that they refresh; each op
// is one 5s cycle. cpu-share is the server's CPU time over the wall
// time, in cores (1 is one core busy); client-cpu-share the clients';
// msgs/s and actions/s what the clients received a second (answers and
// pushes; bucket actions in them).
func BenchmarkRLQSFleetGRPC(b *testing.B) { fleetGRPC(b, simRules) }

// The same fleet with budgets twice the clients' demand: steady budgets,
// whose grants have the steady TTL, which reports renew (the rounds
// resend almost nothing).
func BenchmarkRLQSFleetSteadyGRPC(b *testing.B) {
	fleetGRPC(b, strings.Replace(simRules, "requests_per_unit: 6000", "requests_per_unit: 12000", 1))
}

func fleetGRPC(b *testing.B, rules string) {
	r := startRLQSBench(b, rules, rlqs.Config{}, 0)
	b.ResetTimer()
	start := time.Now()
	var run rlqsRun
	r.do(b, fmt.Sprintf("fleet %d", b.N), &run)
	run.shares(b, time.Since(start))
}

// The rounds alone: for each 5s op the clients report nothing (they
// reported for a 5s cycle just before, outside the timer, so that their
// demand is known and outgrows every budget: a holder silent for three
// report intervals takes no share), and the rounds every second push the
// grants they refresh (a grant is resent once a round and the slack, 2s,
// would take it past its 3s TTL: each holder's every round or every
// other, as the rounds' ticks fall). Metrics as
// BenchmarkRLQSFleetGRPC's.
func BenchmarkRLQSRoundsGRPC(b *testing.B) {
	r := startRLQSBench(b, simRules, rlqs.Config{}, 0)
	b.ResetTimer()
	var run rlqsRun
	var wall time.Duration
	for range b.N {
		b.StopTimer()
		r.do(b, "fleet 1", &rlqsRun{})
		b.StartTimer()
		start := time.Now()
		r.do(b, "quiet 1", &run)
		wall += time.Since(start)
	}
	run.shares(b, wall)
}

// TestRLQSBenchClient is the clients of the benchmarks above, run in a
// child process by them; it skips unless rlqsBenchEnv is set. It opens
// the streams, has each report once and answers "ready"; then it reads
// commands on stdin until EOF, answering each "done <cpu ns> <messages
// received> <bucket actions in them>":
//   - report N: N reports, each stream sending its next once the last
//     is answered;
//   - fleet N: N cycles of 5s, each stream reporting every 5s;
//   - quiet N: N cycles of 5s, no stream reporting.
func TestRLQSBenchClient(t *testing.T) {
	addr := os.Getenv(rlqsBenchEnv)
	if addr == "" {
		t.Skip("the clients of the RLQS gRPC benchmarks, run by them (" + rlqsBenchEnv + " unset)")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := make([]*rlqsBenchClient, rlqsBenchStreams)
	var total, actions atomic.Int64
	var wg sync.WaitGroup
	for i := range cs {
		c, err := newRLQSBenchClient(ctx, addr, i, &total, &actions)
		if err != nil {
			t.Fatal(err)
		}
		defer c.conn.Close()
		cs[i] = c
		wg.Add(1)
		go func() { defer wg.Done(); c.drain() }()
	}
	for _, c := range cs {
		if err := c.send(); err != nil {
			t.Fatal(err)
		}
	}
	if err := waitAnswered(cs); err != nil {
		t.Fatal(err)
	}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) != 2 {
			t.Fatalf("command %q", in.Text())
		}
		n, err := strconv.Atoi(f[1])
		if err != nil {
			t.Fatalf("command %q", in.Text())
		}
		before, got, acts := cpuTime(), total.Load(), actions.Load()
		switch f[0] {
		case "report":
			err = each(cs, func(i int, c *rlqsBenchClient) error {
				for range n/len(cs) + btoi(i < n%len(cs)) {
					if err := c.send(); err != nil {
						return err
					}
					select {
					case <-c.got: // its answer (or a push: the next waits less)
					case <-c.ended:
						return fmt.Errorf("stream %d: %w", i, c.err)
					}
				}
				return nil
			})
		case "fleet":
			const cycle = 5 * time.Second
			t0 := time.Now()
			err = each(cs, func(i int, c *rlqsBenchClient) error {
				for k := range n {
					time.Sleep(time.Until(t0.Add(time.Duration(k)*cycle + time.Duration(i)*cycle/time.Duration(len(cs)))))
					if err := c.send(); err != nil {
						return err
					}
				}
				return nil
			})
			time.Sleep(time.Until(t0.Add(time.Duration(n) * cycle)))
		case "quiet":
			time.Sleep(time.Duration(n) * 5 * time.Second)
		default:
			t.Fatalf("command %q", in.Text())
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := waitAnswered(cs); err != nil {
			t.Fatal(err)
		}
		fmt.Println("done", int64(cpuTime()-before), total.Load()-got, actions.Load()-acts)
	}
	for _, c := range cs {
		if err := c.stream.CloseSend(); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}

// rlqsBenchClient is one Envoy: a connection, a stream, a report.
type rlqsBenchClient struct {
	conn   *grpc.ClientConn
	stream rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient
	report *rlqspb.RateLimitQuotaUsageReports
	// sent and received count the stream's messages, total and actions
	// all streams' messages and bucket actions received; got has a token
	// for each message received (dropped when full); ended is closed
	// when the stream has ended, with err.
	sent, received atomic.Int64
	total, actions *atomic.Int64
	got, ended     chan struct{}
	err            error
}

func newRLQSBenchClient(ctx context.Context, addr string, i int, total, actions *atomic.Int64) (*rlqsBenchClient, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	stream, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		return nil, err
	}
	m := &rlqspb.RateLimitQuotaUsageReports{Domain: "sim"}
	for j := range rlqsBenchBuckets {
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, usageOf(map[string]string{"name": fmt.Sprintf("b%05d", (i*rlqsBenchBuckets+j)%rlqsBenchBudgets)}, 40, 10))
	}
	return &rlqsBenchClient{conn: conn, stream: stream, report: m, total: total, actions: actions, got: make(chan struct{}, 64), ended: make(chan struct{})}, nil
}

func (c *rlqsBenchClient) send() error {
	c.sent.Add(1)
	return c.stream.Send(c.report)
}

// drain receives the stream's messages until it ends.
func (c *rlqsBenchClient) drain() {
	for {
		m, err := c.stream.Recv()
		if err != nil {
			c.err = err
			close(c.ended)
			return
		}
		c.received.Add(1)
		c.total.Add(1)
		c.actions.Add(int64(len(m.GetBucketAction())))
		select {
		case c.got <- struct{}{}:
		default:
		}
	}
}

// waitAnswered waits until every stream has received at least as many
// messages as it sent (a push may stand in for an answer still on its
// way), and empties the tokens; or until a stream ends.
func waitAnswered(cs []*rlqsBenchClient) error {
	for i, c := range cs {
		for c.received.Load() < c.sent.Load() {
			select {
			case <-c.ended:
				return fmt.Errorf("stream %d: %w", i, c.err)
			case <-time.After(time.Millisecond):
			}
		}
		for len(c.got) > 0 {
			<-c.got
		}
	}
	return nil
}

// each runs f for every client at once and returns the first error.
func each(cs []*rlqsBenchClient, f func(int, *rlqsBenchClient) error) error {
	errs := make(chan error, len(cs))
	for i, c := range cs {
		go func() { errs <- f(i, c) }()
	}
	var first error
	for range cs {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
