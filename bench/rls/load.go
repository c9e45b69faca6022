package rls

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The workload: every call carries one descriptor with one entry,
// {DescriptorKey: value}. The values are Keys distinct user values, each with
// its own counter under the config's key-only rule, and after every
// HotEvery of them the value HotValue, which the config holds to a tight
// limit, so a steady share of the calls is over the limit.
const (
	Domain        = "bench"
	DescriptorKey = "user"
	HotValue      = "hot"
	Keys          = 10_000
	HotEvery      = 100
	// UserLimit is each user value's limit per second: far above what one
	// value sees (the calls spread over Keys values), so those calls pass.
	UserLimit = 1_000_000
	// HotLimit is the hot value's limit per second; it gets one call in
	// HotEvery+1, so above (HotEvery+1)*HotLimit calls/s most of its calls
	// are over the limit.
	HotLimit = 10
	// Callers is the number of concurrent callers of a run.
	Callers = 64
)

// Config is the rate-limit configuration both servers load: envoyproxy/ratelimit's
// YAML format, one domain, a key-only rule (each value its own counter) and
// a tight rule on one value.
var Config = fmt.Sprintf(`domain: %s
descriptors:
  - key: %s
    rate_limit:
      unit: second
      requests_per_unit: %d
  - key: %s
    value: %s
    rate_limit:
      unit: second
      requests_per_unit: %d
`, Domain, DescriptorKey, UserLimit, DescriptorKey, HotValue, HotLimit)

// Request returns the request for one descriptor value, hits_addend 1.
func Request(value string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{
		Domain: Domain,
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: DescriptorKey, Value: value}},
		}},
		HitsAddend: 1,
	}
}

// Values returns the descriptor values of the workload in the order the
// callers walk them: "u0" … "u9999", with HotValue after every HotEvery.
func Values() []string {
	vs := make([]string, 0, Keys+Keys/HotEvery)
	for i := range Keys {
		vs = append(vs, "u"+strconv.Itoa(i))
		if (i+1)%HotEvery == 0 {
			vs = append(vs, HotValue)
		}
	}
	return vs
}

// wireRequest is a request marshalled once; rawCodec sends its bytes as they are.
type wireRequest struct{ data mem.BufferSlice }

// wireResponse receives the overall code of a response; rawCodec decodes
// nothing else.
type wireResponse struct {
	code    rlsv3.RateLimitResponse_Code
	scratch [512]byte
}

// rawCodec lets the load generator's calls skip protobuf's reflection: the
// requests are marshalled before the run, and of each response only
// overall_code (field 1) is read. It names itself "proto": the server
// decodes and encodes as usual.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	r, ok := v.(*wireRequest)
	if !ok {
		return nil, fmt.Errorf("rls: rawCodec cannot marshal %T", v)
	}
	return r.data, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*wireResponse)
	if !ok {
		return fmt.Errorf("rls: rawCodec cannot unmarshal into %T", v)
	}
	var b []byte
	if n := data.Len(); n <= len(r.scratch) {
		data.CopyTo(r.scratch[:n])
		b = r.scratch[:n]
	} else {
		b = data.Materialize()
	}
	code, err := overallCode(b)
	r.code = code
	return err
}

var _ encoding.CodecV2 = rawCodec{}

// overallCode reads field 1 (overall_code) of a marshalled
// RateLimitResponse; absent, it is UNKNOWN (0), as proto3 omits it.
func overallCode(b []byte) (rlsv3.RateLimitResponse_Code, error) {
	code := rlsv3.RateLimitResponse_UNKNOWN
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, fmt.Errorf("rls: bad response: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if num == 1 && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, fmt.Errorf("rls: bad response: %w", protowire.ParseError(n))
			}
			code = rlsv3.RateLimitResponse_Code(v)
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return 0, fmt.Errorf("rls: bad response: %w", protowire.ParseError(n))
		}
		b = b[n:]
	}
	return code, nil
}

// Generator names a load generator.
type Generator string

// The load generators. Both send the same pre-marshalled requests, read
// only overall_code of each response, keep Options.Callers calls in flight
// (closed loop: a call's end starts the caller's next one) and record every
// call's latency.
const (
	// H2 speaks HTTP/2 itself (golang.org/x/net/http2's Framer and hpack):
	// each request's HEADERS block and DATA frame are encoded before the
	// run, one goroutine per connection reads the responses and writes the
	// next calls' frames, one flush per batch of frames read.
	H2 Generator = "h2"
	// GRPC calls through grpc-go's client, one goroutine per caller, with a
	// pass-through codec.
	GRPC Generator = "grpc"
)

// Generators lists the load generators, the default first.
var Generators = []Generator{H2, GRPC}

// Options sets up a run of the load generator.
type Options struct {
	Generator Generator     // the load generator; "" means H2 (used by Measure)
	Callers   int           // concurrent callers; 0 means Callers
	Conns     int           // connections shared by the callers (caller i uses i mod Conns); 0 means 4
	Duration  time.Duration // how long to call; ignored when Calls > 0
	Calls     int64         // the number of calls to make in all, if > 0
	Timeout   time.Duration // the run ends if no call completes for this long; 0 means 10 s
	// Values are the descriptor values the callers walk, in turn, when
	// Measure dials; nil means the workload's (Values).
	Values []string
}

// Result is what a run measured. Only the load generator's side: the
// caller adds the processes' CPU.
type Result struct {
	Calls    int64         // calls answered (OK or OVER_LIMIT)
	Over     int64         // of them OVER_LIMIT
	Errors   int64         // calls that failed or got another code
	FirstErr error         // the first failure, if any
	Elapsed  time.Duration // wall time of the run
	Hist     Hist          // latency of every call, failed ones too
}

// Rate returns the answered calls per second.
func (r *Result) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Calls) / r.Elapsed.Seconds()
}

// Loader is a load generator connected to one server.
type Loader interface {
	// Run calls the server until o.Duration has passed or o.Calls calls
	// were made, and returns what it measured.
	Run(ctx context.Context, o Options) (*Result, error)
	// Close closes the connections.
	Close() error
}

// DialLoader connects the load generator g ("" means H2) to addr, a
// loopback host:port, over conns connections (0 means 4).
func DialLoader(g Generator, addr string, conns int) (Loader, error) {
	return DialLoaderValues(g, addr, conns, nil)
}

// DialLoaderValues is DialLoader whose callers walk values (nil: the
// workload's, Values).
func DialLoaderValues(g Generator, addr string, conns int, values []string) (Loader, error) {
	reqs, err := marshalValues(values)
	if err != nil {
		return nil, err
	}
	switch g {
	case H2, "":
		return dialH2(addr, conns, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, reqs)
	case GRPC:
		return dialGRPC(addr, conns, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, reqs)
	}
	return nil, fmt.Errorf("rls: unknown load generator %q (want h2 or grpc)", g)
}

// marshalWorkload returns the workload's requests, marshalled.
func marshalWorkload() ([][]byte, error) { return marshalValues(nil) }

// marshalValues returns the requests of values (nil: the workload's),
// marshalled.
func marshalValues(values []string) ([][]byte, error) {
	if values == nil {
		values = Values()
	}
	var out [][]byte
	for _, v := range values {
		b, err := proto.Marshal(Request(v))
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// tally is what one caller (grpc) or one connection (h2) counted; its
// histogram is large, so each lives on the heap apart from the others.
type tally struct {
	hist              Hist
	calls, over, errs int64
	firstErr          error
}

// record counts one call that took d and got code, or failed with err.
func (t *tally) record(d time.Duration, code rlsv3.RateLimitResponse_Code, err error) {
	t.hist.Record(d)
	switch {
	case err != nil:
		t.errs++
		if t.firstErr == nil {
			t.firstErr = err
		}
	case code == rlsv3.RateLimitResponse_OK:
		t.calls++
	case code == rlsv3.RateLimitResponse_OVER_LIMIT:
		t.calls++
		t.over++
	default:
		t.errs++
		if t.firstErr == nil {
			t.firstErr = fmt.Errorf("ShouldRateLimit: overall_code %v", code)
		}
	}
}

// run is the state a run's callers share: its context, which the watchdog
// cancels when no call has completed for Options.Timeout, the stop flag the
// end of Duration sets, and the budget of calls.
type run struct {
	o      Options
	ctx    context.Context
	cancel context.CancelFunc
	done   atomic.Int64 // calls completed, for the watchdog
	stop   atomic.Bool
	budget atomic.Int64
	start  time.Time
}

// startRun checks o, fills in its defaults and starts the watchdog; the
// caller must call finish.
func startRun(ctx context.Context, o Options) (*run, error) {
	if o.Callers <= 0 {
		o.Callers = Callers
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Calls <= 0 && o.Duration <= 0 {
		return nil, errors.New("rls: Run needs a Duration or a number of Calls")
	}
	r := &run{o: o}
	// A call that hangs ends when no call at all has completed for
	// o.Timeout: the watchdog below cancels r.ctx, which every call shares
	// (a context per call would allocate).
	r.ctx, r.cancel = context.WithCancel(ctx)
	r.budget.Store(o.Calls)
	go func() {
		t := time.NewTicker(o.Timeout)
		defer t.Stop()
		last := int64(-1)
		for {
			select {
			case <-r.ctx.Done():
				return
			case <-t.C:
				if n := r.done.Load(); n != last {
					last = n
					continue
				}
				r.cancel()
				return
			}
		}
	}()
	r.start = time.Now()
	return r, nil
}

// take reports whether a caller may start another call.
func (r *run) take() bool {
	if r.stop.Load() {
		return false
	}
	return r.o.Calls <= 0 || r.budget.Add(-1) >= 0
}

// wait lets the callers run for o.Duration or until they return, whichever
// comes first (with Calls set, until they return), stops them and waits for
// them.
func (r *run) wait(parent context.Context, wg *sync.WaitGroup) {
	if r.o.Calls <= 0 {
		all := make(chan struct{})
		go func() { wg.Wait(); close(all) }()
		t := time.NewTimer(r.o.Duration)
		select {
		case <-t.C:
		case <-all: // the callers gave up early (a connection failed)
		case <-parent.Done():
		case <-r.ctx.Done():
		}
		t.Stop()
		r.stop.Store(true)
	}
	wg.Wait()
}

// finish stops the watchdog and adds up the tallies; err is the run's
// error, if any (the watchdog's, or the parent context's).
func (r *run) finish(parent context.Context, ts []*tally) (*Result, error) {
	res := &Result{Elapsed: time.Since(r.start)}
	hung := parent.Err() == nil && r.ctx.Err() != nil
	r.cancel()
	for _, t := range ts {
		res.Calls += t.calls
		res.Over += t.over
		res.Errors += t.errs
		if res.FirstErr == nil {
			res.FirstErr = t.firstErr
		}
		res.Hist.Merge(&t.hist)
	}
	if hung {
		return res, fmt.Errorf("rls: no call completed for %v", r.o.Timeout)
	}
	return res, parent.Err()
}

// Client is grpc-go's side of one server: Conns gRPC connections to it and
// the workload's requests marshalled once. Its Run is the GRPC generator.
type Client struct {
	conns  []*grpc.ClientConn
	reqs   []wireRequest
	method string
	codec  grpc.CallOption
}

// Dial connects conns gRPC connections (0 means 4) to addr, a loopback
// host:port, and marshals the workload's requests.
func Dial(addr string, conns int) (*Client, error) {
	reqs, err := marshalWorkload()
	if err != nil {
		return nil, err
	}
	return dialGRPC(addr, conns, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, reqs)
}

// dialGRPC is Dial with the method's full name and the marshalled requests.
func dialGRPC(addr string, conns int, method string, reqs [][]byte) (*Client, error) {
	if conns <= 0 {
		conns = 4
	}
	c := &Client{codec: grpc.ForceCodecV2(rawCodec{}), method: method}
	for range conns {
		cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			c.Close()
			return nil, err
		}
		c.conns = append(c.conns, cc)
	}
	for _, b := range reqs {
		c.reqs = append(c.reqs, wireRequest{data: mem.BufferSlice{mem.SliceBuffer(b)}})
	}
	return c, nil
}

// Close closes the connections.
func (c *Client) Close() error {
	var errs []error
	for _, cc := range c.conns {
		errs = append(errs, cc.Close())
	}
	return errors.Join(errs...)
}

// Check makes one call through the generated client (full protobuf
// decoding) with the descriptor value v and returns the response.
func (c *Client) Check(ctx context.Context, v string) (*rlsv3.RateLimitResponse, error) {
	return rlsv3.NewRateLimitServiceClient(c.conns[0]).ShouldRateLimit(ctx, Request(v))
}

// Run calls the server from o.Callers goroutines, each walking the workload's
// requests from its own offset, until o.Duration has passed or o.Calls calls
// were made, and returns what it measured.
func (c *Client) Run(ctx context.Context, o Options) (*Result, error) {
	r, err := startRun(ctx, o)
	if err != nil {
		return nil, err
	}
	ts := make([]*tally, r.o.Callers)
	var wg sync.WaitGroup
	for i := range ts {
		w := new(tally)
		ts[i] = w
		cc := c.conns[i%len(c.conns)]
		next := i * len(c.reqs) / len(ts)
		wg.Go(func() {
			var resp wireResponse
			for r.take() {
				req := &c.reqs[next]
				if next++; next == len(c.reqs) {
					next = 0
				}
				t0 := time.Now()
				err := cc.Invoke(r.ctx, c.method, req, &resp, c.codec)
				if err != nil {
					err = fmt.Errorf("ShouldRateLimit: %v", status.Convert(err))
				}
				w.record(time.Since(t0), resp.code, err)
				r.done.Add(1)
				if err != nil && r.ctx.Err() != nil {
					return
				}
			}
		})
	}
	r.wait(ctx, &wg)
	res, err := r.finish(ctx, ts)
	if err != nil {
		return nil, err
	}
	return res, nil
}
